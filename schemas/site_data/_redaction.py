"""What a message may say about a site's data source: locations with no credential, and engine
failures reduced to their type (an engine's or driver's text may quote record values or
credentials).

Every location shown in an error goes through :func:`redact_location` (no password, no secret-like
query value); every call into an engine goes through :func:`engine_call`, which replaces any
exception by a :class:`~._errors.SiteDataError` naming the source and the exception's type only,
raised outside the ``except`` block (no chained original)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ._errors import SiteDataError

__all__ = [
    "QUERY_ENV",
    "SECRET_ENV",
    "SQL_DIALECTS",
    "engine_call",
    "is_sql_url",
    "redact_location",
]

T = TypeVar("T")

#: URL schemes (before an optional ``+driver``) read as database URLs.
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
    "bigquery",
    "clickhouse",
    "databricks",
    "pyspark",
    "spark",
    "risingwave",
    "impala",
    "exasol",
    "druid",
    "athena",
)

#: The site's query for a database source: a ``SELECT`` (or ``WITH``) statement, or a table name.
QUERY_ENV = "DPATE_DATA_QUERY"
#: A Prefect Secret block holding the database source's password (resolved at the site).
SECRET_ENV = "DPATE_DATA_SECRET"

_SECRET_KEYS = re.compile(r"(pass|secret|token|key|sig|credential|auth)", re.IGNORECASE)


def is_sql_url(location: str | Path) -> bool:
    """True when ``location`` is a database URL (scheme in :data:`SQL_DIALECTS`)."""
    loc = str(location)
    if "://" not in loc:
        return False
    scheme = loc.split("://", 1)[0].split("+", 1)[0].lower()
    return scheme in SQL_DIALECTS


def redact_location(location: str | Path) -> str:
    """``location`` as it may appear in a message: no password, no secret-looking query value.

    A database URL keeps its dialect, user, host, port and database (``***`` for a password, and
    its query string dropped); another URL loses the password of its user part and the value of
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


def read_failure(name: str, kind: str, exc: BaseException) -> SiteDataError:
    """The error for a source that could not be read: the location (redacted) and the type of
    the engine's error, never its text."""
    if isinstance(exc, FileNotFoundError):
        return SiteDataError(
            [],
            hint=f"the site's data file was not found at {name}: check the site's data location",
        )
    if isinstance(exc, PermissionError):
        return SiteDataError([], hint=f"no permission to read {name}")
    if kind == "sql":
        return SiteDataError(
            [],
            hint=f"could not read {name} as sql ({type(exc).__name__}; the driver's message is "
            f"withheld because it may quote record values or credentials): check the database "
            f"URL, the query ({QUERY_ENV}), the credentials in the site's environment and the "
            f"database's own log",
        )
    return SiteDataError(
        [],
        hint=f"could not read {name} as {kind} ({type(exc).__name__}; the engine's message is "
        f"withheld because it may quote record values): check the file's format and encoding",
    )


def engine_call(name: str, kind: str, run: Callable[[], T]) -> T:
    """``run()`` with every exception but a :class:`SiteDataError` replaced by
    :func:`read_failure`'s (raised outside the ``except``: no chained original), and its warnings
    swallowed (their texts may quote values)."""
    failure: SiteDataError | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return run()
        except SiteDataError as exc:
            failure = exc
        except Exception as exc:  # the engine's text may quote values or credentials
            failure = read_failure(name, kind, exc)
    raise failure
