"""A SQLite-file privacy ledger read with the standard library's :mod:`sqlite3`, for the commands
that only read a site's spend (``dpate ledger show``): importing SQLAlchemy costs more than the
whole read. Opened read-only (``mode=ro``: never creates or changes the file), with the engine's
lock timeout; the events, their order and the spend are those of
:meth:`dpate.ledger_reads.LedgerReader.spend`. Any other URL is read through
:class:`~dpate.ledger_reads.LedgerReader`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from pathlib import Path
from urllib.parse import quote

from dpate.ledger_chain import Event, LedgerError, LedgerNotFoundError, SiteSpend, site_spend
from dpate.ledger_engine import not_found_message, shown_url, sqlite_file

__all__ = ["read_site_spend", "sqlite_events"]

_COLUMNS = [f.name for f in fields(Event)]


def sqlite_events(
    path: Path, table_name: str, site_id: str, *, url: str, site: str | None
) -> list[Event]:
    """One site's events, in ``seq`` order, from the SQLite file at ``path``; the errors of
    :class:`~dpate.ledger_reads.LedgerReader` (no file or no table: not found; unreadable: a
    ledger error naming the URL)."""
    if not path.is_file():
        raise LedgerNotFoundError(not_found_message(url, site))
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=300)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table_name,)
            ).fetchone()
            if found is None:
                raise LedgerNotFoundError(not_found_message(url, site))
            rows = conn.execute(
                f'SELECT {", ".join(_COLUMNS)} FROM "{table_name}" '  # the table's fixed names
                "WHERE site_id = ? ORDER BY seq",
                (site_id,),
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        raise LedgerError(
            f"cannot open the privacy ledger at {shown_url(url)}: "
            f"{exc}; check the ledger URL (DPATE_LEDGER_URL) and that its database is up"
        ) from None
    return [Event(**dict(zip(_COLUMNS, row, strict=True))) for row in rows]


def read_site_spend(
    url: str, site_id: str, *, table_prefix: str = "dpate_", site: str | None = None
) -> SiteSpend:
    """A site's spend from the ledger at ``url`` (a SQLAlchemy URL): a SQLite file is read here
    without SQLAlchemy, any other database through :class:`~dpate.ledger_reads.LedgerReader`."""
    table_name = f"{table_prefix}ledger_events"
    path = sqlite_file(url)
    if path is not None:
        return site_spend(site_id, sqlite_events(path, table_name, site_id, url=url, site=site))
    from dpate.ledger_reads import LedgerReader

    with LedgerReader(url, table_prefix=table_prefix, site=site) as led:
        return led.spend(site_id)
