"""A SQL query on the site's database as a data source: PostgreSQL through ``COPY`` (psycopg 3),
other databases through a server-side cursor; the password from the driver's environment or a
Prefect Secret block loaded at the site."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpate.schemas.arrow_batches import _encode, _or_empty
from dpate.schemas.site_errors import SiteDataError, _missing_columns, _Redacted
from dpate.schemas.site_reading import _DICT_STRING, _needed_columns, _string_columns
from dpate.schemas.source_redaction import SECRET_ENV, _guarded, redact_location
from dpate.schemas.spec import StudySpec

__all__ = ["SqlSource"]

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*){0,2}$")


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
            yield from _or_empty(reader, reader.schema)
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
