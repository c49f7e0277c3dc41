"""Where a site's records come from, read in batches: CSV, Parquet file, partitioned Parquet dataset, SQL.

A site's data location (its own configuration: ``DPATE_DATA_PATH`` or ``data`` in the site config
file, docs/pipeline.md "Settings") names one of four sources; :func:`open_source` picks it:

==========================  ============================================  =========================
source                      location                                      batches
==========================  ============================================  =========================
SQL query                   a SQLAlchemy URL (``postgresql+psycopg://``,  ``COPY`` (PostgreSQL) or
                            ``sqlite:///``, ...) plus the query in        a server-side cursor
                            ``DPATE_DATA_QUERY`` (a ``SELECT`` or a
                            table name)
partitioned Parquet         a directory (local, or a URL ending in        ``pyarrow.dataset``
dataset                     ``/``), or ``format = "parquet-dataset"``     file by file
Parquet file                ``.parquet`` / ``.pq``, or ``format =         batches of ``batch_rows``
                            "parquet"``
CSV file                    anything else (``.csv``, ``.csv.gz``, ...)    streamed in 1 MiB
                                                                          blocks after a parsing
                                                                          pass (read whole when a
                                                                          later block changes a
                                                                          column's type)
==========================  ============================================  =========================

**Credentials** never come from the spec (a spec's data location is confined to its own folder,
tasks/settings.py) and never appear in a message: every location shown in an error goes through
:func:`redact_location` (no password, no query string). A SQL source takes its password from the
driver's own environment (libpq's ``PGPASSWORD`` / ``PGPASSFILE`` / ``PGSERVICE`` for PostgreSQL),
or from a Prefect Secret block named by ``DPATE_DATA_SECRET`` (or the site config's
``data_secret``, passed as ``secret``), loaded at the site when the source is opened and held in
memory only. A driver's error text is withheld (only its type is kept): it may quote a record
value.

**Batches and memory.** Validation (schemas/site_preparation.py) is per row, so it runs per batch of
``batch_rows`` rows (default :data:`BATCH_ROWS`): problems are collected across batches, their
counts added and their first row positions kept (positions count from 0 over the whole source, in
its order), and one :class:`~schemas.site_errors.SiteDataError` is raised after the last batch, with
exactly the text a single pass gives. Peak memory is one batch's working set (a few hundred bytes a
row, for the pandas/pandera conversions) plus what the consumer keeps:

- :func:`prepare_source` (the release path of the estimators that need the records, and
  :func:`~schemas.site_preparation.prepare_site_data` for a location) keeps ``(w, y, x)``: 17 bytes a
  row (int8, float64, int64), preallocated when the source knows its row count;
- :func:`iter_site_batches` yields each validated batch's ``(w, y, x)`` and keeps nothing;
- :func:`stream_cell_statistics` (the release path of the adjusted estimator and the difference
  in means, ``tasks.site.read_site_records``) accumulates their per-cell sufficient statistics
  (:func:`dpate_core.adjusted.cell_statistics`: exact integer sums on a public grid, centred for
  the adjusted estimator, not centred for the difference in means) batch by batch: memory
  ``O(batch + |X|)`` whatever ``N``.

Algorithm 1 (matching) cannot stream this way: it pairs records by their rank inside their
(stratum, arm) group under a data-independent random order, so the release keeps all ``(w, y, x)``
(docs/study-spec.md, "Data sources" has the two-pass design that would bound it per stratum).

The row counts seen here (rows read, used, dropped) are computed from private records: operator only.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from schemas.site_errors import (
    _R_EDGES,
    _R_LEVEL,
    _R_MISSING,
    _R_NOT_FINITE,
    _R_NOT_NUMBER,
    _R_OUT_OF_BOUNDS,
    _R_OUTCOME_LABEL,
    _R_TREATMENT_01,
    _R_TREATMENT_LABEL,
    Problem,
    SiteDataError,
    _merge,
    _missing_columns,
    _Redacted,
)
from schemas.site_preparation import PreparationReport, SiteData, _prepare
from schemas.site_reading import (
    _DICT_STRING,
    _csv_header,
    _dictionary_encode,
    _needed_columns,
    _open,
    _string_columns,
    read_site_table,
)
from schemas.spec import StudySpec

if TYPE_CHECKING:
    from dpate_core.adjusted import CellStatistics

__all__ = [
    "BATCH_ROWS",
    "SQL_DIALECTS",
    "STREAMED_ESTIMATORS",
    "CsvSource",
    "DataSource",
    "ParquetDatasetSource",
    "ParquetFileSource",
    "SiteBatch",
    "SiteStatistics",
    "SqlSource",
    "is_sql_url",
    "iter_site_batches",
    "open_source",
    "prepare_source",
    "read_site_records",
    "redact_location",
    "stream_cell_statistics",
]

#: Rows per batch: ~1 M rows keeps a batch's working set near 0.3 GB and the per-batch overhead
#: (pandera, pandas) below 1 % of the time.
BATCH_ROWS = 1 << 20

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

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*){0,2}$")
_SECRET_KEYS = re.compile(r"(pass|secret|token|key|sig|credential|auth)", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# locations


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


# ---------------------------------------------------------------------------------------------
# sources


class DataSource(Protocol):
    """Where a site's records come from. ``name`` is safe for messages (redacted)."""

    fmt: str

    @property
    def name(self) -> str:
        """The location as messages may show it (:func:`redact_location`)."""

    def count_rows(self) -> int | None:
        """The number of rows, when the source knows it cheaply (metadata); else None."""

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The spec's columns, ``batch_rows`` rows at a time, in the source's order. Raises
        :class:`SiteDataError` naming missing columns or the reader's error type (never its text)."""


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


