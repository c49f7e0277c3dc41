"""The propensity release's first stage: a DP additive-logit (naive-Bayes) model of the treatment
from noisy per-covariate statistics (``docs/research/propensity.md``, ``docs/explanation/privacy.md``).

The statistics, one vector on one public grid (unit ``2^-g``, :func:`model_bits`):

- the two arm counts (released only when no covariate is categorical: below);
- per categorical covariate with ``L`` public levels, the ``2 L`` counts of (level, arm);
- per numeric covariate with public bounds ``[lo, hi]``, its value clipped to them and rescaled to
  ``u = (z - mid) / half`` in ``[-1, 1]`` (``mid``, ``half`` the bounds' centre and half-width),
  quantised to the grid: the two per-arm sums of ``u`` and the sum of ``u^2``.

Each entry is an exact integer (counts times ``2^g``; sums of grid integers, below ``2^53``).
The query leaves the arm counts out when a categorical covariate carries them (its level counts
sum to them: :func:`released_part`, :func:`with_arm_counts`). Replacing one record changes the
arm counts (when released) by at most 2 in L1, each categorical covariate's counts by at most 2
(one cell loses the record, one gains it), and each numeric covariate's three entries (arm sums,
sum of squares) by at most ``9/4`` (``|u| + |u'| + |u^2 - u'^2| <= 9/4``) plus one grid unit for
the rounding of ``u`` and ``u^2`` to the grid (docs/explanation/privacy.md, "Stage 1"): L1
sensitivity ``(2 [p_cat = 0] + 2 p_cat + 9/4 p_num) 2^g + p_num`` in grid units (``[p_cat = 0]``
is 1 when no covariate is categorical, else 0; :func:`model_sensitivity`). One Laplace vector
query at that scale is ``(eps_m, 0)``-DP.

The model fitted to the noisy vector (post-processing) is in :mod:`._fit`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "Categorical",
    "Column",
    "Covariates",
    "Numeric",
    "arm_counts_released",
    "as_covariates",
    "check_pass",
    "column_arrays",
    "count_sensitivity",
    "model_bits",
    "model_sensitivity",
    "model_statistics",
    "model_statistics_of_strata",
    "released_part",
    "split_covariates",
    "with_arm_counts",
]

_MAX_MODEL_BITS = 30


@dataclass(frozen=True)
class Categorical:
    """A covariate with ``levels`` public levels, coded ``0 .. levels - 1``."""

    levels: int

    @property
    def width(self) -> int:
        return 2 * self.levels


@dataclass(frozen=True)
class Numeric:
    """A numeric covariate with public bounds ``[lo, hi]`` (values outside are clipped to them, a
    record-wise map fixed in advance) and no bins."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.hi > self.lo):
            raise ValueError(
                f"numeric covariate bounds [{self.lo}, {self.hi}] must be finite with lo < hi"
            )

    @property
    def width(self) -> int:
        return 3


Column = Categorical | Numeric


def model_bits(n: int) -> int:
    """``g``: the model vector's grid ``2^-g``; ``N 2^g <= 2^52`` keeps every entry exact."""
    log_n = max(1, math.ceil(math.log2(max(n, 2))))
    g = min(_MAX_MODEL_BITS, 52 - log_n)
    if g < 8:
        raise ValueError(f"n ({n}) is too large for the propensity model's exact sums")
    return g


def model_sensitivity(columns: Sequence[Column], g: int) -> Fraction:
    """The L1 sensitivity of the released model vector (:func:`released_part`) in grid units of
    ``2^-g`` (module docstring): 2 counts for the arm counts when released, 2 per categorical
    covariate, and per numeric one ``9/4`` (its arm sums and sum of squares together) plus one
    grid unit (their rounding to the grid; proof in docs/explanation/privacy.md, "Stage 1")."""
    p_cat = sum(isinstance(c, Categorical) for c in columns)
    p_num = len(columns) - p_cat
    arms = 2 if arm_counts_released(columns) else 0
    return (arms + 2 * p_cat + Fraction(9, 4) * p_num) * Fraction(2) ** g + p_num


