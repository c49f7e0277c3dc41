"""A site's rows opened on their engine (:class:`SiteTable`, from
:func:`~._engine.open_site_table`): the queries run there, as Arrow tables or batches, every call
through :func:`._redaction.engine_call` (an engine's error text may quote a record value or a
credential, so only its type is kept)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ._redaction import engine_call

__all__ = ["POSITION", "SiteTable"]

POSITION = "_dpate_pos"


@dataclass
class SiteTable:
    """A site's rows as an Ibis table on its engine. ``name`` is the location as messages may
    show it (redacted); ``kind`` the source kind (``csv``, ``parquet``, ``parquet-dataset``,
    ``sql``, ``spark``, ``frame``). ``repr`` shows the redacted name only."""

    backend: Any
    table: Any
    name: str
    kind: str
    dialect: str
    _positioned: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"SiteTable({self.name!r}, {self.kind})"

    @property
    def columns(self) -> list[str]:
        return list(self.table.columns)

    def positioned(self) -> Any:
        """The rows with their 0-based position in the source's order (column ``POSITION``):
        the order a file is read in (files of a dataset in path order), a query's own order."""
        if self._positioned is None:
            import ibis

            self._positioned = self.table.mutate(**{POSITION: ibis.row_number()})
        return self._positioned

    def to_arrow(self, expr: Any, *, small: bool = False) -> Any:
        """``expr`` run on the engine (errors redacted): an Arrow table, or a scalar's
        ``pa.Scalar``, in the types of ``expr``'s schema. ``small``: a result of a few rows
        (grouped counts and sums), fetched at once."""
        return engine_call(self.name, self._error_kind, lambda: self._to_arrow(expr, small))

    def _to_arrow(self, expr: Any, small: bool = False) -> Any:
        if small and self.dialect == "postgres":
            # a plain query, not Ibis's server-side cursor: PostgreSQL never runs a cursor's
            # query in parallel workers
            with self.backend.raw_sql(self.backend.compile(expr.as_table())) as cur:
                rows = cur.fetchall()
                names = [d.name for d in cur.description]
            columns = [pa.array([r[i] for r in rows]) for i in range(len(names))]
            return expr.__pyarrow_result__(pa.table(columns, names=names))
        if self.dialect != "duckdb" or self.kind == "frame":
            return self.backend.to_pyarrow(expr)
        # a file on DuckDB: the compiled SQL run through the backend's public raw_sql and cast
        # to the expression's schema, as Ibis's to_pyarrow does, without the result converter
        # module that imports pandas (a third of a light command's time); no in-memory table to
        # register first (only a "frame" source has one)
        table = self.backend.raw_sql(self.backend.compile(expr.as_table())).to_arrow_table()
        return expr.__pyarrow_result__(table)

    def batches(self, expr: Any, rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """``expr``'s rows as Arrow batches of about ``rows`` rows, pulled one at a time."""
        reader = engine_call(
            self.name,
            self._error_kind,
            lambda: self.backend.to_pyarrow_batches(expr, chunk_size=rows),
        )
        while True:
            batch = engine_call(self.name, self._error_kind, lambda: _next(reader))
            if batch is None:
                return
            yield batch

    def estimated_rows(self) -> int:
        """The number of rows, or (PostgreSQL) the planner's estimate of it: what fixes the
        grid of a first pass over the data, which is checked against the exact count after
        (:func:`._statistics.site_summary`). DuckDB counts a Parquet file's rows from its
        metadata; PostgreSQL's estimate costs no scan."""
        if self.dialect == "postgres":
            import ibis

            sql = ibis.to_sql(self.table, dialect="postgres")

            def explain() -> int:
                with self.backend.raw_sql(f"EXPLAIN (FORMAT JSON) {sql}") as cur:
                    plan = cur.fetchone()[0]
                return int(plan[0]["Plan"]["Plan Rows"])

            return engine_call(self.name, self._error_kind, explain)
        return int(self.to_arrow(self.table.count()).as_py())

    @property
    def _error_kind(self) -> str:
        return "sql" if self.kind in ("sql", "spark") else self.kind

    def close(self) -> None:
        if self.kind != "spark":  # a Spark session belongs to the site, not to one release
            engine_call(self.name, self._error_kind, self._disconnect)

    def _disconnect(self) -> None:
        disconnect = getattr(self.backend, "disconnect", None)
        if disconnect is not None:
            disconnect()


def _next(reader: Any) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None