def _guarded(name: str, fmt: str, make: Any) -> Iterator[pa.RecordBatch]:
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


@dataclass
class CsvSource:
    """A CSV file (local path or fsspec URL; ``.gz``/``.bz2``/``.zst`` decompressed), streamed in
    blocks of ``block_size`` bytes when that gives exactly what one read gives.

    :func:`~schemas.site_reading.read_site_table` (one read) infers each column's type from all its
    blocks, widening it where a later block needs it; a streaming reader fixes it from the first
    block and fails on a later block that does not fit. So a file larger than one block is first
    parsed once in a streaming pass that keeps nothing (the spec's columns only): if it parses,
    the types are those of one read and the file is streamed again for validation; if not, it is
    read whole by ``read_site_table`` as before (same data, same messages; memory: the spec's
    columns as one Arrow table, text as dictionary)."""

    location: str
    fmt: str = "csv"
    #: the streaming reader's block: the first block fixes the types, and the parsing pass
    #: proves they are one read's for any block size; the reader keeps ~30 blocks in flight
    block_size: int = 1 << 20
    _probed: tuple[bool, int | None] | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def count_rows(self) -> int | None:
        """The rows counted by the parsing pass (it runs once; None when the file is read whole)."""
        return self._probed[1] if self._probed is not None and self._probed[0] else None

    def probe(self, spec: StudySpec) -> None:
        """Run the parsing pass now (so :meth:`count_rows` knows the rows)."""
        self._streams(spec)

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        if not self._streams(spec):
            table = read_site_table(self.location, spec, "csv")
            if table.num_rows == 0:
                yield from table.to_batches() or [_empty_batch(table.schema)]
                return
            yield from table.to_batches(max_chunksize=batch_rows)
            return

        def read() -> Iterator[Any]:
            # small blocks (the reader reads ~30 ahead) gathered into batches of batch_rows
            pending: list[pa.RecordBatch] = []
            count = 0
            empty = None
            for block in self._blocks(spec):
                if block.num_rows == 0 and empty is None:
                    empty = block
                start = 0
                while start < block.num_rows:
                    take = min(batch_rows - count, block.num_rows - start)
                    pending.append(block.slice(start, take))
                    count += take
                    start += take
                    if count == batch_rows:
                        yield pa.Table.from_batches(pending)
                        pending, count = [], 0
            if pending:
                yield pa.Table.from_batches(pending)
            elif empty is not None:  # a file without rows: one empty batch, as the others
                yield empty

        yield from _guarded(self.name, self.fmt, read)

    def _blocks(self, spec: StudySpec) -> Iterator[pa.RecordBatch]:
        import pyarrow.csv as pacsv

        needed = _needed_columns(spec)
        convert = pacsv.ConvertOptions(
            include_columns=needed,
            include_missing_columns=True,
            column_types={c: _DICT_STRING for c in _string_columns(spec)},
            strings_can_be_null=True,
        )
        with _open_plain(self.location) as fh:
            reader = pacsv.open_csv(
                fh,
                read_options=pacsv.ReadOptions(block_size=self.block_size),
                convert_options=convert,
            )
            seen = False
            for block in reader:
                if block.num_rows:
                    seen = True
                    yield block
            if not seen:
                yield _empty_batch(reader.schema)

    def _streams(self, spec: StudySpec) -> bool:
        """True when streaming gives one read's table: the header has every column and the
        file parses block by block at the first block's types. Runs once (cached)."""
        if self._probed is None:
            self._probed = self._probe(spec)
        return self._probed[0]

    def _probe(self, spec: StudySpec) -> tuple[bool, int | None]:
        try:
            header = _csv_header(self.location)
            if any(c not in header for c in _needed_columns(spec)):
                return False, None  # read_site_table names the missing columns
            rows = 0
            for block in self._blocks(spec):
                rows += block.num_rows
            return True, rows
        except Exception:  # the reader's text is dropped; read_site_table reports the problem
            return False, None


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


