"""What a message may say about a site's data source: locations with no credential, and reader
failures reduced to their type (a reader's or driver's text may quote record values or credentials).

Every location shown in an error goes through :func:`redact_location` (no password, no query
string); every exception a reader raises while batches are read goes through :func:`_guarded`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from dpate.schemas.site_errors import SiteDataError, _Redacted

__all__ = ["QUERY_ENV", "SECRET_ENV", "SQL_DIALECTS", "is_sql_url", "redact_location"]

#: URL schemes (before an optional ``+driver``) read as SQLAlchemy database URLs.
SQL_DIALECTS = (
    "postgresql",
    "postgres",
    "mysql",
    "mariadb",
    "sqlite",
    "mssql",
    "oracle",
    "duckdb",
    "snowflake",
    "redshift",
    "trino",
)

#: The site's query for a SQL source: a ``SELECT`` (or ``WITH``) statement, or a table name.
QUERY_ENV = "DPATE_DATA_QUERY"
#: A Prefect Secret block holding the SQL source's password (resolved at the site).
SECRET_ENV = "DPATE_DATA_SECRET"

_SECRET_KEYS = re.compile(r"(pass|secret|token|key|sig|credential|auth)", re.IGNORECASE)


def is_sql_url(location: str | Path) -> bool:
    """True when ``location`` is a SQLAlchemy database URL (scheme in :data:`SQL_DIALECTS`)."""
    loc = str(location)
    if "://" not in loc:
        return False
    scheme = loc.split("://", 1)[0].split("+", 1)[0].lower()
    return scheme in SQL_DIALECTS


def redact_location(location: str | Path) -> str:
    """``location`` as it may appear in a message: no password, no secret-looking query value.

    A SQL URL keeps its dialect, user, host, port and database (``***`` for a password, and its
    query string dropped); another URL loses the password of its user part and the value of
    every query parameter whose name looks like a credential."""
    loc = str(location)
    if "://" not in loc:
        return loc
    if is_sql_url(loc):
        try:
            from sqlalchemy.engine import make_url

            url = make_url(loc)
            return str(url.set(query={}).render_as_string(hide_password=True))
        except Exception:  # unparsable: fall through to the generic redaction
            pass
    scheme, rest = loc.split("://", 1)
    head, sep, query = rest.partition("?")
    if "@" in head.split("/", 1)[0]:
        user, host = head.split("/", 1)[0].rsplit("@", 1)
        tail = head[len(head.split("/", 1)[0]) :]
        user = user.split(":", 1)[0] + (":***" if ":" in user else "")
        head = f"{user}@{host}{tail}"
    if sep:
        parts = []
        for item in query.split("&"):
            name, eq, _ = item.partition("=")
            parts.append(f"{name}=***" if eq and _SECRET_KEYS.search(name) else item)
        query = "&".join(parts)
    return f"{scheme}://{head}{sep}{query}"


def _read_failure(name: str, fmt: str, exc: BaseException) -> SiteDataError:
    """read_site_table's wording, for every source."""
    if isinstance(exc, FileNotFoundError):
        return SiteDataError(
            [],
            hint=f"the site's data file was not found at {name}: check the site's data location",
        )
    if isinstance(exc, PermissionError):
        return SiteDataError([], hint=f"no permission to read {name}")
    if fmt == "sql":
        return SiteDataError(
            [],
            hint=f"could not read {name} as sql ({type(exc).__name__}; the driver's message is "
            f"withheld because it may quote record values or credentials): check the database "
            f"URL, the query ({QUERY_ENV}), the credentials in the site's environment and the "
            f"database's own log",
        )
    return SiteDataError(
        [],
        hint=f"could not read {name} as {fmt} ({type(exc).__name__}; the reader's message is "
        f"withheld because it may quote record values): check the file's format and encoding",
    )


def _guarded(name: str, fmt: str, make: Callable[[], Iterable[Any]]) -> Iterator[pa.RecordBatch]:
    """Run the reader ``make()`` (an iterator of batches) with every exception it raises replaced
    by a redacted :class:`SiteDataError`, raised outside the ``except`` (no chained original)."""
    it: Iterator[pa.RecordBatch] | None = None
    while True:
        failure: SiteDataError | None = None
        batch = None
        try:
            if it is None:
                it = iter(make())
            batch = next(it)
        except StopIteration:
            return
        except _Redacted as exc:
            failure = exc.args[0]
        except SiteDataError as exc:
            failure = exc
        except Exception as exc:  # the reader's text may quote values: keep the type only
            failure = _read_failure(name, fmt, exc)
        if failure is not None:
            raise failure
        yield batch
