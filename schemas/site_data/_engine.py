"""A site's data as an Ibis table expression on the engine where it lives.

:func:`open_site_table` picks the engine from the site's data location (its own setting,
docs/reference/pipeline.md "Settings"):

==================================  ==========================================================
location                            engine and table
==================================  ==========================================================
``.csv`` (``.csv.gz``, ``.csv.zst``) DuckDB (embedded) ``read_csv``: header row, comma, every
                                    column read as text (the spec's rules convert it), the
                                    same null markers as before (``""``, ``NA``, ``NaN``, ...)
``.parquet`` / ``.pq``              DuckDB ``read_parquet``
a directory, a URL ending in ``/``  DuckDB ``read_parquet`` of ``**/*.parquet`` with hive
or ``format = "parquet-dataset"``   partitions (``year=2024/`` becomes a column), files in
                                    path order, columns united by name
``postgresql[+driver]://...``       PostgreSQL through Ibis (psycopg 3): the site's query
``spark://HOST:PORT``,              Spark through Ibis's PySpark backend (a cluster's master,
``spark://local[N]``                or local mode): the site's query in Spark SQL
another database URL                that Ibis backend (``ibis.connect``), with the site's query
a pandas DataFrame / Arrow table    DuckDB over the in-memory table (tests and simulations)
==================================  ==========================================================

File locations may be local paths or fsspec URLs (``s3://``, ``gs://``, ``memory://``, ...): the
URL's filesystem is registered with DuckDB, which then reads through fsspec (no DuckDB extension
is downloaded). A database source's query is the site's setting (``DPATE_DATA_QUERY``), a
``SELECT``/``WITH`` statement or a table name; its password comes from the driver's environment
or a Prefect Secret block named by the site (``DPATE_DATA_SECRET``), loaded in memory only.

Every call into an engine goes through :func:`._redaction.engine_call`: an engine's error text
may quote a record value or a credential, so only its type is kept. The opened rows are a
:class:`~._table.SiteTable`. Nothing here computes anything from the records: :mod:`._rules`
builds the expressions, the callers run them.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from ._errors import SiteDataError, missing_columns
from ._redaction import QUERY_ENV, SECRET_ENV, engine_call, is_sql_url, redact_location
from ._table import SiteTable

__all__ = ["ENGINE_MEMORY_ENV", "open_site_table", "secret_value"]

#: DuckDB's memory limit for a site's queries (e.g. ``"1GB"``): beyond it DuckDB spills to its
#: temporary directory on the site's disk. Default: DuckDB's own (80% of the machine's memory).
ENGINE_MEMORY_ENV = "DPATE_ENGINE_MEMORY"

#: The CSV fields read as missing: pyarrow's defaults, which the site's CSV files were read with.
CSV_NULLS = (
    "",
    "#N/A",
    "#N/A N/A",
    "#NA",
    "-1.#IND",
    "-1.#QNAN",
    "-NaN",
    "-nan",
    "1.#IND",
    "1.#QNAN",
    "N/A",
    "NA",
    "NULL",
    "NaN",
    "n/a",
    "nan",
    "null",
)

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*){0,2}$")


def open_site_table(
    source: str | Path | Any,
    needed: list[str],
    fmt: str | None = None,
    *,
    query: str | None = None,
    secret: str | None = None,
) -> SiteTable:
    """The site's rows at ``source`` (a location, or a pandas DataFrame / Arrow table) as a
    :class:`SiteTable`. Raises :class:`~._errors.SiteDataError` naming a missing column, or the
    location and the engine's error type (never its text). ``needed``: the spec's columns."""
    if not isinstance(source, (str, Path)):
        site = _frame_table(source)
    else:
        loc = str(source)
        if fmt == "sql" or is_sql_url(loc):
            site = _database_table(loc, needed, query, secret)
        else:
            site = _file_table(loc, fmt)
    absent = [c for c in needed if c not in site.columns]
    if absent:
        site.close()
        raise missing_columns(absent)
    return site


# ---------------------------------------------------------------------------------------------
# DuckDB: files, datasets, in-memory tables


def _duckdb() -> Any:
    """An in-memory DuckDB: its memory limit from :data:`ENGINE_MEMORY_ENV`, and what it spills
    beyond it (a sort of the matching estimators' records) in the site's temporary directory,
    deleted when the connection closes."""
    import tempfile

    import ibis

    config: dict[str, Any] = {"temp_directory": tempfile.gettempdir()}
    memory = os.environ.get(ENGINE_MEMORY_ENV, "").strip()
    if memory:
        config["memory_limit"] = memory
    return ibis.duckdb.connect(**config)


def _frame_table(frame: Any) -> SiteTable:
    import ibis

    table = frame if isinstance(frame, pa.Table) else _arrow_of_frame(frame)
    con = _duckdb()
    return SiteTable(con, ibis.memtable(table), "the records in memory", "frame", "duckdb")


def _arrow_of_frame(frame: Any) -> pa.Table:
    """A pandas frame as Arrow: a column of mixed Python objects (numbers and text) becomes text,
    each value by its ``str`` (missing stays missing), so the rules see what a CSV field holds."""
    import pandas as pd

    columns = {}
    for name in frame.columns:
        col = frame[name]
        try:
            columns[str(name)] = pa.array(col, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            values = [None if _is_missing(v) else str(v) for v in col.tolist()]
            columns[str(name)] = pa.array(values, pa.string())
        del col
    del pd
    return pa.table(columns)


def _is_missing(v: Any) -> bool:
    import pandas as pd

    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _file_table(loc: str, fmt: str | None) -> SiteTable:
    low = loc.lower().split("?")[0]
    remote = "://" in loc and not loc.startswith("file://")
    path = loc.removeprefix("file://")
    if fmt == "parquet-dataset" or (
        fmt in (None, "parquet") and (low.endswith("/") or (not remote and Path(path).is_dir()))
    ):
        kind = "parquet-dataset"
    elif fmt == "parquet" or (fmt is None and low.endswith((".parquet", ".pq"))):
        kind = "parquet"
    else:
        kind = "csv"
    name = redact_location(loc)

    def open_() -> SiteTable:
        con = _duckdb()
        if remote:
            import fsspec

            fs, _ = fsspec.core.url_to_fs(loc)
            con.register_filesystem(fs)
        elif kind != "parquet-dataset" and not Path(path).exists():
            raise FileNotFoundError(path)
        if kind == "csv":
            header = _csv_header(loc if remote else path)
            table = con.read_csv(
                loc if remote else path,
                header=True,
                columns={c: "VARCHAR" for c in header},
                auto_detect=False,
                delim=",",
                quote='"',
                escape='"',
                strict_mode=True,
                null_padding=False,
                nullstr=list(CSV_NULLS),
            )
        elif kind == "parquet":
            table = con.read_parquet(loc if remote else path)
        else:
            root = (loc if remote else path).rstrip("/")
            if not remote and not Path(root).is_dir():
                raise FileNotFoundError(root)
            table = con.read_parquet(
                f"{root}/**/*.parquet", hive_partitioning=True, union_by_name=True
            )
        return SiteTable(con, table, name, kind, "duckdb")

    return engine_call(name, kind, open_)


def _csv_header(location: str) -> list[str]:
    """The CSV header's column names (the first line; compressed files decompressed)."""
    import fsspec

    with fsspec.open(location, "rb", compression="infer") as raw:
        first = raw.readline()
    text = first.decode("utf-8-sig").rstrip("\r\n")
    return next(csv.reader(io.StringIO(text)), [])


# ---------------------------------------------------------------------------------------------
# databases


def _database_table(
    loc: str, needed: list[str], query: str | None, secret: str | None
) -> SiteTable:
    name = redact_location(loc)
    q = (query or os.environ.get(QUERY_ENV, "")).strip().rstrip(";").strip()
    if not q:
        raise SiteDataError(
            [],
            hint=f"the site's data is the database {name} but no query is set: set {QUERY_ENV} "
            f"in the site's environment to a SELECT statement naming the spec's columns "
            f"{needed}, or to a table name",
        )
    block = secret or os.environ.get(SECRET_ENV, "").strip() or None
    password = secret_value(block) if block else None
    scheme = loc.split("://", 1)[0].split("+", 1)[0].lower()
    kind = "spark" if scheme in ("spark", "pyspark") else "sql"

    def open_() -> SiteTable:
        con, dialect = _connect(loc, scheme, password)
        if _TABLE_NAME.match(q):
            *db, table_name = q.split(".")
            database = tuple(db) if len(db) > 1 else (db[0] if db else None)
            table = con.table(table_name, database=database)
        else:
            table = con.sql(q)
        return SiteTable(con, table, name, kind, dialect)

    return engine_call(name, "sql", open_)


def _connect(loc: str, scheme: str, password: str | None) -> tuple[Any, str]:
    import ibis

    if scheme in ("spark", "pyspark"):
        from pyspark.sql import SparkSession

        master = loc.split("://", 1)[1].rstrip("/")
        builder = SparkSession.builder.appName("dpate-site").config("spark.ui.enabled", "false")
        if master.startswith("local"):  # one machine: a few shuffle partitions, not 200
            builder = builder.config("spark.sql.shuffle.partitions", "4")
        else:
            master = f"spark://{master}"
        session = builder.master(master).getOrCreate()
        return ibis.pyspark.connect(session), "pyspark"
    if scheme in ("postgresql", "postgres"):
        from sqlalchemy.engine import make_url

        url = make_url(loc)
        kwargs: dict[str, Any] = dict(url.query)
        con = ibis.postgres.connect(
            host=url.host,
            port=url.port or 5432,
            user=url.username,
            password=password if password is not None else url.password,
            database=url.database,
            **kwargs,
        )
        return con, "postgres"
    if scheme == "sqlite":
        return ibis.sqlite.connect(loc.split("://", 1)[1].removeprefix("/") or None), "sqlite"
    if scheme == "duckdb":
        return ibis.duckdb.connect(loc.split("://", 1)[1].removeprefix("/") or ":memory:"), "duckdb"
    rest = loc.split("://", 1)[1]
    if password is not None:
        from sqlalchemy.engine import make_url

        rest = (
            make_url(f"{scheme}://{rest}")
            .set(password=password)
            .render_as_string(hide_password=False)
            .split("://", 1)[1]
        )
    con = ibis.connect(f"{scheme}://{rest}")
    return con, con.name


def secret_value(block: str) -> str:
    """The password held by the Prefect Secret block ``block`` (loaded at the site). A block that
    cannot be loaded is named with its error's type only, raised outside the ``except`` (no
    chained original: its text might quote the value)."""
    failure: SiteDataError | None = None
    value: object = None
    try:
        from prefect.blocks.system import Secret

        value = Secret.load(block).get()  # type: ignore[union-attr]
    except Exception as exc:
        failure = SiteDataError(
            [],
            hint=f"could not load the Prefect Secret block {block!r} named by {SECRET_ENV} (or "
            f"the site config's data_secret) ({type(exc).__name__}): create it at the site, "
            f"e.g. Secret(value=...).save({block!r}) with prefect.blocks.system.Secret",
        )
    if failure is not None:
        raise failure
    return str(value)
