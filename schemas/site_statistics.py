"""What a site's release reads: per-cell sufficient statistics streamed batch by batch for the
estimators in :data:`STREAMED_ESTIMATORS` (memory independent of ``N``), else ``(w, y, x)``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpate.schemas.site_batches import (
    BATCH_ROWS,
    _as_source,
    _sum_reports,
    iter_site_batches,
    prepare_source,
)
from dpate.schemas.site_errors import SiteDataError
from dpate.schemas.site_preparation import PreparationReport, SiteData
from dpate.schemas.source_csv import CsvSource
from dpate.schemas.source_redaction import _read_failure
from dpate.schemas.source_sql import SqlSource
from dpate.schemas.sources import DataSource, open_source
from dpate.schemas.spec import StudySpec

if TYPE_CHECKING:
    from dpate_core.grid_sums import CellStatistics

__all__ = ["STREAMED_ESTIMATORS", "SiteStatistics", "read_site_records", "stream_cell_statistics"]


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
    """The :class:`~dpate_core.grid_sums.CellStatistics` accumulated batch by batch (memory
    ``O(batch_rows + |X|)``), equal to ``cell_statistics`` on the whole data, and the
    operator-only report. Centred sums (the adjusted estimator's) unless the spec's estimator is
    the difference in means (:data:`_UNCENTRED`), whose arm sums are those of the cells; a binary
    outcome (``outcome.binary``) is checked to be 0 or ``B`` in every record, batch by batch.

    The quantisation grid (:func:`dpate_core.grid_sums.grid_bits`) depends on the number of records
    ``N``. It is taken from ``n_hint``, else the source's row count (Parquet metadata), else a
    ``count(*)`` for a SQL source; when the rows used (after ``missing = "drop"``) need another
    grid, the source is read a second time with it (the sums are exact integers, so the result is
    identical to one pass over all records)."""
    from dpate_core.grid_sums import CellStatistics, grid_bits

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
    # the compiled pass of dpate_core.grid_sums.cell_statistics, with the whole data's grid
    from dpate_core.estimators import _OK
    from dpate_core.grid_sums import _cell_kernel

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
    :class:`~dpate.schemas.site_errors.SiteDataError`. ``query``/``secret``: a SQL source's query and
    Prefect Secret block name (else ``DPATE_DATA_QUERY``/``DPATE_DATA_SECRET``)."""
    source = open_source(str(location), spec, spec.site(site_id).format, query=query, secret=secret)
    if spec.estimator in STREAMED_ESTIMATORS:
        cells, report = stream_cell_statistics(source, spec)
        return SiteStatistics(cells, report)
    return prepare_source(source, spec)