def arm_counts_released(columns: Sequence[Column]) -> bool:
    """Whether the model query carries the two arm counts: only when no column is categorical
    (each categorical covariate's ``(level, arm)`` counts sum to the arm counts, so the fit
    derives them: :func:`with_arm_counts`)."""
    return not any(isinstance(c, Categorical) for c in columns)


def released_part(vector: np.ndarray, columns: Sequence[Column]) -> np.ndarray:
    """The entries of model vectors (the last axis) the query releases: all of them, less the
    arm counts when a categorical covariate carries them (:func:`arm_counts_released`)."""
    v = np.asarray(vector)
    return v if arm_counts_released(columns) else v[..., 2:]


def with_arm_counts(noisy: np.ndarray, columns: Sequence[Column]) -> np.ndarray:
    """The full model vectors (the last axis) from the released entries (post-processing): the
    arm counts, when the query leaves them out, are the categorical covariates' per-arm sums of
    their noisy level counts averaged with weights ``1 / L`` (a sum over ``L`` levels has ``L``
    times a count's noise variance)."""
    v = np.asarray(noisy, dtype=np.float64)
    if arm_counts_released(columns):
        return v
    total = np.zeros((*v.shape[:-1], 2))
    weight = 0.0
    at = 0
    for col in columns:
        if isinstance(col, Categorical):
            block = v[..., at : at + col.width].reshape((*v.shape[:-1], col.levels, 2))
            total += block.sum(axis=-2) / col.levels
            weight += 1.0 / col.levels
        at += col.width
    return np.concatenate([total / weight, v], axis=-1)


def count_sensitivity(columns: Sequence[Column], n: int) -> Fraction:
    """:func:`model_sensitivity` in counts on the grid of ``N = n`` records (:func:`model_bits`):
    the model query's Laplace scale in counts is this over ``eps_m``."""
    g = model_bits(n)
    return model_sensitivity(columns, g) / Fraction(2) ** g


def _width(columns: Sequence[Column]) -> int:
    return 2 + sum(c.width for c in columns)


def column_arrays(columns: Sequence[Column]) -> tuple[np.ndarray, ...]:
    """The columns as the compiled passes read them: ``kind`` (0 categorical, 1 numeric),
    ``levels``, ``mid`` and ``half`` (a numeric column's bounds' centre and half-width), and each
    column's block ``offset`` in the model vector."""
    kind = np.array([0 if isinstance(c, Categorical) else 1 for c in columns], np.int64)
    levels = np.array([c.levels if isinstance(c, Categorical) else 0 for c in columns], np.int64)
    mid = np.array([(c.lo + c.hi) / 2 if isinstance(c, Numeric) else 0.0 for c in columns])
    half = np.array([(c.hi - c.lo) / 2 if isinstance(c, Numeric) else 1.0 for c in columns])
    widths = np.array([c.width for c in columns], np.int64)
    offset = 2 + np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    return kind, levels, mid, half, offset


_PASS_ERRORS = {
    1: "the treatment must be 0 or 1 in every record",
    2: "outcomes must be finite and lie in [0, B]: clip or reject them with the study's public "
    "bound before the release",
    3: "a categorical covariate's code lies outside [0, levels) or is not whole: map the column "
    "to its public levels first",
    4: "a numeric covariate must be finite: drop or impute missing values first",
}


def check_pass(status: int) -> None:
    """Raise the rule a compiled pass found broken (never a value)."""
    if status != 0:
        raise ValueError(_PASS_ERRORS[int(status)])


