"""The site's privacy ledger: append-only, hash-chained, one per site, usable without Prefect.

Every change is a new row (an *event*); nothing is ever UPDATEd or DELETEd:

``CAP``      the site's lifetime cap ``(epsilon, delta)``: pinned when the ledger is created
             (:meth:`PrivacyLedger.init`, ``dpate ledger init``), changed only by
             :meth:`PrivacyLedger.set_cap` (``dpate ledger set-cap``), never by a spec.
``RESERVE``  one release's ``(epsilon, delta)`` debited against the cap *before any noise is drawn*.
``COMMIT``   the release's noisy public output (``SiteEstimate.public_fields()`` as canonical JSON),
             recorded *before* it is returned, logged or published.

Each row carries ``prev_hash`` (the previous row's ``row_hash``; 64 zeros for the first) and
``row_hash = sha256(prev_hash + "\\n" + canonical JSON of the row's other columns)``, so
:meth:`PrivacyLedger.verify` detects an edited, deleted or reordered row (a deleted *last* row is
detected only against a head hash kept elsewhere: ``verify(expect_head=...)``).

Appends are serialised (SQLite ``BEGIN IMMEDIATE``; PostgreSQL a transaction-scoped advisory lock),
so concurrent reservations never pass the cap and the chain stays linear. ``UNIQUE(release_id,
kind)`` allows at most one RESERVE and one COMMIT per release. Spend and cap are compared exactly
(:class:`fractions.Fraction` parsed from the stored strings). The crash rule is in docs/ledger.md.

A ledger is never created implicitly: opening a URL that holds no ledger raises
:class:`LedgerNotFoundError` (SQLite: the file is not even created), naming the URL and the command
that creates it. Only :meth:`PrivacyLedger.init` (or ``create=True``) creates one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dpate_core.budget import NOTHING, check_budget
from dpate_core.privacy import PrivacyParams, exact, fraction_str

__all__ = [
    "GENESIS",
    "BudgetExceededError",
    "CapMismatchError",
    "Event",
    "LedgerError",
    "LedgerNotFoundError",
    "PrivacyLedger",
    "Reservation",
    "SiteSpend",
    "VerifyReport",
    "canonical_json",
    "ledger_exists",
    "release_id",
]

GENESIS = "0" * 64


class LedgerError(RuntimeError):
    """The ledger refuses an operation; the message says why and what to do next."""


class LedgerNotFoundError(LedgerError):
    """No ledger at the URL (SQLite: no file or no ledger table; PostgreSQL: no table)."""


class BudgetExceededError(LedgerError):
    """A reservation would take the site's spend past its lifetime cap."""


class CapMismatchError(LedgerError):
    """A study spec asks for a different lifetime cap than the one recorded in the ledger."""


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, floats by ``repr`` (exact round trip)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def release_id(study_id: str, site_id: str, spec_hash: str, round: str) -> str:
    """Deterministic release id: sha256 of the canonical JSON ``[study, site, spec_hash, round]``."""
    text = canonical_json([str(study_id), str(site_id), str(spec_hash), str(round)])
    return hashlib.sha256(text.encode()).hexdigest()


def _row_hash(prev_hash: str, content: Mapping[str, Any]) -> str:
    return hashlib.sha256((prev_hash + "\n" + canonical_json(dict(content))).encode()).hexdigest()


def _privacy(eps: str | None, delta: str | None) -> PrivacyParams:
    return PrivacyParams(exact(eps or "0", "epsilon"), exact(delta or "0", "delta"))


def _fmt(p: PrivacyParams) -> str:
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
        return _privacy(self.epsilon, self.delta)

    @property
    def cap(self) -> PrivacyParams:
        return _privacy(self.cap_epsilon, self.cap_delta)


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
        """What the cap leaves (:func:`dpate_core.budget.check_budget`); None without a cap."""
        if self.cap is None:
            return None
        return check_budget(self.cap, self.spent).remaining


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    rows: int
    head_hash: str
    problems: list[str] = field(default_factory=list)


