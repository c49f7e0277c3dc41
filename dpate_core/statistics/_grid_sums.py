"""Per-cell sufficient statistics as exact integer sums on a public grid: the one compiled pass
that the adjusted release (:mod:`dpate_core.mechanisms.adjusted`, centred) and the DP difference in means
(:func:`dpate_core.mechanisms.difference_in_means.arm_statistics`, one stratum, not centred) both use.

Exactness. Floating-point sums are not exactly additive, so the sensitivity of a float sum can
exceed the bound proved for real numbers. One pass therefore quantises each record's centred outcome
on a public grid (``B 2^-k``; its square on ``B^2 2^-m``), a record-wise map whose values stay in
``[-B/2, B/2]`` and ``[0, B^2/4]``, and sums *integers*: the sums are exact, and ``k``, ``m`` are
chosen from the public ``N`` so every sum is an integer below ``2^53`` (exact as a float). The noise
is added to those integers, with scales in grid units, and the noisy value is multiplied by the
grid unit after the draw (post-processing, :attr:`dpate_core.release.NoiseSpec.unit`; the three
per-cell vectors as noise sites: :func:`cell_noise`), so every assembly reads outcome units. The DP
difference in means sums ``Y`` and ``Y^2`` with the same kernel, one
stratum and no centring (``centred=False``; :func:`dpate_core.mechanisms.difference_in_means.arm_statistics`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.compile_cache import njit
from dpate_core.privacy import PrivacyParams
from dpate_core.release import NoiseSpec, check_bound
from dpate_core.statistics._records import (
    _BAD_W,
    _BAD_X,
    _BAD_Y,
    _OK,
    check_status,
    record_arrays,
)

__all__ = [
    "COUNT_SENSITIVITY",
    "CellStatistics",
    "cell_noise",
    "cell_scales",
    "cell_sites",
    "cell_statistics",
    "end_histogram",
    "end_histogram_noise",
    "grid_bits",
    "histogram_cells",
    "histogram_noise",
    "histogram_scales",
    "outcome_histogram",
    "sensitivities",
]

COUNT_SENSITIVITY = 2  # one record leaves a cell and one enters another

_MAX_BITS = 40  # grid resolution cap: B 2^-40 is far below any noise


def grid_bits(n: int, *, centred: bool = True) -> tuple[int, int]:
    """``(k, m)``: the public grids ``B 2^-k`` (outcomes) and ``B^2 2^-m`` (their squares).

    ``centred`` (the adjusted estimator): a centred outcome ``Y - B/2`` is an integer in
    ``[-2^(k-1), 2^(k-1)]``, its square one in ``[0, 2^(m-2)]``. Not centred (the difference in
    means, :func:`dpate_core.mechanisms.difference_in_means.arm_statistics`): ``Y`` is an integer in
    ``[0, 2^k]`` and ``Y^2`` one in ``[0, 2^m]``, so the squares' grid is one bit coarser. With
    ``N <= 2^ceil(log2 N)`` records every sum's absolute value is at most ``2^53``, so the sums are
    exact in int64 and exactly representable as floats; so is each bin of the cells' two-end
    histogram (:func:`end_histogram`: up to ``N 2^k`` grid units).
    """
    if n < 1:
        raise ValueError(f"n ({n}) must be at least 1")
    log_n = max(1, math.ceil(math.log2(n)))
    top = 53
    k = min(_MAX_BITS, top - log_n)
    m = min(_MAX_BITS, top + (1 if centred else 0) - log_n)
    if k < 8:
        raise ValueError(
            f"n ({n}) is too large for exact integer sums (at most 2^{top - 8} records)"
        )
    return k, m


def sensitivities(bound: float, k: int, m: int) -> dict[str, Fraction]:
    """L1 sensitivities of the released vectors, in the units they are noised in (grid units for
    the sums): counts 2, centred sums ``2^k`` (= ``B``), squares ``2^(m-1)`` (= ``B^2/2``), the
    two-end histogram ``2^(k+1)`` (= 2 records' mass, :func:`end_histogram`). Proofs in
    docs/explanation/adjusted.md and privacy.md; checked exhaustively in tests/core."""
    return {
        "counts": Fraction(COUNT_SENSITIVITY),
        "sums": Fraction(2) ** k,
        "squares": Fraction(2) ** (m - 1),
        "histogram": Fraction(2) ** (k + 1),
    }


@dataclass(frozen=True)
class CellStatistics:
    """Per cell ``g = 2 x + w`` (control then treated for each stratum): the count, and the exact
    integer sums of the quantised centred outcomes (unit ``B 2^-k``) and of their squares (unit
    ``B^2 2^-m``). Private: they leave only through noise. ``centred=False``: the sums are of the
    quantised outcomes ``Y`` and of their squares, not centred (the difference in means,
    :func:`grid_bits`)."""

    counts: np.ndarray
    sums: np.ndarray
    squares: np.ndarray
    bound: float
    k: int
    m: int
    centred: bool = True

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def sum_unit(self) -> float:
        """The sums' grid unit ``B 2^-k`` in outcome units (exact: a power-of-two scaling)."""
        return math.ldexp(self.bound, -self.k)

    @property
    def square_unit(self) -> float:
        """The squares' grid unit ``B^2 2^-m`` (of the float ``B * B``; post-processing only)."""
        return math.ldexp(self.bound * self.bound, -self.m)


@njit(cache=True, nogil=True)
def _cell_kernel(
    w: Any, y: Any, x: Any, n_strata: int, bound: float, k: int, m: int, centre: float
) -> Any:  # pragma: no cover - compiled
    # centre: 0.5 sums Y/B - 1/2 (the adjusted estimator), 0.0 sums Y/B (difference in means)
    n_cells = 2 * n_strata
    counts = np.zeros(n_cells, np.int64)
    sums = np.zeros(n_cells, np.int64)
    squares = np.zeros(n_cells, np.int64)
    grid_s = 2.0**k
    half = np.int64(np.rint(centre * grid_s))  # 2^(k-1) or 0, exact
    grid_q = 2.0**m
    for i in range(w.shape[0]):
        xi, wi, yi = x[i], w[i], y[i]
        if xi < 0 or xi >= n_strata:
            return _BAD_X, counts, sums, squares
        if wi != 0 and wi != 1:
            return _BAD_W, counts, sums, squares
        if not (yi >= 0.0 and yi <= bound):  # also false for NaN
            return _BAD_Y, counts, sums, squares
        # t in [0, 1] (division is monotone and B / B = 1); t 2^k is exact, so the quantised
        # centred outcome lies in [-2^(k-1), 2^(k-1)]; (t - 1/2)^2 in [0, 1/4] likewise (not
        # centred: t in [0, 2^k] and t^2 in [0, 2^m] grid units)
        t = yi / bound
        d = t - centre
        g = 2 * xi + wi
        counts[g] += 1
        sums[g] += np.int64(np.rint(t * grid_s)) - half
        squares[g] += np.int64(np.rint(d * d * grid_q))
    return _OK, counts, sums, squares


def cell_statistics(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    domain_size: int,
    bound: float,
    centred: bool = True,
) -> CellStatistics:
    """The three per-cell vectors in one compiled pass, which also checks ``0 <= y <= B``,
    ``0 <= x < |X|`` and ``w in {0, 1}`` (errors name the rule, never a value). ``centred=False``:
    sums of ``Y`` and ``Y^2`` instead of ``Y - B/2`` and ``(Y - B/2)^2`` (:func:`grid_bits`)."""
    bound = check_bound(bound)
    w, y, x = record_arrays(w, y, x)
    size = int(domain_size)
    if size < 1:
        raise ValueError(f"domain_size ({domain_size}) must be a positive number of strata")
    k, m = grid_bits(max(w.size, 1), centred=centred)
    status, counts, sums, squares = _cell_kernel(
        w, y, x, size, bound, k, m, 0.5 if centred else 0.0
    )
    check_status(status, size, bound)
    return CellStatistics(counts, sums, squares, bound, k, m, centred)


def cell_scales(cells: CellStatistics, parts: Sequence[PrivacyParams]) -> tuple[float, ...]:
    """The Laplace scales of the three vectors for the budget parts ``(eps_n, eps_s, eps_q)``, in
    the units they are noised in (the sums and squares in grid units): each vector's
    :func:`sensitivities` over its part's epsilon, rounded up (deltas are not spent). A binary
    outcome's cells are one query instead (:func:`histogram_noise`)."""
    if len(parts) != 3:
        raise ValueError(
            f"cell statistics take 3 budget parts (a binary outcome's histogram takes one: "
            f"histogram_noise): got {len(parts)}"
        )
    sens = sensitivities(cells.bound, cells.k, cells.m)
    names = ("counts", "sums", "squares")
    return tuple(p.laplace_scale(sens[name]) for p, name in zip(parts, names, strict=False))


def cell_noise(
    cells: CellStatistics, scales: Sequence[float], prefix: str = ""
) -> tuple[NoiseSpec, ...]:
    """The per-cell vectors as noise sites ``counts``, ``sums``, ``squares`` (names after
    ``prefix``), each one vector query of exact discrete Laplace noise on its integers.

    ``scales``: their Laplace scales in the units they are noised in (counts; sums in grid units
    ``B 2^-k``, squares in ``B^2 2^-m``), from :func:`cell_scales` and the caller's budget
    shares. The sums and squares carry their grid unit (:attr:`CellStatistics.sum_unit`,
    :attr:`CellStatistics.square_unit`) as ``NoiseSpec.unit``: the draw multiplies the noisy
    integers by it (post-processing), so the assembly receives all three in outcome units and
    their scales in those units are ``NoiseSpec.value_scale``."""
    names = ("counts", "sums", "squares")
    return tuple(
        _vector_site(cells, name, scale, prefix) for name, scale in zip(names, scales, strict=True)
    )


def _vector_site(cells: CellStatistics, name: str, scale: float, prefix: str = "") -> NoiseSpec:
    """One of the per-cell vectors (``counts``, ``sums``, ``squares``) as a noise site of exact
    discrete Laplace noise at ``scale`` in its own units, with its grid unit."""
    unit = {"counts": 1.0, "sums": cells.sum_unit, "squares": cells.square_unit}[name]
    loc = getattr(cells, name).astype(np.float64)
    return NoiseSpec(prefix + name, loc, scale, "integer_laplace", unit=unit)


def cell_sites(
    cells: CellStatistics, parts: Sequence[PrivacyParams], binary: bool = False
) -> tuple[tuple[NoiseSpec, ...], list[float]]:
    """The cells' noise sites and the Laplace scales the post-processing reads (counts, sums and,
    unless the outcome is binary, squares; outcome units): two budget parts, the counts and
    centred sums as one query, the cells' two-end histogram (:func:`end_histogram_noise`; three
    queries of counts, sums and squares until stop 43), and the squares; or one part for a
    ``binary`` outcome, its ``(cell, outcome)`` histogram (:func:`histogram_noise`; no squares:
    they follow from the counts). The counts' and sums' scales are those of equal variance
    (:func:`histogram_scales`). The adjusted release's and the propensity release's band
    cells."""
    if len(parts) != (1 if binary else 2):
        raise ValueError(
            f"the cells take {1 if binary else 2} budget part(s) (the histogram"
            f"{'' if binary else ' and the squares'}): got {len(parts)}"
        )
    if binary:
        (site,) = (histogram_noise(cells, parts[0]),)
        return (site,), list(histogram_scales(site.value_scale, cells.bound))
    hist = end_histogram_noise(cells, parts[0])
    sens = sensitivities(cells.bound, cells.k, cells.m)["squares"]
    squares = _vector_site(cells, "squares", parts[1].laplace_scale(sens))
    scale_n, b_s = histogram_scales(hist.value_scale, cells.bound)
    return (hist, squares), [scale_n, b_s, squares.value_scale]


# A binary outcome (every value 0 or B): the cells are one histogram (docs/explanation/adjusted.md,
# "A binary outcome: one histogram"). Each record lies in exactly one (cell, outcome) bin, so the
# bins' counts are one vector query of L1 sensitivity 2 (one record leaves a bin, one enters
# another) at the whole of the cells' budget; the counts ``E + F`` and centred sums
# ``(B/2)(E - F)`` are post-processing. Against a counts query and a sums query sharing that
# budget (sequential composition), both are noised at the whole of it.


def outcome_histogram(cells: CellStatistics) -> np.ndarray:
    """A binary outcome's ``(cell, outcome)`` histogram as one int64 vector: every cell's number
    of records with ``Y = B`` (its events), then every cell's number with ``Y = 0``. Exact, from
    the cell statistics: each centred value is ``+-2^(k-1)`` grid units, so ``events -
    non-events = sums / 2^(k-1)`` (not centred, the difference in means': each ``Y`` is 0 or
    ``2^k`` units, ``events = sums / 2^k``). Raises ``ValueError`` (naming the rule, no value)
    when the sums are not those of an outcome that is 0 or ``B`` in every record."""
    if cells.centred:
        half = np.int64(1) << np.int64(cells.k - 1)
        diff, rem = np.divmod(cells.sums, half)
        twice = cells.counts + diff
    else:  # sums of Y: each value 0 or 2^k grid units
        twice, rem = np.divmod(cells.sums, np.int64(1) << np.int64(cells.k))
        twice = 2 * twice
    if rem.any() or (twice % 2).any() or (twice < 0).any() or (twice > 2 * cells.counts).any():
        raise ValueError(
            "a binary outcome's histogram needs every outcome to be 0 or B: the cell sums are "
            "not those of such an outcome (check outcome.binary and the outcome's bound)"
        )
    events = twice // 2
    return np.concatenate([events, cells.counts - events]).astype(np.int64)


def histogram_noise(cells: CellStatistics, part: PrivacyParams, prefix: str = "") -> NoiseSpec:
    """The binary outcome's :func:`outcome_histogram` as one noise site ``histogram`` (name after
    ``prefix``): exact discrete Laplace noise of scale ``2 / eps`` (L1 sensitivity
    :data:`COUNT_SENSITIVITY`, rounded up) on each bin, ``eps`` the part's epsilon."""
    scale = part.laplace_scale(Fraction(COUNT_SENSITIVITY))
    loc = outcome_histogram(cells).astype(np.float64)
    return NoiseSpec(prefix + "histogram", loc, scale, "integer_laplace")


def histogram_cells(noisy: Any, bound: float) -> dict[str, np.ndarray]:
    """The cells' counts ``E + F`` and centred sums ``(B/2)(E - F)`` (outcome units) from a noisy
    :func:`outcome_histogram` (``(cells * 2,)`` or ``(reps, cells * 2)``; post-processing). With
    the two bins' noise independent and of equal variance ``v``, the counts' noise has variance
    ``2 v``, the sums' ``(B/2)^2 2 v``, and the two are uncorrelated (:func:`histogram_scales`)."""
    h = np.asarray(noisy, dtype=np.float64)
    half = h.shape[-1] // 2
    events, others = h[..., :half], h[..., half:]
    return {"counts": events + others, "sums": (float(bound) / 2.0) * (events - others)}


def histogram_scales(scale: float, bound: float) -> tuple[float, float]:
    """``(scale_n, b_s)``: the Laplace scales of the same variance as the counts' and the centred
    sums' noise of :func:`histogram_cells`, for bins noised at Laplace scale ``scale`` (variance
    ``v = 2 scale^2``): ``2 scale_n^2 = 2 v`` and ``2 b_s^2 = (B/2)^2 2 v``, so ``scale_n =
    sqrt(2) scale`` and ``b_s = sqrt(2) scale B / 2``. What the post-processing's variance
    formulas read (second moments only: the two are uncorrelated, as independent counts and
    sums noise are)."""
    root2 = math.sqrt(2.0)
    return root2 * float(scale), root2 * float(scale) * float(bound) / 2.0


# Any outcome in [0, B]: the counts and centred sums as one query, the cells' two-end histogram
# (docs/explanation/privacy.md, "The cells' two-end histogram"). Each record puts its unit mass on
# its cell's two ends, ``1 - Y/B`` on the lower (0) and ``Y/B`` on the upper (B): a vector of
# non-negative entries summing to 1, so replacing one record moves the histogram by at most 2 in
# L1, whatever the records' cells and outcomes. The counts (the two ends' sum) and the centred
# sums (``B/2`` times their difference) are post-processing (:func:`histogram_cells`), as for a
# binary outcome, whose histogram this is (each record's mass then all on one end). Against a
# counts query and a sums query sharing the budget, both are noised at the whole of it.


def end_histogram(cells: CellStatistics) -> np.ndarray:
    """The cells' two-end histogram as one int64 vector in grid units ``2^-k`` of a record:
    every cell's upper-end mass ``U = sum Y/B``, then every cell's lower-end mass ``L = sum (1 -
    Y/B)``, from the exact grid sums: a record's quantised ``Y/B`` is ``(s + 2^(k-1)) 2^-k`` for
    its centred grid value ``s``, so ``U = sums + counts 2^(k-1)`` and ``L = counts 2^(k-1) -
    sums``, each in ``[0, N 2^k]`` (below ``2^53``: :func:`grid_bits`). Not centred (the
    difference in means' arms): a record's ``Y/B`` is its grid value ``s`` times ``2^-k``, so ``U
    = sums`` and ``L = counts 2^k - sums``."""
    if not cells.centred:
        full = cells.counts * (np.int64(1) << np.int64(cells.k))
        return np.concatenate([cells.sums, full - cells.sums]).astype(np.int64)
    half = cells.counts * (np.int64(1) << np.int64(cells.k - 1))
    return np.concatenate([half + cells.sums, half - cells.sums]).astype(np.int64)


def end_histogram_noise(cells: CellStatistics, part: PrivacyParams, prefix: str = "") -> NoiseSpec:
    """:func:`end_histogram` as one noise site ``histogram`` (name after ``prefix``): exact
    discrete Laplace noise on its integers at scale ``2^(k+1) / eps`` grid units (L1 sensitivity
    2 records of mass 1 each, :func:`sensitivities`, rounded up), ``eps`` the part's epsilon; the
    draw multiplies by the unit ``2^-k`` (post-processing), so the assembly reads record masses
    and the scale in them is about ``2 / eps``, as a binary outcome's bins'
    (:func:`histogram_cells` reads both)."""
    scale = part.laplace_scale(sensitivities(cells.bound, cells.k, cells.m)["histogram"])
    loc = end_histogram(cells).astype(np.float64)
    return NoiseSpec(
        prefix + "histogram", loc, scale, "integer_laplace", unit=math.ldexp(1.0, -cells.k)
    )
