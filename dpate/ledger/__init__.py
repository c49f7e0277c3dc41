"""The site's privacy ledger: append-only, hash-chained, one per site, usable without Prefect
(docs/how-to/ledger.md). Every name is imported from this package (``from dpate.ledger import
PrivacyLedger``); its modules are private:

- ``_privacy_ledger``: :class:`PrivacyLedger`, the appends (``CAP``, ``RESERVE``, ``COMMIT``) under
  the append lock, budget before noise, one draw per release.
- ``_reads``: opening a ledger and its reads (:class:`LedgerReader`).
- ``_chain``: the rows, their hash chain (:func:`row_hash`, :data:`GENESIS`), release ids, the
  spend and the ledger's errors.
- ``_verify``: the audit of a chain.
- ``_engine``: ledger URLs (:func:`as_sqlalchemy_url`, :func:`shown_url`) and the SQLAlchemy
  engine.
- ``_sqlite_file``: a SQLite-file ledger read with :mod:`sqlite3` alone (:func:`open_reader`,
  :func:`read_site_spend`: the checking commands start without SQLAlchemy).
- ``_anchors``: the ledger's heads checked against the heads it published (a restored older copy
  refuses to spend).

The names are imported from their modules on first use (PEP 562), so that a command which reads a
SQLite ledger (:func:`read_site_spend`) does not import SQLAlchemy.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpate.ledger._anchors import (
        AnchorReport,
        LedgerBehindError,
        PublishedHead,
        check_anchors,
        published_heads,
        require_not_behind,
        verify_against_reports,
    )
    from dpate.ledger._chain import (
        GENESIS,
        BudgetExceededError,
        CapMismatchError,
        Committed,
        Event,
        LedgerError,
        LedgerNotFoundError,
        Reservation,
        SiteSpend,
        VerifyReport,
        budget_text,
        release_id,
        row_hash,
    )
    from dpate.ledger._engine import as_sqlalchemy_url, shown_url, sqlite_file_missing
    from dpate.ledger._privacy_ledger import PrivacyLedger, ledger_exists
    from dpate.ledger._reads import LedgerReader
    from dpate.ledger._sqlite_file import open_reader, read_site_spend

#: each public name and the private module that defines it
_EXPORTS = {
    **dict.fromkeys(
        (
            "AnchorReport",
            "LedgerBehindError",
            "PublishedHead",
            "check_anchors",
            "published_heads",
            "require_not_behind",
            "verify_against_reports",
        ),
        "dpate.ledger._anchors",
    ),
    **dict.fromkeys(
        (
            "GENESIS",
            "BudgetExceededError",
            "CapMismatchError",
            "Committed",
            "Event",
            "LedgerError",
            "LedgerNotFoundError",
            "Reservation",
            "SiteSpend",
            "VerifyReport",
            "budget_text",
            "release_id",
            "row_hash",
        ),
        "dpate.ledger._chain",
    ),
    **dict.fromkeys(
        ("as_sqlalchemy_url", "shown_url", "sqlite_file_missing"), "dpate.ledger._engine"
    ),
    "PrivacyLedger": "dpate.ledger._privacy_ledger",
    "ledger_exists": "dpate.ledger._privacy_ledger",
    "LedgerReader": "dpate.ledger._reads",
    "open_reader": "dpate.ledger._sqlite_file",
    "read_site_spend": "dpate.ledger._sqlite_file",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpate.ledger' has no attribute {name!r}")


__all__ = [
    "GENESIS",
    "AnchorReport",
    "BudgetExceededError",
    "CapMismatchError",
    "Committed",
    "Event",
    "LedgerBehindError",
    "LedgerError",
    "LedgerNotFoundError",
    "LedgerReader",
    "PrivacyLedger",
    "PublishedHead",
    "Reservation",
    "SiteSpend",
    "VerifyReport",
    "as_sqlalchemy_url",
    "budget_text",
    "check_anchors",
    "ledger_exists",
    "open_reader",
    "published_heads",
    "read_site_spend",
    "release_id",
    "require_not_behind",
    "row_hash",
    "shown_url",
    "sqlite_file_missing",
    "verify_against_reports",
]
