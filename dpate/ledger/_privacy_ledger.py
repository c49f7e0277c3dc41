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
(:class:`fractions.Fraction` parsed from the stored strings). The crash rule is in docs/how-to/ledger.md.

A ledger is never created implicitly: opening a URL that holds no ledger raises
:class:`LedgerNotFoundError` (SQLite: the file is not even created), naming the URL and the command
that creates it. Only :meth:`PrivacyLedger.init` (or ``create=True``) creates one.

Opening and reading are in :mod:`dpate.ledger._reads` (:class:`~dpate.ledger._reads.LedgerReader`,
the base of :class:`PrivacyLedger`); the rows and hash chain in :mod:`dpate.ledger._chain`, the
audit in :mod:`dpate.ledger._verify`, URLs and engine in :mod:`dpate.ledger._engine`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dpate.ledger._chain import (
    GENESIS,
    BudgetExceededError,
    CapMismatchError,
    Committed,
    Event,
    LedgerError,
    LedgerNotFoundError,
    Reservation,
    VerifyReport,
    budget_text,
    canonical_json,
    row_hash,
)
from dpate.ledger._engine import shown_url
from dpate.ledger._reads import LedgerReader
from dpate.ledger._verify import verify_events
from dpate_core.privacy import PrivacyParams, check_budget, fraction_str

__all__ = ["PrivacyLedger", "ledger_exists"]


class PrivacyLedger(LedgerReader):
    """A privacy ledger at ``url`` (any SQLAlchemy URL; a plain path means a SQLite file): the
    reads of :class:`dpate.ledger._reads.LedgerReader` and the appends, each under the append lock.

    ``table_prefix`` names the table (``<prefix>ledger_events``); tests use a unique one per run.
    """

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
                    f"site {site_id}: the ledger at {shown_url(led.url)} already records a lifetime "
                    f"cap of {budget_text(recorded)}, not {budget_text(cap)}; change it explicitly: dpate "
                    f"ledger set-cap {site_id} --epsilon E --delta D --reason '...'"
                )
        except BaseException:
            led.close()
            raise
        return led

    # -- appending -----------------------------------------------------------------------------

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
        digest = row_hash(prev, content)
        conn.execute(sa.insert(self.table).values(**content, row_hash=digest))
        return Event(**content, row_hash=digest)

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
            self._one_release_per_round(conn, site_id, study_id, spec_hash, str(round))
            recorded = self._cap_for(conn, site_id, study_id, spec_hash, cap)
            spent = self._spent(conn, site_id)
            budget = check_budget(recorded, spent, privacy)
            if not budget.fits:
                raise BudgetExceededError(
                    f"site {site_id}: release of study {study_id} round {round} asks "
                    f"{budget_text(privacy)} but only {budget_text(budget.remaining)} remains of "
                    f"the lifetime cap ({budget_text(recorded)}; spent {budget_text(spent)}). "
                    f"Nothing was reserved and no noise was drawn; lower the release's budget "
                    f"or raise the cap explicitly (dpate ledger set-cap)"
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
                f"{reserved.site_id} for {budget_text(reserved.privacy)}, not {budget_text(privacy)}: "
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

    def _one_release_per_round(
        self, conn: Any, site_id: str, study_id: str, spec_hash: str, round: str
    ) -> None:
        """Refuse a second release of one study round under another spec (a spec replaced
        after the round ran: its hash, so its release id, differs). Inside :meth:`reserve`'s
        transaction."""
        t = self.table
        other = conn.execute(
            sa.select(t.c.spec_hash).where(
                t.c.kind == "RESERVE",
                t.c.site_id == site_id,
                t.c.study_id == study_id,
                t.c.round == round,
                t.c.spec_hash != spec_hash,
            )
        ).first()
        if other is not None:
            raise LedgerError(
                f"site {site_id}: study {study_id} round {round} was already released under spec "
                f"{str(other.spec_hash)[:12]}..., not this spec ({spec_hash[:12]}...): a round is "
                f"released once. Nothing was reserved; a changed spec needs a new round (its "
                f"'release')"
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
                f"site {site_id}: the study spec asks for a lifetime cap of {budget_text(cap)}, but "
                f"the ledger records {budget_text(recorded)}; a spec never changes a recorded cap. "
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
        """Recompute the chain and the budget rules; list every problem found
        (:func:`dpate.ledger._verify.verify_events`).

        A deleted last row is caught only with ``expect_head`` (a head hash noted earlier).
        """
        return verify_events(self.events(), expect_head)


def ledger_exists(url: str, *, table_prefix: str = "dpate_") -> bool:
    """Whether ``url`` holds a ledger (SQLite: the file exists and has the ledger table;
    otherwise: the table exists). Never creates anything."""
    try:
        PrivacyLedger(url, table_prefix=table_prefix).close()
    except LedgerNotFoundError:
        return False
    return True