@dataclass(frozen=True)
class Covariates:
    """Records' covariates kept by kind, each column contiguous: ``codes`` ``(p_cat, N)`` the
    categorical columns' level codes (integers, in column order), ``values`` ``(p_num, N)`` the
    numeric columns' values (floats, in column order). The compiled passes read a quarter of
    the bytes of a float matrix when the codes are int8 (:func:`split_covariates` makes one)."""

    codes: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.codes.ndim != 2 or self.values.ndim != 2:
            raise ValueError("covariates: codes and values must be (columns, N) arrays")
        if self.codes.shape[1] != self.values.shape[1] and self.codes.size and self.values.size:
            raise ValueError("covariates: codes and values must have the same number of records")
        if self.codes.dtype.kind != "i" or self.values.dtype.kind != "f":
            raise ValueError(
                "covariates: codes must be signed integers and values floats (split_covariates "
                "converts an (N, p) matrix)"
            )

    @property
    def n(self) -> int:
        return int(max(self.codes.shape[1], self.values.shape[1]))

    def matrix(self, columns: Sequence[Column]) -> np.ndarray:
        """The ``(N, p)`` float64 matrix in column order (small inputs: numpy's index)."""
        out = np.empty((self.n, len(columns)))
        kind = [isinstance(c, Categorical) for c in columns]
        out[:, np.flatnonzero(kind)] = self.codes.T
        out[:, np.flatnonzero(np.logical_not(kind))] = self.values.T
        return out


def code_dtype(columns: Sequence[Column]) -> np.dtype[Any]:
    """The smallest signed integer type holding every categorical column's codes."""
    top = max((c.levels for c in columns if isinstance(c, Categorical)), default=1)
    return np.dtype(np.min_scalar_type(-top))


def split_covariates(z: Any, columns: Sequence[Column]) -> Covariates:
    """The columnar :class:`Covariates` of an ``(N, p)`` matrix (one compiled pass): codes in
    the smallest integer type, values in the matrix's float type (float64 for an integer
    matrix). A code that is not a whole number in ``[0, levels)`` raises the rule."""
    from ._columnar import column_codes, split_rows
    from ._kernels import BAD_CODE

    z = np.asarray(z)
    if z.ndim != 2 or z.shape[1] != len(columns):
        raise ValueError(f"covariates: expected an array of shape (N, {len(columns)})")
    kind, levels, *_ = column_arrays(columns)
    cat, num = np.flatnonzero(kind == 0), np.flatnonzero(kind == 1)
    vtype = z.dtype if z.dtype.kind == "f" else np.dtype(np.float64)
    codes = np.empty((cat.size, z.shape[0]), code_dtype(columns))
    if z.flags.f_contiguous and not z.flags.c_contiguous:  # columns contiguous: one at a time
        for t, j in enumerate(cat):
            if column_codes(z[:, j], levels[j], codes[t]) != 0:
                check_pass(BAD_CODE)
        values = np.empty((num.size, z.shape[0]), vtype)
        for t, j in enumerate(num):
            values[t] = z[:, j]
        return Covariates(codes, values)
    z = np.ascontiguousarray(z)
    values = np.empty((num.size, z.shape[0]), vtype)
    if split_rows(z, kind, levels, codes, values) != 0:
        check_pass(BAD_CODE)
    return Covariates(codes, values)


def model_statistics(
    w: np.ndarray, z: np.ndarray | Covariates, columns: Sequence[Column], g: int
) -> np.ndarray:
    """The model vector (grid units, exact integers as float64) of records ``w`` (0/1) and
    ``z`` (``(N, p)``: a categorical column holds level codes, a numeric one values; or
    :class:`Covariates`), in one compiled pass over the columns
    (:func:`dpate_core.mechanisms.propensity._columnar.model_columns`, threaded by chunks of
    rows); a broken rule is named by the checked pass
    (:func:`~dpate_core.mechanisms.propensity._kernels.model_pass`)."""

    w = np.ascontiguousarray(w, dtype=np.int8)
    return _columnar_statistics(w, as_covariates(w, z, columns, g), columns, g)


def as_covariates(
    w: np.ndarray, z: np.ndarray | Covariates, columns: Sequence[Column], g: int
) -> Covariates:
    """``z`` as :class:`Covariates` (:func:`split_covariates` of a matrix); a broken rule is
    the one the checked pass over the matrix finds first, row by row."""
    from ._kernels import model_pass

    if isinstance(z, Covariates):
        return z
    z = np.asarray(z)
    try:
        return split_covariates(z, columns)
    except ValueError:
        if z.ndim == 2 and z.shape == (w.size, len(columns)):
            kind, levels, mid, half, offset = column_arrays(columns)
            status, _ = model_pass(w, z, kind, levels, mid, half, offset, _width(columns), g)
            check_pass(status)
        raise


