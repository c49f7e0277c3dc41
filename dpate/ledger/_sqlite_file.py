"""A SQLite-file privacy ledger read with the standard library's :mod:`sqlite3`, for the commands
that only read it (``dpate ledger show``, ``dpate check``): importing SQLAlchemy costs more than the
whole read. Opened read-only (``mode=ro``: never creates or changes the file), with the engine's
lock timeout; the events, their order, a release's recorded output and the spend are those of
:class:`dpate.ledger._reads.LedgerReader`. Any other URL is read through
:class:`~dpate.ledger._reads.LedgerReader`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import quote

from dpate.ledger._chain import (
    Committed,
    Event,
    LedgerError,
    LedgerNotFoundError,
    SiteSpend,
    site_spend,
)
from dpate.ledger._engine import not_found_message, shown_url, sqlite_file

if TYPE_CHECKING:
    from dpate.ledger._reads import LedgerReader

__all__ = ["SqliteFileLedger", "open_reader", "read_site_spend"]

T = TypeVar("T")

_COLUMNS = [f.name for f in fields(Event)]


class SqliteFileLedger:
    """A SQLite-file ledger opened read-only with :mod:`sqlite3`: the reads of
    :class:`~dpate.ledger._reads.LedgerReader` that the checking commands use (events, a release's
    recorded output, a site's spend), with its errors (no file or no table: not found; unreadable:
    a ledger error naming the URL)."""

    def __init__(self, path: Path, table_name: str, *, url: str, site: str | None) -> None:
        self.url = url
        self.table_name = table_name
        if not path.is_file():
            raise LedgerNotFoundError(not_found_message(url, site))
        self._conn = self._guard(
            lambda: sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=300)
        )
        found = self._query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table_name,)
        )
        if not found:
            self.close()
            raise LedgerNotFoundError(not_found_message(url, site))

    def _guard(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except sqlite3.OperationalError as exc:
            raise LedgerError(
                f"cannot open the privacy ledger at {shown_url(self.url)}: "
                f"{exc}; check the ledger URL (DPATE_LEDGER_URL) and that its database is up"
            ) from None

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._guard(lambda: self._conn.execute(sql, args).fetchall())

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self, site_id: str | None = None) -> list[Event]:
        cols = ", ".join(_COLUMNS)
        where, args = ("", ()) if site_id is None else (" WHERE site_id = ?", (site_id,))
        rows = self._query(f'SELECT {cols} FROM "{self.table_name}"{where} ORDER BY seq', args)
        return [Event(**dict(zip(_COLUMNS, row, strict=True))) for row in rows]

    def committed(self, release_id: str) -> Committed | None:
        """The recorded public output of a committed release, else None."""
        rows = self._query(
            f'SELECT payload, created_at, row_hash, seq FROM "{self.table_name}" '
            "WHERE release_id = ? AND kind = 'COMMIT'",
            (release_id,),
        )
        if not rows:
            return None
        payload, created_at, row_hash, seq = rows[0]
        return Committed(release_id, json.loads(payload), created_at, row_hash, seq)

    def spend(self, site_id: str) -> SiteSpend:
        """Cap, total spend and spend per study of one site (exact)."""
        return site_spend(site_id, self.events(site_id))


def open_reader(
    url: str, *, site: str | None = None, table_prefix: str = "dpate_"
) -> SqliteFileLedger | LedgerReader:
    """The ledger at ``url`` (a SQLAlchemy URL) opened for reading: a SQLite file without
    SQLAlchemy, any other database through :class:`~dpate.ledger._reads.LedgerReader`."""
    table_name = f"{table_prefix}ledger_events"
    path = sqlite_file(url)
    if path is not None:
        return SqliteFileLedger(path, table_name, url=url, site=site)
    from dpate.ledger._reads import LedgerReader

    return LedgerReader(url, table_prefix=table_prefix, site=site)


def read_site_spend(
    url: str, site_id: str, *, table_prefix: str = "dpate_", site: str | None = None
) -> SiteSpend:
    """A site's spend from the ledger at ``url`` (:func:`open_reader`)."""
    with open_reader(url, site=site, table_prefix=table_prefix) as led:
        return led.spend(site_id)
