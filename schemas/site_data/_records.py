"""What reading a site's data gives: the operator's report, the statistics a release is computed
from, and (tests and simulations) the validated records themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from dpate_core.statistics import CellStatistics, MatchingStatistics

__all__ = ["PreparationReport", "SiteData", "SiteStatistics"]


@dataclass(frozen=True)
class PreparationReport:
    """What validation did to the records. **Operator only**: these counts are not private
    releases; they go to the site's own log, never to a report, Prefect or the coordinator."""

    n_read: int
    n_used: int
    dropped_missing: int = 0
    missing_by_column: dict[str, int] = field(default_factory=dict)
    clipped_low: int = 0
    clipped_high: int = 0
    mapped_to_other: dict[str, int] = field(default_factory=dict)
    #: rows whose covariate (public bounds, no bins, policy "clip") was clipped, per column
    clipped_covariates: dict[str, int] = field(default_factory=dict)
    warnings_suppressed: int = 0


@dataclass(frozen=True, repr=False, eq=False)
class SiteData:
    """A site's validated records as the core takes them (tests and simulations; a release reads
    :class:`SiteStatistics`, unless its estimator plans from records): ``w`` (int8 0/1), ``y``
    (float64 in ``[0, B]``), ``x`` (int64 stratum ids), the public ``|X|`` and ``B``, and ``z``:
    the ``(N, q)`` values of the spec's numeric covariates with public bounds and no bins,
    clipped to them, in spec order (None without any). Its ``repr`` shows sizes only."""

    w: npt.NDArray[np.int8]
    y: npt.NDArray[np.float64]
    x: npt.NDArray[np.int64]
    domain_size: int
    bound: float
    report: PreparationReport
    z: npt.NDArray[np.float64] | None = None

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    def __repr__(self) -> str:
        return f"SiteData(n={self.n}, domain_size={self.domain_size}, bound={self.bound})"


@dataclass(frozen=True, repr=False, eq=False)
class SiteStatistics:
    """A release's private input, computed where the data lives: the per-cell sufficient
    statistics of the validated records (counts and exact grid sums,
    :class:`~dpate_core.statistics.CellStatistics`), Algorithm 1's statistics for the matching
    estimators (:class:`~dpate_core.statistics.MatchingStatistics`, else None), and the
    operator-only report. No record is kept; ``repr`` shows nothing computed from the records."""

    cells: CellStatistics
    report: PreparationReport
    matching: MatchingStatistics | None = None

    @property
    def n(self) -> int:
        return self.cells.n

    @property
    def domain_size(self) -> int:
        return int(self.cells.counts.size // 2)

    def __repr__(self) -> str:
        return f"SiteStatistics(cells={self.cells.counts.size})"
