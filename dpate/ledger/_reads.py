"""A privacy ledger opened and read: the table, the engine and every read (events, sites, a
release's recorded output, the cap, the spend). :class:`dpate.ledger.PrivacyLedger` adds the
appends (reservations, commits, cap changes) and the audit; the module docstring of
:mod:`dpate.ledger` has the events, the chain and the rules.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dpate.ledger._chain import (
    Committed,
    Event,
    LedgerError,
    LedgerNotFoundError,
    SiteSpend,
    privacy_of,
    site_spend,
)
from dpate.ledger._engine import (
    as_sqlalchemy_url,
    ledger_table,
    make_engine,
    not_found_message,
    shown_url,
    sqlite_file_missing,
)
from dpate_core.privacy import PrivacyParams

__all__ = ["LedgerReader"]


class LedgerReader:
    """A privacy ledger at ``url`` (any SQLAlchemy URL; a plain path means a SQLite file), opened
    for reading; the base of :class:`dpate.ledger.PrivacyLedger`, which adds the appends.

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
        if not create and sqlite_file_missing(self.url):
            raise LedgerNotFoundError(not_found_message(self.url, site))
        self._engine = make_engine(self.url, create=create)
        self._dialect = self._engine.dialect.name
        md = sa.MetaData()
        self.table = ledger_table(md, self.table_name)
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
                raise LedgerNotFoundError(not_found_message(self.url, site))
        except sa.exc.OperationalError as exc:
            self._engine.dispose()
            raise LedgerError(
                f"cannot open the privacy ledger at {shown_url(self.url)}: "
                f"{exc.orig}; check the ledger URL (DPATE_LEDGER_URL) and that its database is up"
            ) from None

    # -- plumbing ------------------------------------------------------------------------------

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, conn: Connection, *where: Any) -> list[Event]:
        q = sa.select(self.table).where(*where).order_by(self.table.c.seq)
        return [Event(**row._mapping) for row in conn.execute(q)]

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
        return None if row is None else privacy_of(row.cap_epsilon, row.cap_delta)

    def _spent(self, conn: Connection, site_id: str) -> PrivacyParams:
        t = self.table
        rows = conn.execute(
            sa.select(t.c.epsilon, t.c.delta).where(t.c.site_id == site_id, t.c.kind == "RESERVE")
        )
        total = PrivacyParams(Fraction(0), Fraction(0))
        for r in rows:
            total = total + privacy_of(r.epsilon, r.delta)
        return total

    def spend(self, site_id: str) -> SiteSpend:
        """Cap, total spend and spend per study of one site (exact)."""
        return site_spend(site_id, self.events(site_id))