@dataclass
class ParquetFileSource:
    """One Parquet file (local path or fsspec URL), read ``batch_rows`` rows at a time; text
    columns the spec compares to labels are read as dictionaries."""

    location: str
    fmt: str = "parquet"

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def count_rows(self) -> int | None:
        import pyarrow.parquet as pq

        try:
            with _open_plain(self.location) as fh:
                return int(pq.ParquetFile(fh).metadata.num_rows)
        except Exception:  # the batches report the error
            return None

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        def read() -> Iterator[pa.RecordBatch]:
            needed = _needed_columns(spec)
            text_cols = _string_columns(spec)
            with _open_plain(self.location) as fh:
                pf = pq.ParquetFile(fh, pre_buffer=False)
                missing = [c for c in needed if c not in pf.schema_arrow.names]
                if missing:
                    raise _Redacted(_missing_columns(missing))
                # pre_buffer=False: with it, iter_batches buffers every row group's column chunks
                # up front (the whole file in memory, measured in bench/bench_sources.py)
                pf = pq.ParquetFile(
                    fh, metadata=pf.metadata, read_dictionary=text_cols, pre_buffer=False
                )
                seen = False
                for batch in pf.iter_batches(batch_size=batch_rows, columns=needed):
                    seen = True
                    yield _encode(batch, text_cols)
                if not seen:
                    yield _empty_batch(pa.schema([pf.schema_arrow.field(c) for c in needed]))

        return _guarded(self.name, self.fmt, read)


def _open_plain(location: str) -> Any:
    """A local file is read with plain reads, not memory-mapped: a mapping's pages count in the
    process's resident memory (up to the file's size) although only a batch is in use.
    (Compressed CSV and URLs: as :func:`~schemas.site_reading.read_site_table` opens them.)"""
    low = location.lower()
    local = "://" not in location or location.startswith("file://")
    if local and not low.endswith((".gz", ".bz2", ".zst")):
        return pa.OSFile(location.removeprefix("file://"), "rb")
    return _open(location)


def _encode(batch: pa.RecordBatch, text_cols: list[str]) -> pa.RecordBatch:
    if not text_cols:
        return batch
    table = _dictionary_encode(pa.Table.from_batches([batch]), text_cols)
    return table.combine_chunks().to_batches()[0] if table.num_rows else batch


@dataclass
class ParquetDatasetSource:
    """A partitioned Parquet dataset: a directory of Parquet files (hive partitions such as
    ``year=2024/`` become columns), local or any URL pyarrow or fsspec can list. Files are read in
    path order (row positions in messages count in that order)."""

    location: str
    fmt: str = "parquet-dataset"

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def _dataset(self, text_cols: list[str] | None = None) -> Any:
        import pyarrow.dataset as ds

        fmt = ds.ParquetFileFormat(
            read_options=ds.ParquetReadOptions(dictionary_columns=text_cols or [])
        )
        loc = self.location
        if "://" in loc and not loc.startswith("file://"):
            import pyarrow.fs as pafs

            try:
                fs, path = pafs.FileSystem.from_uri(loc)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
                import fsspec

                fsys, path = fsspec.core.url_to_fs(loc)
                fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsys))
            return ds.dataset(path, format=fmt, filesystem=fs, partitioning="hive")
        return ds.dataset(loc.removeprefix("file://"), format=fmt, partitioning="hive")

    def count_rows(self) -> int | None:
        try:
            return int(self._dataset().count_rows())
        except Exception:
            return None

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        def read() -> Iterator[pa.RecordBatch]:
            needed = _needed_columns(spec)
            text_cols = _string_columns(spec)
            dataset = self._dataset(text_cols)
            missing = [c for c in needed if c not in dataset.schema.names]
            if missing:
                raise _Redacted(_missing_columns(missing))
            # file by file, pulled synchronously: the dataset scanner reads ahead of a slow
            # consumer (1.5 GB queued at 10^8 rows, bench/bench_sources.py)
            schema = pa.schema([dataset.schema.field(c) for c in needed])
            seen = False
            for batch in _fragment_batches(dataset, schema, text_cols, batch_rows):
                if batch.num_rows:
                    seen = True
                    yield _encode(batch, text_cols)
            if not seen:
                yield _empty_batch(schema)

        return _guarded(self.name, self.fmt, read)


