"""The non-private statistics the mechanisms release noisy versions of, computed in one
compiled pass each:

- per-cell sufficient statistics as exact integer sums on a public grid (:func:`cell_statistics`,
  :class:`CellStatistics`, :func:`grid_bits`, :func:`cell_noise`): the adjusted estimator, the DP
  difference in means and the stratified variance; the counts and sums as one query, the cells'
  two-end histogram (:func:`end_histogram`, :func:`end_histogram_noise`), and a binary
  outcome's cells as one ``(cell, outcome)`` histogram (:func:`outcome_histogram`,
  :func:`histogram_noise`);
- Algorithm 1's exact matching estimate, its variance (the appendix) and the per-stratum counts
  its sensitivities read (:func:`matching_statistics`, :func:`exact_matching`,
  :func:`matching_variance`), and the difference in means (:func:`difference_in_means`).

Nothing here is private output: the mechanisms of :mod:`dpate_core.mechanisms` noise these.
"""

from ._algorithm1 import (
    MatchingResult,
    MatchingStatistics,
    exact_matching,
    matching_statistics,
    matching_statistics_of_strata,
    matching_variance,
    stratum_counts,
    variance_bits,
)
from ._difference_in_means import DifferenceInMeans, difference_in_means
from ._grid_sums import (
    COUNT_SENSITIVITY,
    CellStatistics,
    cell_noise,
    cell_scales,
    cell_sites,
    cell_statistics,
    end_histogram,
    end_histogram_noise,
    grid_bits,
    histogram_cells,
    histogram_noise,
    histogram_scales,
    outcome_histogram,
    sensitivities,
)

__all__ = [
    "COUNT_SENSITIVITY",
    "CellStatistics",
    "DifferenceInMeans",
    "MatchingResult",
    "MatchingStatistics",
    "cell_noise",
    "cell_scales",
    "cell_sites",
    "cell_statistics",
    "difference_in_means",
    "end_histogram",
    "end_histogram_noise",
    "exact_matching",
    "grid_bits",
    "histogram_cells",
    "histogram_noise",
    "histogram_scales",
    "matching_statistics",
    "matching_statistics_of_strata",
    "matching_variance",
    "outcome_histogram",
    "sensitivities",
    "stratum_counts",
    "variance_bits",
]