def _columnar_statistics(
    w: np.ndarray, cov: Covariates, columns: Sequence[Column], g: int
) -> np.ndarray:
    from ._columnar import model_columns, power_of_two_inverse, run_chunks
    from ._kernels import checked_columns

    kind, levels, mid, half, offset = column_arrays(columns)
    cat, num = kind == 0, kind == 1
    if cov.codes.shape[0] != int(cat.sum()) or cov.values.shape[0] != int(num.sum()):
        raise ValueError("covariates: one row of codes per categorical column, of values per "
                         "numeric one")  # fmt: skip
    n = int(w.size)
    if cov.n != n and len(columns):
        raise ValueError(f"covariates: {cov.n} records for {n} treatments")
    codes = cov.codes.reshape(cov.codes.shape[0], n)
    values = cov.values.reshape(cov.values.shape[0], n)
    cat_levels = levels[cat]
    inv = np.array([power_of_two_inverse(h) for h in half[num]], dtype=np.float64)
    args = (w, codes, cat_levels, values, mid[num], half[num], inv, g)
    parts = run_chunks(model_columns, args, n)
    if any(p[0] for p in parts):
        check_pass(checked_columns(w, codes, cat_levels, values))
    treated = sum(int(p[1]) for p in parts)
    table = sum(p[2] for p in parts)
    nsum = sum(p[3] for p in parts)
    unit = np.int64(1) << g
    out = np.zeros(_width(columns), np.int64)
    out[0], out[1] = (n - treated) * unit, treated * unit
    for t, j in enumerate(np.flatnonzero(cat)):
        out[offset[j] : offset[j] + 2 * levels[j]] = table[t, : levels[j]].ravel() * unit
    for t, j in enumerate(np.flatnonzero(num)):
        out[offset[j] : offset[j] + 3] = (nsum[t, 1] - nsum[t, 0], nsum[t, 0], nsum[t, 2])
    return np.asarray(out, dtype=np.float64)


def model_statistics_of_strata(
    counts: np.ndarray, codes: np.ndarray, columns: Sequence[Column], g: int
) -> np.ndarray:
    """:func:`model_statistics` from per-stratum arm counts ``counts`` (``2 |X|``: control then
    treated per stratum) and the strata's level codes ``codes`` (``(|X|, p)``; categorical
    columns only): the same vector, from the sums of the stratum counts."""
    unit = float(2**g)
    n_c, n_t = counts[0::2].astype(np.float64), counts[1::2].astype(np.float64)
    out = [np.array([n_c.sum(), n_t.sum()]) * unit]
    for j, col in enumerate(columns):
        if not isinstance(col, Categorical):
            raise ValueError("strata carry categorical (binned) covariates only")
        c = np.bincount(codes[:, j], weights=n_c, minlength=col.levels)
        t = np.bincount(codes[:, j], weights=n_t, minlength=col.levels)
        out.append(np.asarray(np.stack([c, t], axis=1).ravel() * unit, dtype=np.float64))
    return np.concatenate(out)


def decode_strata(sizes: Sequence[int]) -> np.ndarray:
    """The level codes ``(|X|, p)`` of every stratum ``x``, the mixed-radix number of the
    covariates' codes (the first covariate most significant, as the spec's strata are)."""
    total = math.prod(sizes)
    rest = np.arange(total, dtype=np.int64)
    out = np.empty((total, len(sizes)), dtype=np.int64)
    for j in range(len(sizes) - 1, -1, -1):
        rest, out[:, j] = np.divmod(rest, sizes[j])
    return out


def as_columns(sizes: Sequence[int], domain_size: int) -> tuple[tuple[Column, ...], Any]:
    """The categorical columns of strata with these level counts (one column of ``|X|`` levels
    when the sizes are not given) and their codes per stratum."""
    if not sizes or math.prod(sizes) != domain_size:
        sizes = (domain_size,)
    return tuple(Categorical(int(s)) for s in sizes), decode_strata(sizes)