def _fragment_batches(
    dataset: Any, schema: pa.Schema, text_cols: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """A dataset's rows in ``schema``, one Parquet file at a time (path order), without
    pre-buffering: partition keys become constant columns, a column a file lacks is null (as the
    dataset scanner does), and every column is cast to the dataset's type."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    for frag in dataset.get_fragments():
        keys = ds.get_partition_keys(frag.partition_expression) or {}
        with dataset.filesystem.open_input_file(frag.path) as fh:
            pf = pq.ParquetFile(fh, pre_buffer=False, read_dictionary=text_cols)
            in_file = [c for c in schema.names if c in pf.schema_arrow.names and c not in keys]
            for batch in pf.iter_batches(batch_size=batch_rows, columns=in_file):
                n = batch.num_rows
                arrays = []
                for field in schema:
                    if field.name in keys:
                        arr = pa.array([keys[field.name]] * n).cast(field.type)
                    elif field.name in in_file:
                        arr = batch.column(field.name)
                        if arr.type != field.type and not (
                            field.name in text_cols and pa.types.is_dictionary(arr.type)
                        ):
                            arr = arr.cast(field.type)
                    else:
                        arr = pa.nulls(n, field.type)
                    arrays.append(arr)
                yield pa.RecordBatch.from_arrays(arrays, names=schema.names)


@dataclass
class SqlSource:
    """The rows of a SQL query on a database named by a SQLAlchemy URL, fetched ``batch_rows`` at a
    time through a server-side cursor (``stream_results``).

    ``query`` is a ``SELECT``/``WITH`` statement or a table name (``schema.table``); the spec's
    columns are selected from it by name (``SELECT "t", "y", ... FROM (query) AS dpate_source``), so
    the query may return more. Row positions in messages count in the query's order: add an
    ``ORDER BY`` for reproducible positions. The password comes from the driver's environment
    (``PGPASSWORD``, ``PGPASSFILE``, ``PGSERVICE`` for PostgreSQL) or from the Prefect Secret block
    named ``secret``; a password written in the URL works but is never shown."""

    url: str
    query: str
    secret: str | None = None
    fmt: str = "sql"

    @property
    def name(self) -> str:
        return redact_location(self.url)

    def __repr__(self) -> str:  # the URL may hold a password: never shown
        return f"SqlSource({self.name!r})"

    def _engine(self) -> Any:
        import sqlalchemy as sa
        from sqlalchemy.engine import make_url

        url = make_url(self.url)
        if self.secret:
            url = url.set(password=_secret_value(self.secret))
        return sa.create_engine(url, poolclass=sa.pool.NullPool)

    def _from(self, engine: Any) -> str:
        q = self.query.strip().rstrip(";").strip()
        if _TABLE_NAME.match(q):
            quote = engine.dialect.identifier_preparer.quote
            return ".".join(quote(p) for p in q.split("."))
        return f"({q}) AS dpate_source"

    def count_rows(self) -> int | None:
        return None  # a COUNT(*) would scan the query once more; the batches are collected

    def count_rows_exact(self) -> int:
        """``SELECT count(*)`` over the query (one more scan on the database)."""

        engine = self._engine()
        try:
            sql = f"SELECT count(*) FROM {self._from(engine)}"
            if _is_pg_psycopg(engine):  # the query as written: no bind-parameter parsing
                raw = engine.raw_connection()
                try:
                    with raw.driver_connection.cursor() as cur:
                        cur.execute(sql)
                        return int(cur.fetchone()[0])
                finally:
                    raw.close()
            with engine.connect() as conn:
                return int(conn.exec_driver_sql(sql).scalar())
        finally:
            engine.dispose()

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        def read() -> Iterator[pa.RecordBatch]:

            needed = _needed_columns(spec)
            text_cols = _string_columns(spec)
            engine = self._engine()
            try:
                source = self._from(engine)
                quote = engine.dialect.identifier_preparer.quote
                if _is_pg_psycopg(engine):
                    yield from _pg_copy_batches(engine, source, needed, text_cols, batch_rows)
                    return
                with engine.connect() as conn:
                    probe = conn.exec_driver_sql(f"SELECT * FROM {source} WHERE 1 = 0")
                    names = list(probe.keys())
                    probe.close()
                    missing = [c for c in needed if c not in names]
                    if missing:
                        raise _Redacted(_missing_columns(missing))
                    cols = ", ".join(quote(c) for c in needed)
                    result = conn.execution_options(
                        stream_results=True, max_row_buffer=batch_rows
                    ).exec_driver_sql(f"SELECT {cols} FROM {source}")
                    seen = False
                    while True:
                        rows = result.fetchmany(batch_rows)
                        if not rows:
                            break
                        seen = True
                        yield _rows_to_batch(rows, needed, text_cols)
                    if not seen:
                        yield _rows_to_batch([], needed, text_cols)
            finally:
                engine.dispose()

        return _guarded(self.name, self.fmt, read)


def _is_pg_psycopg(engine: Any) -> bool:
    return bool(engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg")


#: PostgreSQL type OIDs -> Arrow types for COPY's CSV (others are read as text, and validated)
_PG_TYPES = {
    16: pa.bool_(),
    20: pa.int64(),
    21: pa.int64(),
    23: pa.int64(),
    700: pa.float64(),
    701: pa.float64(),
    1700: pa.float64(),  # numeric: as a decimal column from a file, converted to float64
}


class _CopyStream:
    """A read-only file over psycopg's ``COPY ... TO STDOUT`` chunks (for pyarrow's CSV reader)."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        if size < 0:
            size = len(self._buf)
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _pg_copy_batches(
    engine: Any, source: str, needed: list[str], text_cols: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """PostgreSQL through psycopg 3: ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` parsed by
    pyarrow's CSV reader with every column's type fixed from the query's result types (no
    inference), about 5x faster than fetching Python rows. NULL is an unquoted empty field, an
    empty string a quoted one; ``NaN``/``Infinity`` parse as floats."""
    import pyarrow.csv as pacsv

    quote = engine.dialect.identifier_preparer.quote
    raw = engine.raw_connection()
    try:
        conn = raw.driver_connection
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {source} WHERE 1 = 0")
            types = {d.name: d.type_code for d in (cur.description or [])}
        missing = [c for c in needed if c not in types]
        if missing:
            raise _Redacted(_missing_columns(missing))
        column_types = {
            c: _DICT_STRING if c in text_cols else _PG_TYPES.get(types[c], pa.string())
            for c in needed
        }
        cols = ", ".join(quote(c) for c in needed)
        sql = f"COPY (SELECT {cols} FROM {source}) TO STDOUT (FORMAT csv)"
        with conn.cursor() as cur, cur.copy(sql) as copy:
            reader = pacsv.open_csv(
                pa.PythonFile(_CopyStream(iter(copy)), mode="r"),
                read_options=pacsv.ReadOptions(
                    column_names=needed, block_size=max(1 << 20, 24 * batch_rows)
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types=column_types,
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                    true_values=["t"],
                    false_values=["f"],
                ),
            )
            seen = False
            for batch in reader:
                if batch.num_rows:
                    seen = True
                    yield batch
            if not seen:
                yield _empty_batch(reader.schema)
    finally:
        raw.close()


def _rows_to_batch(rows: list[Any], names: list[str], text_cols: list[str]) -> pa.RecordBatch:
    """Driver rows -> Arrow columns (numbers stay numbers, NULL is null; decimals become float64
    as a numeric column read from a file would)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = []
    for name, values in zip(names, columns, strict=True):
        arr = pa.array(values, from_pandas=False)
        if pa.types.is_decimal(arr.type):
            arr = arr.cast(pa.float64())
        elif pa.types.is_null(arr.type) and name not in text_cols:
            arr = arr.cast(pa.float64())
        elif pa.types.is_null(arr.type):
            arr = arr.cast(pa.string())
        arrays.append(arr)
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    return _encode(batch, text_cols)


def _secret_value(block: str) -> str:
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


def open_source(
    location: str | Path,
    spec: StudySpec,
    fmt: str | None = None,
    *,
    query: str | None = None,
    secret: str | None = None,
) -> DataSource:
    """The source at ``location`` (see the module docstring for how it is chosen).

    A SQL URL is a SQL source whatever ``fmt`` says (``fmt`` is the spec's, for the spec's own
    file); its query is ``query``, else ``DPATE_DATA_QUERY``; its Secret block ``secret``, else
    ``DPATE_DATA_SECRET``."""
    loc = str(location)
    if fmt == "sql" or is_sql_url(loc):
        q = query or os.environ.get(QUERY_ENV, "").strip()
        if not q:
            raise SiteDataError(
                [],
                hint=f"the site's data is the database {redact_location(loc)} but no query is "
                f"set: set {QUERY_ENV} in the site's environment to a SELECT statement naming "
                f"the spec's columns {_needed_columns(spec)}, or to a table name",
            )
        return SqlSource(loc, q, secret or os.environ.get(SECRET_ENV, "").strip() or None)
    low = loc.lower().split("?")[0]
    if fmt == "parquet-dataset" or (
        fmt in (None, "parquet")
        and (low.endswith("/") or ("://" not in loc and Path(loc).is_dir()))
    ):
        return ParquetDatasetSource(loc)
    if fmt is None:
        fmt = "parquet" if low.endswith((".parquet", ".pq")) else "csv"
    if fmt == "parquet":
        return ParquetFileSource(loc)
    return CsvSource(loc)


# ---------------------------------------------------------------------------------------------
# validation in batches

#: The order a single pass lists a column's problems in (conversions first, then the schema's
#: checks); batches merge into this order so the message is the single pass's.
_RULE_ORDER = (
    _R_NOT_NUMBER,
    _R_OUTCOME_LABEL,
    _R_MISSING + " (study policy missing = 'reject')",
    _R_MISSING,
    "of the wrong type for this column",
    _R_TREATMENT_01,
    _R_TREATMENT_LABEL,
    _R_NOT_FINITE,
    _R_OUT_OF_BOUNDS,
    _R_LEVEL,
    _R_EDGES,
)


@dataclass(frozen=True, repr=False, eq=False)
class SiteBatch:
    """One validated batch: ``(w, y, x)`` of its used rows, where it starts in the source
    (``offset``, rows read before it) and its operator-only report. ``repr`` shows sizes only."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    offset: int
    report: PreparationReport

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    def __repr__(self) -> str:
        return f"SiteBatch(offset={self.offset}, n={self.n})"


def _frame(batch: pa.RecordBatch) -> pd.DataFrame:
    # as site_reading._as_frame: dictionary text -> Categorical, other text -> Arrow strings
    return batch.to_pandas(
        types_mapper={pa.string(): pd.StringDtype("pyarrow")}.get, split_blocks=True
    )


class _Stage:
    value = "reading"


def _validated(
    source: DataSource, spec: StudySpec, batch_rows: int, stage: _Stage
) -> Iterator[SiteBatch]:
    """Validate every batch; yield the good ones while no batch has failed; after the last
    batch raise one SiteDataError with every problem (counts added, positions shifted)."""
    problems: list[Problem] = []
    offset = 0
    for batch in source.batches(spec, batch_rows):
        stage.value = "reading"
        frame = _frame(batch)
        stage.value = "validation"
        failure: SiteDataError | None = None
        try:
            data = _prepare(frame, spec)
        except SiteDataError as exc:
            failure = exc
        del frame
        if failure is not None:
            problems += [
                Problem(p.column, p.rule, p.count, tuple(r + offset for r in p.rows))
                for p in failure.problems
            ]
            del failure
        elif not problems:
            yield SiteBatch(data.w, data.y, data.x, offset, data.report)
        offset += batch.num_rows
        stage.value = "reading"
    if problems:
        cols = {c: i for i, c in enumerate(_needed_columns(spec))}
        rules = {r: i for i, r in enumerate(_RULE_ORDER)}
        merged = sorted(
            _merge(problems),
            key=lambda p: (cols.get(p.column, len(cols)), rules.get(p.rule, len(rules))),
        )
        raise SiteDataError(merged, n_rows=offset)


def _redacted_run(run: Any, stage: _Stage) -> Any:
    """Run ``run()`` as prepare_site_data does: warnings swallowed and counted, any exception
    that is not a SiteDataError replaced by one naming the stage and its type only."""
    failure: SiteDataError | None = None
    result = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run()
        except SiteDataError as exc:
            failure = exc
        except Exception as exc:  # pandas / pyarrow / pandera texts may hold values: redact
            failure = SiteDataError(
                [],
                hint=f"the site data could not be processed during {stage.value} "
                f"({type(exc).__name__}; its message is withheld because it may quote record "
                f"values)",
            )
    if failure is not None:
        raise failure
    return result, len(caught)


def _as_source(
    source: str | Path | DataSource,
    spec: StudySpec,
    fmt: str | None,
    query: str | None,
    secret: str | None,
) -> DataSource:
    """``source`` itself, or the source at that location (:func:`open_source`)."""
    if isinstance(source, (str, Path)):
        return open_source(source, spec, fmt, query=query, secret=secret)
    return source


def iter_site_batches(
    source: str | Path | DataSource,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[SiteBatch]:
    """The site's validated ``(w, y, x)``, one batch at a time (nothing kept between batches).

    Every batch is validated as :func:`~schemas.site_preparation.prepare_site_data` validates a file.
    Once a batch fails no more batches are yielded; the remaining ones are still validated and a
    :class:`~schemas.site_errors.SiteDataError` with every problem is raised after the last one.
    **A consumer must therefore discard what it accumulated unless the iteration ends normally**
    (:func:`stream_cell_statistics` does). Warnings are swallowed; reader errors redacted."""
    src = _as_source(source, spec, fmt, query, secret)
    stage = _Stage()
    it = _validated(src, spec, batch_rows, stage)
    while True:
        batch, _ = _redacted_run(lambda: next(it, None), stage)
        if batch is None:
            return
        yield batch


def prepare_source(
    source: str | Path | DataSource,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> SiteData:
    """:func:`~schemas.site_preparation.prepare_site_data` for a location, in batches: the same
    ``SiteData``, report (its counts summed over batches) and errors, word for word. Keeps
    ``(w, y, x)`` (17 bytes a row, preallocated when the source knows its row count) and one
    batch's working set."""
    src = _as_source(source, spec, fmt, query, secret)
    stage = _Stage()

    def run() -> SiteData:
        if isinstance(src, CsvSource):
            src.probe(spec)  # the parsing pass counts the rows: (w, y, x) preallocated
        total = src.count_rows()
        parts = _Collected(total)
        for b in _validated(src, spec, batch_rows, stage):
            parts.add(b)
        return parts.site_data(spec)

    data: SiteData
    data, n_warnings = _redacted_run(run, stage)
    if n_warnings:
        data = SiteData(
            data.w,
            data.y,
            data.x,
            data.domain_size,
            data.bound,
            PreparationReport(**{**data.report.__dict__, "warnings_suppressed": n_warnings}),
        )
    return data


class _Collected:
    """``(w, y, x)`` of the batches, in preallocated arrays when the row count is known."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.n = 0
        self.reports: list[PreparationReport] = []
        if total is not None:
            self.w = np.empty(total, np.int8)
            self.y = np.empty(total, np.float64)
            self.x = np.empty(total, np.int64)
        else:
            self.parts: list[SiteBatch] = []

    def add(self, b: SiteBatch) -> None:
        self.reports.append(b.report)
        if self.total is not None and self.n + b.n <= self.total:
            self.w[self.n : self.n + b.n] = b.w
            self.y[self.n : self.n + b.n] = b.y
            self.x[self.n : self.n + b.n] = b.x
        elif self.total is not None:  # more rows than the metadata said: fall back
            self.parts = [
                SiteBatch(self.w[: self.n], self.y[: self.n], self.x[: self.n], 0, b.report)
            ]
            self.total = None
            self.parts.append(b)
        else:
            self.parts.append(b)
        self.n += b.n

    def site_data(self, spec: StudySpec) -> SiteData:
        if self.total is not None:
            w, y, x = self.w[: self.n], self.y[: self.n], self.x[: self.n]
        elif len(self.parts) == 1:
            w, y, x = self.parts[0].w, self.parts[0].y, self.parts[0].x
        else:
            w = np.concatenate([p.w for p in self.parts]) if self.parts else np.empty(0, np.int8)
            y = np.concatenate([p.y for p in self.parts]) if self.parts else np.empty(0)
            x = np.concatenate([p.x for p in self.parts]) if self.parts else np.empty(0, np.int64)
            self.parts = []
        return SiteData(w, y, x, spec.domain_size, spec.outcome.bound, _sum_reports(self.reports))


def _sum_reports(reports: Iterable[PreparationReport]) -> PreparationReport:
    n_read = n_used = dropped = low = high = 0
    missing: dict[str, int] = {}
    mapped: dict[str, int] = {}
    for r in reports:
        n_read += r.n_read
        n_used += r.n_used
        dropped += r.dropped_missing
        low += r.clipped_low
        high += r.clipped_high
        for k, v in r.missing_by_column.items():
            missing[k] = missing.get(k, 0) + v
        for k, v in r.mapped_to_other.items():
            mapped[k] = mapped.get(k, 0) + v
    return PreparationReport(
        n_read=n_read,
        n_used=n_used,
        dropped_missing=dropped,
        missing_by_column=missing,
        clipped_low=low,
        clipped_high=high,
        mapped_to_other=mapped,
    )


# ---------------------------------------------------------------------------------------------
# streaming sufficient statistics


def stream_cell_statistics(
    source: str | Path | DataSource,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    batch_rows: int = BATCH_ROWS,
    n_hint: int | None = None,
) -> tuple[CellStatistics, PreparationReport]:
    """The :class:`~dpate_core.adjusted.CellStatistics` accumulated batch by batch (memory
    ``O(batch_rows + |X|)``), equal to ``cell_statistics`` on the whole data, and the
    operator-only report. Centred sums (the adjusted estimator's) unless the spec's estimator is
    the difference in means (:data:`_UNCENTRED`), whose arm sums are those of the cells; a binary
    outcome (``outcome.binary``) is checked to be 0 or ``B`` in every record, batch by batch.

    The quantisation grid (:func:`dpate_core.adjusted.grid_bits`) depends on the number of records
    ``N``. It is taken from ``n_hint``, else the source's row count (Parquet metadata), else a
    ``count(*)`` for a SQL source; when the rows used (after ``missing = "drop"``) need another
    grid, the source is read a second time with it (the sums are exact integers, so the result is
    identical to one pass over all records)."""
    from dpate_core.adjusted import CellStatistics, grid_bits

    src = _as_source(source, spec, fmt, query, secret)
    if n_hint is None and isinstance(src, CsvSource):
        src.probe(spec)
    guess = n_hint if n_hint is not None else src.count_rows()
    if guess is None and isinstance(src, SqlSource):
        guess = _count_exact(src)
    centred = spec.estimator not in _UNCENTRED
    grid = grid_bits(max(guess or 1, 1), centred=centred)
    while True:
        stats, report = _accumulate(src, spec, batch_rows, grid, centred)
        needed = grid_bits(max(report.n_used, 1), centred=centred)
        if needed == grid:
            break
        grid = needed
    k, m = grid
    counts, sums, squares = stats
    return CellStatistics(counts, sums, squares, spec.outcome.bound, k, m, centred), report


#: estimators whose streamed statistics are sums of ``Y`` and ``Y^2`` (not centred)
_UNCENTRED = frozenset({"dim"})


def _count_exact(src: SqlSource) -> int:
    """``src.count_rows_exact()`` with the driver's error redacted as a read's."""
    failure: SiteDataError | None = None
    try:
        return src.count_rows_exact()
    except SiteDataError as exc:  # a Secret block that cannot be loaded
        failure = exc
    except Exception as exc:  # the driver's text may quote values or credentials
        failure = _read_failure(src.name, src.fmt, exc)
    raise failure


def _accumulate(
    src: DataSource, spec: StudySpec, batch_rows: int, grid: tuple[int, int], centred: bool
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], PreparationReport]:
    # the compiled pass of dpate_core.adjusted.cell_statistics, with the whole data's grid
    from dpate_core.adjusted import _OK, _cell_kernel

    k, m = grid
    n_cells = 2 * spec.domain_size
    counts = np.zeros(n_cells, np.int64)
    sums = np.zeros(n_cells, np.int64)
    squares = np.zeros(n_cells, np.int64)
    reports: list[PreparationReport] = []
    bound = float(spec.outcome.bound)
    centre = 0.5 if centred else 0.0
    binary = spec.outcome.binary
    not_binary = False
    for b in iter_site_batches(src, spec, batch_rows=batch_rows):
        if binary and not not_binary:
            not_binary = not bool(np.all((b.y == 0.0) | (b.y == bound)))
        status, c, s, q = _cell_kernel(b.w, b.y, b.x, spec.domain_size, bound, k, m, centre)
        if status != _OK:  # validated batches cannot fail the kernel's checks
            raise ValueError("a validated batch failed the cell statistics' range checks")
        counts += c
        sums += s
        squares += q
        reports.append(b.report)
    if not_binary:  # after the last batch: every batch was validated first
        raise SiteDataError(
            [],
            hint="a binary outcome must be exactly 0 or B in every record: map the outcome's two "
            "labels to 0 and B, or remove outcome.binary from the spec",
        )
    limit = 2.0**53
    if max(np.abs(sums).max(initial=0), squares.max(initial=0)) > limit:  # pragma: no cover
        raise ValueError("cell sums exceed 2^53: the grid was chosen for fewer records")
    return (counts, sums, squares), _sum_reports(reports)


# ---------------------------------------------------------------------------------------------
# what a release reads


#: Estimators released from streamed statistics (one pass, memory independent of N), with the
#: plan built from them. Only statistics whose batch sums equal the whole data's *exactly*
#: qualify, so the release is the materialising path's bit for bit: the adjusted estimator's
#: per-cell counts and integer (quantised) sums do, and so do the difference in means' arm
#: counts and integer sums of ``Y`` and ``Y^2`` (the same kernel, not centred). A float sum would
#: not (numpy's pairwise sum of a whole array is not the sum of its batches' sums).
STREAMED_ESTIMATORS = frozenset({"adjusted", "dim"})


@dataclass(frozen=True, repr=False, eq=False)
class SiteStatistics:
    """A streamed release's private input: the per-cell sufficient statistics of the site's
    validated records and the operator-only report. No record is kept. ``repr`` shows nothing
    computed from the records."""

    cells: CellStatistics
    report: PreparationReport

    @property
    def n(self) -> int:
        return self.cells.n

    @property
    def domain_size(self) -> int:
        return int(self.cells.counts.size // 2)

    def __repr__(self) -> str:
        return f"SiteStatistics(cells={self.cells.counts.size})"


def read_site_records(
    spec: StudySpec,
    site_id: str,
    location: str | Path,
    *,
    query: str | None = None,
    secret: str | None = None,
) -> SiteData | SiteStatistics:
    """The site's validated records as the spec's estimator needs them (no Prefect here):
    streamed statistics for :data:`STREAMED_ESTIMATORS`, else ``(w, y, x)`` in memory. Read in
    batches either way; raises
    :class:`~schemas.site_errors.SiteDataError`. ``query``/``secret``: a SQL source's query and
    Prefect Secret block name (else ``DPATE_DATA_QUERY``/``DPATE_DATA_SECRET``)."""
    source = open_source(str(location), spec, spec.site(site_id).format, query=query, secret=secret)
    if spec.estimator in STREAMED_ESTIMATORS:
        cells, report = stream_cell_statistics(source, spec)
        return SiteStatistics(cells, report)
    return prepare_source(source, spec)
