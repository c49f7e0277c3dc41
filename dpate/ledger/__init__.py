"""The site's privacy ledger: append-only, hash-chained, one per site, usable without Prefect
(docs/how-to/ledger.md).

- :mod:`dpate.ledger.privacy_ledger`: :class:`PrivacyLedger`, the appends (``CAP``, ``RESERVE``,
  ``COMMIT``) under the append lock, budget before noise, one draw per release.
- :mod:`dpate.ledger.reads`: opening a ledger and its reads (:class:`LedgerReader`).
- :mod:`dpate.ledger.chain`: the rows, their hash chain, the spend and the ledger's errors.
- :mod:`dpate.ledger.verify`: the audit of a chain.
- :mod:`dpate.ledger.engine`: ledger URLs and the SQLAlchemy engine.
- :mod:`dpate.ledger.sqlite_file`: a SQLite-file ledger read with :mod:`sqlite3` alone (the
  checking commands start without SQLAlchemy).
- :mod:`dpate.ledger.anchors`: the ledger's heads checked against the heads it published (a
  restored older copy refuses to spend).

The names below are imported from their modules on first use (PEP 562), so that a command which
reads a SQLite ledger with :mod:`dpate.ledger.sqlite_file` does not import SQLAlchemy.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpate.ledger.anchors import (
        LedgerBehindError,
        check_anchors,
        published_heads,
        require_not_behind,
        verify_against_reports,
    )
    from dpate.ledger.chain import (
        BudgetExceededError,
        CapMismatchError,
        Committed,
        Event,
        LedgerError,
        LedgerNotFoundError,
        Reservation,
        SiteSpend,
        VerifyReport,
    )
    from dpate.ledger.privacy_ledger import PrivacyLedger, ledger_exists
    from dpate.ledger.reads import LedgerReader

#: each public name and the module that defines it
_EXPORTS = {
    **dict.fromkeys(
        (
            "BudgetExceededError",
            "CapMismatchError",
            "Committed",
            "Event",
            "LedgerError",
            "LedgerNotFoundError",
            "Reservation",
            "SiteSpend",
            "VerifyReport",
        ),
        "dpate.ledger.chain",
    ),
    "PrivacyLedger": "dpate.ledger.privacy_ledger",
    "ledger_exists": "dpate.ledger.privacy_ledger",
    "LedgerReader": "dpate.ledger.reads",
    **dict.fromkeys(
        (
            "LedgerBehindError",
            "check_anchors",
            "published_heads",
            "require_not_behind",
            "verify_against_reports",
        ),
        "dpate.ledger.anchors",
    ),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpate.ledger' has no attribute {name!r}")


__all__ = [
    "BudgetExceededError",
    "CapMismatchError",
    "Committed",
    "Event",
    "LedgerBehindError",
    "LedgerError",
    "LedgerNotFoundError",
    "LedgerReader",
    "PrivacyLedger",
    "Reservation",
    "SiteSpend",
    "VerifyReport",
    "check_anchors",
    "ledger_exists",
    "published_heads",
    "require_not_behind",
    "verify_against_reports",
]
