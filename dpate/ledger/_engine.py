"""Where a privacy ledger lives: URLs (a bare path is a SQLite file), messages that show a URL
without its password, and the SQLAlchemy engine (SQLite appends serialised by ``BEGIN IMMEDIATE``).

SQLAlchemy is imported where an engine or a table is made, or a URL other than a plain SQLite
file URL (``sqlite:///PATH``) is parsed: ``dpate ledger show`` on a SQLite file reads it with the
standard library (:mod:`dpate.ledger._sqlite_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "as_sqlalchemy_url",
    "ledger_table",
    "make_engine",
    "not_found_message",
    "shown_url",
    "sqlite_file",
    "sqlite_file_missing",
]

_SQLITE = "sqlite:///"


def _plain_sqlite(url: str) -> bool:
    """``sqlite:///PATH`` with no query: no password, and the path is the URL's rest."""
    return url.startswith(_SQLITE) and "?" not in url


def as_sqlalchemy_url(url: str) -> str:
    """A SQLAlchemy URL; a bare path (no ``://``) is a SQLite file."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


def shown_url(url: str) -> str:
    """The URL for messages (password hidden)."""
    if _plain_sqlite(url):
        return url
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def not_found_message(url: str, site: str | None) -> str:
    """Why no ledger was opened at ``url`` and the command that creates one."""
    who = site or "SITE"
    return (
        f"no privacy ledger at {shown_url(url)} (a ledger is never created implicitly). If this is "
        f"the right place, create it once, pinning the site's approved lifetime cap: dpate "
        f"ledger init {who} --epsilon E --delta D --ledger {shown_url(url)}; otherwise point "
        f"DPATE_LEDGER_URL (or the site config's 'ledger') at the site's existing ledger"
    )


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL, else None (another database, in memory, a ``file:`` URI)."""
    if _plain_sqlite(url):
        database = url[len(_SQLITE) :]
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return Path(database).expanduser()
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    if not u.database or u.database == ":memory:" or u.database.startswith("file:"):
        return None
    return Path(u.database).expanduser()


def sqlite_file_missing(url: str) -> bool:
    """Whether ``url`` names a SQLite file that does not exist (then nothing is created)."""
    path = sqlite_file(url)
    return path is not None and not path.is_file()


def make_engine(url: str, *, create: bool = False) -> Engine:
    """An engine for ``url``; SQLite takes its write lock at ``BEGIN`` (serialised appends)."""
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() != "sqlite":
        return sa.create_engine(u, pool_pre_ping=True)
    path = sqlite_file(url)
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


def ledger_table(metadata: sa.MetaData, table_name: str) -> sa.Table:
    """The ledger's one table: an event per row, ``UNIQUE(release_id, kind)``, hashes unique."""
    import sqlalchemy as sa

    return sa.Table(
        table_name,
        metadata,
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
        sa.UniqueConstraint("release_id", "kind", name=f"{table_name}_release_kind"),
        sa.CheckConstraint("kind IN ('CAP', 'RESERVE', 'COMMIT')", name=f"{table_name}_kind"),
    )
