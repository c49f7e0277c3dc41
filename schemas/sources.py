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
dpate/settings.py) and never appear in a message: every location shown in an error goes through
:func:`~dpate.schemas.source_redaction.redact_location` (no password, no query string). A SQL source
takes its password from the driver's own environment (libpq's ``PGPASSWORD`` / ``PGPASSFILE`` /
``PGSERVICE`` for PostgreSQL), or from a Prefect Secret block named by ``DPATE_DATA_SECRET`` (or
the site config's ``data_secret``, passed as ``secret``), loaded at the site when the source is
opened and held in memory only. A driver's error text is withheld (only its type is kept): it may
quote a record value.

**Batches and memory.** Validation (schemas/site_preparation.py) is per row, so it runs per batch of
``batch_rows`` rows (default :data:`~dpate.schemas.site_batches.BATCH_ROWS`): problems are collected
across batches, their counts added and their first row positions kept (positions count from 0
over the whole source, in its order), and one :class:`~dpate.schemas.site_errors.SiteDataError` is
raised after the last batch, with exactly the text a single pass gives. Peak memory is one batch's
working set (a few hundred bytes a row, for the pandas/pandera conversions) plus what the consumer
keeps:

- :func:`~dpate.schemas.site_batches.prepare_source` (the release path of the estimators that need the
  records, and :func:`~dpate.schemas.site_preparation.prepare_site_data` for a location) keeps
  ``(w, y, x)``: 17 bytes a row (int8, float64, int64), preallocated when the source knows its
  row count;
- :func:`~dpate.schemas.site_batches.iter_site_batches` yields each validated batch's ``(w, y, x)`` and
  keeps nothing;
- :func:`~dpate.schemas.site_statistics.stream_cell_statistics` (the release path of the adjusted
  estimator and the difference in means, ``dpate.tasks.site.read_site_records``) accumulates their
  per-cell sufficient statistics (:func:`dpate_core.grid_sums.cell_statistics`: exact integer sums
  on a public grid, centred for the adjusted estimator, not centred for the difference in means)
  batch by batch: memory ``O(batch + |X|)`` whatever ``N``.

Algorithm 1 (matching) cannot stream this way: it pairs records by their rank inside their
(stratum, arm) group under a data-independent random order, so the release keeps all ``(w, y, x)``
(docs/study-spec.md, "Data sources" has the two-pass design that would bound it per stratum).

The row counts seen here (rows read, used, dropped) are computed from private records: operator only.

Modules: this one holds :class:`DataSource` and :func:`open_source`; the sources are in
schemas/source_csv.py, schemas/source_parquet.py and schemas/source_sql.py, message redaction in
schemas/source_redaction.py, validation in batches in schemas/site_batches.py, and the streamed
statistics a release reads in schemas/site_statistics.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from dpate.schemas.site_errors import SiteDataError
from dpate.schemas.site_reading import _needed_columns
from dpate.schemas.source_csv import CsvSource
from dpate.schemas.source_parquet import ParquetDatasetSource, ParquetFileSource
from dpate.schemas.source_redaction import QUERY_ENV, SECRET_ENV, is_sql_url, redact_location
from dpate.schemas.source_sql import SqlSource
from dpate.schemas.spec import StudySpec

__all__ = ["DataSource", "open_source"]


class DataSource(Protocol):
    """Where a site's records come from. ``name`` is safe for messages (redacted)."""

    fmt: str

    @property
    def name(self) -> str:
        """The location as messages may show it (:func:`~dpate.schemas.source_redaction.redact_location`)."""

    def count_rows(self) -> int | None:
        """The number of rows, when the source knows it cheaply (metadata); else None."""

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The spec's columns, ``batch_rows`` rows at a time, in the source's order. Raises
        :class:`SiteDataError` naming missing columns or the reader's error type (never its text)."""


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
