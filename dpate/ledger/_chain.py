"""The privacy ledger's rows and hash chain: canonical JSON, release ids, the row hash, and the
records the ledger hands out (events, reservations, commits, a site's spend, a verify report).

``row_hash = sha256(prev_hash + "\\n" + canonical JSON of the row's other columns)``, with
:data:`GENESIS` (64 zeros) before the first row. The ledger itself is :mod:`dpate.ledger`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpate.errors import DpateError, ExitCode
from dpate_core.privacy import PrivacyParams, check_budget, exact, fraction_str

__all__ = [
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
    "canonical_json",
    "privacy_of",
    "release_id",
    "row_hash",
    "site_spend",
]

GENESIS = "0" * 64


class LedgerError(DpateError, RuntimeError):
    """The ledger refuses an operation; the message says why and what to do next."""

    exit_code = ExitCode.LEDGER
    cause = "privacy ledger"


class LedgerNotFoundError(LedgerError):
    """No ledger at the URL (SQLite: no file or no ledger table; PostgreSQL: no table)."""

    cause = "no privacy ledger"


class BudgetExceededError(LedgerError):
    """A reservation would take the site's spend past its lifetime cap."""

    cause = "privacy budget refused"


class CapMismatchError(LedgerError):
    """A study spec asks for a different lifetime cap than the one recorded in the ledger."""

    cause = "privacy ledger cap"


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, floats by ``repr`` (exact round trip)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def release_id(
    study_id: str, site_id: str, spec_hash: str, round: str, part: str | None = None
) -> str:
    """Deterministic release id: sha256 of the canonical JSON ``[study, site, spec_hash, round]``;
    a round's other release at the site (``part``, e.g. ``"balance"``, the covariate-balance
    table) appends its name, so it is a release of its own in the ledger."""
    key = [str(study_id), str(site_id), str(spec_hash), str(round)]
    text = canonical_json(key if part is None else [*key, str(part)])
    return hashlib.sha256(text.encode()).hexdigest()


def row_hash(prev_hash: str, content: Mapping[str, Any]) -> str:
    """``sha256(prev_hash + "\\n" + canonical JSON of the row's other columns)``, hex."""
    return hashlib.sha256((prev_hash + "\n" + canonical_json(dict(content))).encode()).hexdigest()


def privacy_of(eps: str | None, delta: str | None) -> PrivacyParams:
    return PrivacyParams(exact(eps or "0", "epsilon"), exact(delta or "0", "delta"))


def budget_text(p: PrivacyParams) -> str:
    return f"epsilon {fraction_str(p.epsilon)}, delta {fraction_str(p.delta)}"


@dataclass(frozen=True)
class Event:
    """One ledger row, as stored."""

    seq: int
    kind: str
    site_id: str
    release_id: str | None
    study_id: str | None
    spec_hash: str | None
    round: str | None
    epsilon: str | None
    delta: str | None
    cap_epsilon: str | None
    cap_delta: str | None
    payload: str
    created_at: str
    prev_hash: str
    row_hash: str

    def content(self) -> dict[str, Any]:
        """The hashed columns (everything but ``row_hash``)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "site_id": self.site_id,
            "release_id": self.release_id,
            "study_id": self.study_id,
            "spec_hash": self.spec_hash,
            "round": self.round,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "cap_epsilon": self.cap_epsilon,
            "cap_delta": self.cap_delta,
            "payload": self.payload,
            "created_at": self.created_at,
            "prev_hash": self.prev_hash,
        }

    @property
    def privacy(self) -> PrivacyParams:
        return privacy_of(self.epsilon, self.delta)

    @property
    def cap(self) -> PrivacyParams:
        return privacy_of(self.cap_epsilon, self.cap_delta)


@dataclass(frozen=True)
class Committed:
    """A release's recorded public output: the COMMIT row's payload, time and hash.

    ``seq`` and ``row_hash`` are the ledger head right after this COMMIT; the site report carries
    them so the public reports anchor the ledger (``dpate ledger verify --against-reports``)."""

    release_id: str
    payload: dict[str, Any]
    committed_at: str
    row_hash: str
    seq: int | None = None


@dataclass(frozen=True)
class Reservation:
    """The state of one release after :meth:`PrivacyLedger.reserve`.

    ``new`` is True when this call debited the budget. ``committed`` holds the recorded public
    output when the release was already committed (then nothing may be drawn: return it).
    """

    release_id: str
    site_id: str
    study_id: str
    privacy: PrivacyParams
    cap: PrivacyParams
    spent_after: PrivacyParams
    new: bool
    committed: Committed | None = None


@dataclass(frozen=True)
class SiteSpend:
    """A site's budget: the cap in force, the total reserved, per study, and what remains."""

    site_id: str
    cap: PrivacyParams | None
    spent: PrivacyParams
    per_study: dict[str, PrivacyParams]
    releases: dict[str, tuple[int, int]]  # study -> (reserved, committed)

    @property
    def remaining(self) -> PrivacyParams | None:
        """What the cap leaves (:func:`dpate_core.privacy.check_budget`); None without a cap."""
        if self.cap is None:
            return None
        return check_budget(self.cap, self.spent).remaining


@dataclass(frozen=True)
class VerifyReport:
    """What :meth:`PrivacyLedger.verify` found: ``ok`` when ``problems`` is empty."""

    ok: bool
    rows: int
    head_hash: str
    problems: list[str] = field(default_factory=list)


def site_spend(site_id: str, events: list[Event]) -> SiteSpend:
    """Cap, total spend and spend per study of one site (exact), from its events in order."""
    cap = None
    per_study: dict[str, PrivacyParams] = {}
    releases: dict[str, list[int]] = {}
    reserve_study: dict[str, str] = {}
    total = PrivacyParams(Fraction(0), Fraction(0))
    for e in events:
        if e.kind == "CAP":
            cap = e.cap
        elif e.kind == "RESERVE":
            s = e.study_id or ""
            per_study[s] = per_study.get(s, PrivacyParams(Fraction(0))) + e.privacy
            total = total + e.privacy
            releases.setdefault(s, [0, 0])[0] += 1
            reserve_study[e.release_id or ""] = s
        elif e.kind == "COMMIT":
            s = reserve_study.get(e.release_id or "", e.study_id or "")
            releases.setdefault(s, [0, 0])[1] += 1
    return SiteSpend(site_id, cap, total, per_study, {k: (v[0], v[1]) for k, v in releases.items()})
