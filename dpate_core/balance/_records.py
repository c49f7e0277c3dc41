"""The balance release from records (:mod:`dpate_core.balance`): the same query as
:func:`~dpate_core.balance.plan_balance` (each record in one (band, level, arm) cell of each
covariate's table, so the same ``2 p`` sensitivity and scale), counted from the records'
levels and bands when the covariates are not all strata: a numeric covariate with public bounds
and no bins is read in :data:`NUMERIC_BALANCE_BINS` equal public bins of its bounds
(:func:`bounded_bins`), and a record's band may depend on its numeric values (its band under a
released propensity model). Vectorised: one ``np.bincount`` per covariate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dpate_core.privacy import Number

from ._table import BalanceLayout, BalancePlan, Within, _checked, balance_scale

__all__ = [
    "NUMERIC_BALANCE_BINS",
    "bin_levels",
    "bounded_bins",
    "plan_balance_records",
    "record_counts",
]

#: the equal-width public bins a numeric covariate with bounds and no bins is read in
#: (:func:`bounded_bins`): its row is the SMD of their midpoints, as a binned covariate's
NUMERIC_BALANCE_BINS = 10


def plan_balance_records(
    w: npt.ArrayLike,
    levels: Sequence[npt.ArrayLike],
    layout: BalanceLayout,
    epsilon: Number,
    *,
    bands: npt.ArrayLike | None = None,
    n_bands: int = 1,
    within: Within = "none",
) -> BalancePlan:
    """The same release from records (the same query, the same noise): ``levels[j]`` is every
    record's level of covariate ``j`` (:func:`record_counts`) and ``bands``, when given, every
    record's public band (a public function of the record's covariates, e.g. its band under a
    released propensity model), for covariates that are not all strata (numeric ones with
    bounds and no bins, read in :func:`bounded_bins`)."""
    eps, within = _checked(epsilon, bands is not None, within)
    counts = record_counts(w, levels, layout, bands, n_bands)
    return BalancePlan(
        layout, eps, counts, balance_scale(layout, eps), n_bands if bands is not None else 1, within
    )


def bounded_bins(lower: float, upper: float, bins: int = NUMERIC_BALANCE_BINS) -> tuple[float, ...]:
    """The public edges a numeric covariate with bounds and no bins is read in by the balance
    table: ``bins`` equal widths, ``lower + (upper - lower) k / bins``."""
    lo, hi = float(lower), float(upper)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi) or bins < 1:
        raise ValueError(f"bounds ({lo}, {hi}) must be finite with lower < upper")
    return tuple(lo + (hi - lo) * k / bins for k in range(bins + 1))


def bin_levels(
    values: npt.ArrayLike, lower: float, upper: float, bins: int = NUMERIC_BALANCE_BINS
) -> npt.NDArray[np.int64]:
    """Every value's bin of :func:`bounded_bins` (``[a, b)``, the last ``[a, upper]``; a value
    outside the bounds in the nearest end bin, as the release clips it). Vectorised."""
    inner = np.asarray(bounded_bins(lower, upper, bins)[1:-1])
    v = np.asarray(values, dtype=np.float64)
    return np.searchsorted(inner, v, side="right").astype(np.int64)


def record_counts(
    w: npt.ArrayLike,
    levels: Sequence[npt.ArrayLike],
    layout: BalanceLayout,
    bands: npt.ArrayLike | None = None,
    n_bands: int = 1,
) -> npt.NDArray[np.int64]:
    """:func:`level_counts` from records: for each covariate ``j`` the counts ``c_j[b, l, a]``
    (band, then level, then arm) of records with arm ``w``, level ``levels[j]`` and band
    ``bands`` (None: one band). One ``np.bincount`` per covariate."""
    arm = np.asarray(w, dtype=np.int64)
    n = arm.shape[0]
    band = np.zeros(n, np.int64) if bands is None else np.asarray(bands, dtype=np.int64)
    if band.shape != (n,) or (n and (band.min() < 0 or band.max() >= n_bands)):
        raise ValueError(f"bands must give every record a band in [0, {n_bands})")
    if len(levels) != len(layout.sizes):
        raise ValueError("levels must give one array per covariate of the layout")
    parts = []
    for name, level, size in zip(layout.names, levels, layout.sizes, strict=True):
        lev = np.asarray(level, dtype=np.int64)
        if lev.shape != (n,) or (n and (lev.min() < 0 or lev.max() >= size)):
            raise ValueError(f"covariate {name!r}: every record needs a level in [0, {size})")
        parts.append(np.bincount((band * size + lev) * 2 + arm, minlength=n_bands * size * 2))
    return np.concatenate(parts).astype(np.int64)