class PrivacyLedger:
    """A privacy ledger at ``url`` (any SQLAlchemy URL; a plain path means a SQLite file).

    ``table_prefix`` names the table (``<prefix>ledger_events``); tests use a unique one per run.
    """

    def __init__(
        self,
        url: str,
        *,
        table_prefix: str = "dpate_",
        create: bool = False,
        site: str | None = None,
    ) -> None:
        self.url = as_sqlalchemy_url(url)
        self.table_name = f"{table_prefix}ledger_events"
        if not create and _sqlite_file_missing(self.url):
            raise LedgerNotFoundError(_not_found(self.url, site))
        self._engine = _make_engine(self.url, create=create)
        self._dialect = self._engine.dialect.name
        md = sa.MetaData()
        self.table = sa.Table(
            self.table_name,
            md,
            sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("kind", sa.String(16), nullable=False),
            sa.Column("site_id", sa.String(200), nullable=False),
            sa.Column("release_id", sa.String(64)),
            sa.Column("study_id", sa.String(200)),
            sa.Column("spec_hash", sa.String(128)),
            sa.Column("round", sa.String(200)),
            sa.Column("epsilon", sa.String(200)),
            sa.Column("delta", sa.String(200)),
            sa.Column("cap_epsilon", sa.String(200)),
            sa.Column("cap_delta", sa.String(200)),
            sa.Column("payload", sa.Text, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("prev_hash", sa.String(64), nullable=False),
            sa.Column("row_hash", sa.String(64), nullable=False, unique=True),
            sa.UniqueConstraint("release_id", "kind", name=f"{self.table_name}_release_kind"),
            sa.CheckConstraint(
                "kind IN ('CAP', 'RESERVE', 'COMMIT')", name=f"{self.table_name}_kind"
            ),
        )
        self._metadata = md
        try:
            if create:
                try:
                    md.create_all(self._engine, checkfirst=True)
                except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
                    # another process created the table between the check and the CREATE
                    md.create_all(self._engine, checkfirst=True)
            elif not sa.inspect(self._engine).has_table(self.table_name):
                self._engine.dispose()
                raise LedgerNotFoundError(_not_found(self.url, site))
        except sa.exc.OperationalError as exc:
            self._engine.dispose()
            raise LedgerError(
                f"cannot open the privacy ledger at {_shown(self.url)}: "
                f"{exc.orig}; check the ledger URL (DPATE_LEDGER_URL) and that its database is up"
            ) from None

    @classmethod
    def init(
        cls,
        url: str,
        site_id: str,
        cap: PrivacyParams,
        *,
        reason: str = "initial lifetime cap (dpate ledger init)",
        table_prefix: str = "dpate_",
    ) -> PrivacyLedger:
        """Create the ledger (if absent) and pin ``site_id``'s lifetime cap (a CAP event).

        Idempotent: a ledger already holding the same cap for the site is left unchanged; a
        different recorded cap is refused (change it with :meth:`set_cap`, audited).
        """
        if cap.epsilon <= 0:
            raise LedgerError(f"the lifetime epsilon cap must be positive (got {cap.epsilon})")
        led = cls(url, table_prefix=table_prefix, create=True)
        try:
            recorded = led.cap(site_id)
            if recorded is None:
                led.set_cap(site_id, cap, reason)
            elif recorded != cap:
                raise CapMismatchError(
                    f"site {site_id}: the ledger at {_shown(led.url)} already records a lifetime "
                    f"cap of {_fmt(recorded)}, not {_fmt(cap)}; change it explicitly: dpate "
                    f"ledger set-cap {site_id} --epsilon E --delta D --reason '...'"
                )
        except BaseException:
            led.close()
            raise
        return led

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _append_tx(self) -> Iterator[Connection]:
        """A transaction holding the ledger's append lock until it ends."""
        with self._engine.begin() as conn:
            if self._dialect == "postgresql":
                key = int.from_bytes(hashlib.sha256(self.table_name.encode()).digest()[:8], "big")
                key -= 1 << 63 if key >= 1 << 63 else 0
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            elif self._dialect != "sqlite":
                conn.execute(sa.select(self.table.c.seq).with_for_update().limit(1))
            yield conn

    def _rows(self, conn: Connection, *where: Any) -> list[Event]:
        q = sa.select(self.table).where(*where).order_by(self.table.c.seq)
        return [Event(**row._mapping) for row in conn.execute(q)]

    def _append(self, conn: Connection, **cols: Any) -> Event:
        head = conn.execute(
            sa.select(self.table.c.seq, self.table.c.row_hash)
            .order_by(self.table.c.seq.desc())
            .limit(1)
        ).first()
        seq, prev = (head.seq + 1, head.row_hash) if head else (1, GENESIS)
        content: dict[str, Any] = {c: None for c in Event.__dataclass_fields__}
        content.update(cols)
        content.update(
            seq=seq,
            prev_hash=prev,
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
        )
        content.pop("row_hash")
        content.setdefault("payload", "{}")
        if content["payload"] is None:
            content["payload"] = "{}"
        row_hash = _row_hash(prev, content)
        conn.execute(sa.insert(self.table).values(**content, row_hash=row_hash))
        return Event(**content, row_hash=row_hash)

    # -- reading -------------------------------------------------------------------------------

    def events(self, site_id: str | None = None) -> list[Event]:
        with self._engine.connect() as conn:
            where = () if site_id is None else (self.table.c.site_id == site_id,)
            return self._rows(conn, *where)

    def sites(self) -> list[str]:
        with self._engine.connect() as conn:
            q = sa.select(self.table.c.site_id).distinct().order_by(self.table.c.site_id)
            return [r[0] for r in conn.execute(q)]

    def committed(self, release_id: str) -> Committed | None:
        """The recorded public output of a committed release, else None."""
        with self._engine.connect() as conn:
            return self._committed(conn, release_id)

    def _committed(self, conn: Connection, rid: str) -> Committed | None:
        t = self.table
        row = conn.execute(
            sa.select(t.c.payload, t.c.created_at, t.c.row_hash, t.c.seq).where(
                t.c.release_id == rid, t.c.kind == "COMMIT"
            )
        ).first()
        if row is None:
            return None
        return Committed(rid, json.loads(row.payload), row.created_at, row.row_hash, row.seq)

    def cap(self, site_id: str) -> PrivacyParams | None:
        with self._engine.connect() as conn:
            return self._cap(conn, site_id)

    def _cap(self, conn: Connection, site_id: str) -> PrivacyParams | None:
        t = self.table
        row = conn.execute(
            sa.select(t.c.cap_epsilon, t.c.cap_delta)
            .where(t.c.site_id == site_id, t.c.kind == "CAP")
            .order_by(t.c.seq.desc())
            .limit(1)
        ).first()
        return None if row is None else _privacy(row.cap_epsilon, row.cap_delta)

    def _spent(self, conn: Connection, site_id: str) -> PrivacyParams:
        t = self.table
        rows = conn.execute(
            sa.select(t.c.epsilon, t.c.delta).where(t.c.site_id == site_id, t.c.kind == "RESERVE")
        )
        total = PrivacyParams(Fraction(0), Fraction(0))
        for r in rows:
            total = total + _privacy(r.epsilon, r.delta)
        return total

    def spend(self, site_id: str) -> SiteSpend:
        """Cap, total spend and spend per study of one site (exact)."""
        events = self.events(site_id)
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
        return SiteSpend(
            site_id, cap, total, per_study, {k: (v[0], v[1]) for k, v in releases.items()}
        )

    # -- writing -------------------------------------------------------------------------------

    def set_cap(self, site_id: str, cap: PrivacyParams, reason: str) -> Event:
        """Record a new lifetime cap for ``site_id`` explicitly (a CAP event; never implicit)."""
        if not reason.strip():
            raise LedgerError("a cap change needs a reason for the audit trail (--reason '...')")
        with self._append_tx() as conn:
            spent = self._spent(conn, site_id)
            payload = canonical_json({"reason": reason, "spent_at_change": spent.as_strings()})
            return self._append(
                conn,
                kind="CAP",
                site_id=site_id,
                cap_epsilon=fraction_str(cap.epsilon),
                cap_delta=fraction_str(cap.delta),
                payload=payload,
            )

    def reserve(
        self,
        *,
        release_id: str,
        study_id: str,
        site_id: str,
        spec_hash: str,
        round: str,
        privacy: PrivacyParams,
        cap: PrivacyParams,
    ) -> Reservation:
        """Debit ``privacy`` for ``release_id`` durably, or return the standing reservation.

        Order of checks (one serialised transaction): a committed release returns its recorded
        output (spends nothing); a reserved one returns its reservation (spends nothing more); a new
        one needs the spec's ``cap`` to equal the recorded cap (the first reservation records it)
        and ``spent + privacy <= cap`` in both epsilon and delta, exactly; otherwise it is refused
        and nothing is written.
        """
        if privacy.epsilon <= 0:
            raise LedgerError(f"a release must spend a positive epsilon (got {privacy.epsilon})")
        with self._append_tx() as conn:  # every step below under the one append lock
            standing = self._standing(conn, release_id, site_id, study_id, privacy, cap)
            if standing is not None:
                return standing
            recorded = self._cap_for(conn, site_id, study_id, spec_hash, cap)
            spent = self._spent(conn, site_id)
            budget = check_budget(recorded, spent, privacy)
            if not budget.fits:
                raise BudgetExceededError(
                    f"site {site_id}: release of study {study_id} round {round} asks "
                    f"{_fmt(privacy)} but only {_fmt(budget.remaining)} remains of the lifetime cap "
                    f"({_fmt(recorded)}; spent {_fmt(spent)}). Nothing was reserved and no noise "
                    f"was drawn; lower the release's budget or raise the cap explicitly "
                    f"(dpate ledger set-cap)"
                )
            self._append(
                conn,
                kind="RESERVE",
                site_id=site_id,
                release_id=release_id,
                study_id=study_id,
                spec_hash=spec_hash,
                round=str(round),
                epsilon=fraction_str(privacy.epsilon),
                delta=fraction_str(privacy.delta),
                cap_epsilon=fraction_str(recorded.epsilon),
                cap_delta=fraction_str(recorded.delta),
            )
            after = spent + privacy  # within the cap (checked above)
            return Reservation(release_id, site_id, study_id, privacy, recorded, after, new=True)

    def _standing(
        self,
        conn: Any,
        release_id: str,
        site_id: str,
        study_id: str,
        privacy: PrivacyParams,
        cap: PrivacyParams,
    ) -> Reservation | None:
        """The release's standing reservation (spends nothing more), or None for a new release;
        inside :meth:`reserve`'s transaction."""
        mine = self._rows(conn, self.table.c.release_id == release_id)
        reserved = next((e for e in mine if e.kind == "RESERVE"), None)
        if reserved is None:
            return None
        if reserved.privacy != privacy or reserved.site_id != site_id:
            raise LedgerError(
                f"release {release_id[:12]} is already reserved at site "
                f"{reserved.site_id} for {_fmt(reserved.privacy)}, not {_fmt(privacy)}: "
                f"a release id names one spec; change the spec (its hash) or the round"
            )
        return Reservation(
            release_id,
            site_id,
            study_id,
            privacy,
            self._cap(conn, site_id) or cap,
            self._spent(conn, site_id),
            new=False,
            committed=self._committed(conn, release_id),
        )

    def _cap_for(
        self, conn: Any, site_id: str, study_id: str, spec_hash: str, cap: PrivacyParams
    ) -> PrivacyParams:
        """The site's recorded cap (the first reservation records the spec's); a spec whose cap
        differs is refused. Inside :meth:`reserve`'s transaction."""
        recorded = self._cap(conn, site_id)
        if recorded is None:
            self._append(
                conn,
                kind="CAP",
                site_id=site_id,
                study_id=study_id,
                spec_hash=spec_hash,
                cap_epsilon=fraction_str(cap.epsilon),
                cap_delta=fraction_str(cap.delta),
                payload=canonical_json({"reason": f"initial cap from study {study_id}"}),
            )
            return cap
        if recorded != cap:
            raise CapMismatchError(
                f"site {site_id}: the study spec asks for a lifetime cap of {_fmt(cap)}, but "
                f"the ledger records {_fmt(recorded)}; a spec never changes a recorded cap. "
                f"Put the recorded cap in the spec, or change it explicitly: dpate ledger "
                f"set-cap {site_id} --epsilon E --delta D --reason '...' --ledger URL"
            )
        return recorded

    def commit(self, release_id: str, public: Mapping[str, Any]) -> Committed:
        """Record the release's public output; returns what the ledger holds for it.

        Exactly one COMMIT per release: if one exists (a re-run or a racing process won), its
        recorded output is returned and ``public`` is discarded; the caller must use the returned
        value and nothing else.
        """
        payload = canonical_json(dict(public))
        t = self.table
        try:
            with self._append_tx() as conn:
                existing = self._committed(conn, release_id)
                if existing is not None:
                    return existing
                res = conn.execute(
                    sa.select(t.c.site_id, t.c.study_id, t.c.spec_hash, t.c.round).where(
                        t.c.release_id == release_id, t.c.kind == "RESERVE"
                    )
                ).first()
                if res is None:
                    raise LedgerError(
                        f"release {release_id[:12]} has no reservation: reserve before drawing "
                        f"noise, commit after"
                    )
                event = self._append(
                    conn,
                    kind="COMMIT",
                    site_id=res.site_id,
                    release_id=release_id,
                    study_id=res.study_id,
                    spec_hash=res.spec_hash,
                    round=res.round,
                    payload=payload,
                )
        except sa.exc.IntegrityError:
            existing = self.committed(release_id)
            if existing is None:
                raise
            return existing
        return Committed(
            release_id, json.loads(payload), event.created_at, event.row_hash, event.seq
        )

    # -- audit ---------------------------------------------------------------------------------

    def verify(self, expect_head: str | None = None) -> VerifyReport:
        """Recompute the chain and the budget rules; list every problem found.

        Detects an edited row (its hash), a deleted or reordered row (a gap in ``seq`` or a broken
        ``prev_hash`` link), a COMMIT without its RESERVE, and a RESERVE past the cap in force.
        A deleted last row is caught only with ``expect_head`` (a head hash noted earlier).
        """
        problems: list[str] = []
        prev = GENESIS
        caps: dict[str, PrivacyParams] = {}
        spent: dict[str, PrivacyParams] = {}
        reserved: set[str] = set()
        events = self.events()
        for i, e in enumerate(events, start=1):
            if e.seq != i:
                problems.append(f"row {e.seq}: expected sequence number {i} (a row is missing)")
            if e.prev_hash != prev:
                problems.append(
                    f"row {e.seq}: prev_hash does not match the previous row's hash "
                    f"(a row was deleted, inserted or reordered)"
                )
            if _row_hash(e.prev_hash, e.content()) != e.row_hash:
                problems.append(f"row {e.seq}: row_hash does not match its content (edited row)")
            prev = e.row_hash
            try:
                if e.kind == "CAP":
                    caps[e.site_id] = e.cap
                elif e.kind == "RESERVE":
                    before = spent.get(e.site_id, NOTHING)
                    spent[e.site_id] = before + e.privacy
                    reserved.add(e.release_id or "")
                    cap = caps.get(e.site_id)
                    if cap is None or not check_budget(cap, before, e.privacy).fits:
                        problems.append(
                            f"row {e.seq}: site {e.site_id} reserved past its cap in force"
                        )
                elif e.kind == "COMMIT":
                    if (e.release_id or "") not in reserved:
                        problems.append(f"row {e.seq}: COMMIT without an earlier RESERVE")
                    json.loads(e.payload)
                else:
                    problems.append(f"row {e.seq}: unknown event kind {e.kind!r}")
            except (ValueError, TypeError) as exc:
                problems.append(f"row {e.seq}: unreadable field ({type(exc).__name__})")
        if expect_head is not None and prev != expect_head:
            problems.append(
                f"head hash {prev} differs from the expected {expect_head} "
                f"(rows were removed from or added to the end)"
            )
        return VerifyReport(not problems, len(events), prev, problems)


def as_sqlalchemy_url(url: str) -> str:
    """A SQLAlchemy URL; a bare path (no ``://``) is a SQLite file."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


def _shown(url: str) -> str:
    """The URL for messages (password hidden)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def _not_found(url: str, site: str | None) -> str:
    who = site or "SITE"
    return (
        f"no privacy ledger at {_shown(url)} (a ledger is never created implicitly). If this is "
        f"the right place, create it once, pinning the site's approved lifetime cap: dpate "
        f"ledger init {who} --epsilon E --delta D --ledger {_shown(url)}; otherwise point "
        f"DPATE_LEDGER_URL (or the site config's 'ledger') at the site's existing ledger"
    )


def _sqlite_file(url: str) -> Path | None:
    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    if not u.database or u.database == ":memory:" or u.database.startswith("file:"):
        return None
    return Path(u.database).expanduser()


def _sqlite_file_missing(url: str) -> bool:
    path = _sqlite_file(url)
    return path is not None and not path.is_file()


def ledger_exists(url: str, *, table_prefix: str = "dpate_") -> bool:
    """Whether ``url`` holds a ledger (SQLite: the file exists and has the ledger table;
    otherwise: the table exists). Never creates anything."""
    try:
        PrivacyLedger(url, table_prefix=table_prefix).close()
    except LedgerNotFoundError:
        return False
    return True


def _make_engine(url: str, *, create: bool = False) -> Engine:
    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite":
        return sa.create_engine(u, pool_pre_ping=True)
    path = _sqlite_file(url)
    if path is not None and create:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(u, connect_args={"timeout": 300})

    # pysqlite's own transaction handling defers BEGIN; take the write lock at BEGIN instead, so
    # read-check-append runs under one lock (the SQLAlchemy recipe for serialisable SQLite).
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
