"""DP difference in means for randomized trials (section 3.1.1): the plan and the release.

:func:`dp_difference_in_means` states the privacy cost; :func:`plan_difference_in_means` builds
its :class:`~dpate_core.release.MechanismPlan` (one plan serves the release and the simulations,
see :mod:`dpate_core.release`). A binary outcome (every value 0 or ``B``) releases the arm sums
only (with private arm sizes, its ``(arm, outcome)`` histogram as one query) and derives the
variance from ``p (1 - p)``.

Exact sums. The arm counts, sums of ``Y`` and sums of ``Y^2`` are the adjusted estimator's cell
statistics with one stratum and no centring (:func:`arm_statistics`, the one compiled kernel of
:func:`dpate_core.statistics.cell_statistics`): each record's ``Y`` is rounded to the public grid
``B 2^-k`` and its square to ``B^2 2^-m`` (``k``, ``m`` from the public ``N``,
:func:`~dpate_core.statistics.grid_bits`), and the grid values are summed as integers. The sums are
exact, so they do not depend on record order or on how the records are summed: a site whose
engine computes them (:func:`dpate.schemas.site_data.read_site_records`) releases exactly what the
in-memory path releases.
The rounding is a deterministic, data-independent map of each record applied before the release,
with values still in ``[0, B]`` and ``[0, B^2]`` (0 and ``B`` map to themselves, so a binary
outcome is unchanged): the sensitivities and the privacy proof are those of the unrounded sums;
the estimates move by at most ``B 2^-k`` (below ``10^-9 B`` up to ``10^7`` records).

Noise in grid units. The integer sums are noised as they are, with scales in grid units (``B`` is
``2^k`` units, ``B^2`` is ``2^m``), and multiplied by the unit afterwards (:class:`NoiseSpec`
``unit``; post-processing): neighbouring sums then differ by at most the sensitivity exactly,
which a rounded conversion to outcome units before the noise would not guarantee
(docs/explanation/privacy.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.noise import Rng
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    Outputs,
    SiteEstimate,
    check_binary_outcomes,
    check_bound,
    check_outcomes,
    release_once,
)
from dpate_core.statistics import (
    COUNT_SENSITIVITY,
    CellStatistics,
    cell_statistics,
    outcome_histogram,
)

__all__ = [
    "arm_statistics",
    "dp_difference_in_means",
    "plan_difference_in_means",
    "plan_difference_in_means_from_statistics",
]

ArmSums = tuple[int, int, int, int, int, int]


def plan_difference_in_means(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    arm_sizes_public: bool = True,
    binary: bool = False,
) -> MechanismPlan:
    """The plan of :func:`dp_difference_in_means` (see there for the privacy statement).

    ``binary=True``: every outcome is 0 or ``B`` (checked: an error names the rule). Then
    ``Y^2 = B Y``, so the arm sums give the variance too (``s^2 = B^2 p (1 - p)`` with
    ``p = mean / B``): no sums of squares are released and their budget part is dropped (one
    part: the arm sums; with private arm sizes the ``(arm, outcome)`` histogram, which carries
    the arm sizes as well)."""
    bound = check_bound(bound)
    y_arr = np.asarray(y, dtype=np.float64)
    check_outcomes(y_arr, bound)
    if binary:
        check_binary_outcomes(y_arr, bound)
    return plan_difference_in_means_from_statistics(
        arm_statistics(w, y_arr, bound=bound),
        epsilon=epsilon,
        delta=delta,
        split=split,
        arm_sizes_public=arm_sizes_public,
        binary=binary,
    )


def arm_statistics(w: npt.ArrayLike, y: npt.ArrayLike, *, bound: float) -> CellStatistics:
    """The arm counts and exact integer sums of the grid-rounded ``Y`` and ``Y^2``: the cell
    statistics of one stratum, not centred (cell ``0``: control, ``1``: treated). Checks
    ``0 <= y <= B`` and ``w in {0, 1}`` in the same pass. Private: they leave only through noise."""
    w_arr = np.asarray(w)
    y_arr = np.asarray(y, dtype=np.float64)
    if w_arr.ndim != 1 or y_arr.shape != w_arr.shape:
        raise ValueError(
            f"w and y must be 1-d arrays of one length (got {w_arr.shape} and {y_arr.shape})"
        )
    x = np.zeros(w_arr.shape, np.int8)
    return cell_statistics(w_arr, y_arr, x, domain_size=1, bound=bound, centred=False)


def _arm_sums(stats: CellStatistics) -> ArmSums:
    """``(N_t, N_c, sum_t Y, sum_c Y, sum_t Y^2, sum_c Y^2)`` of the grid-rounded outcomes, in
    grid units (exact integers: ``Y`` in units of ``B 2^-k``, ``Y^2`` of ``B^2 2^-m``), from
    statistics of any number of strata (cells ``2 x + w``), so they do not depend on the strata."""
    if stats.centred:
        raise ValueError(
            "the difference in means needs uncentred statistics: compute them with "
            "arm_statistics or cell_statistics(..., centred=False)"
        )
    c, s, q = stats.counts, stats.sums, stats.squares

    def total(v: np.ndarray, arm: int) -> int:
        return int(v[arm::2].sum())  # int64: exact, an arm's sum is at most 2^53 (grid_bits)

    return total(c, 1), total(c, 0), total(s, 1), total(s, 0), total(q, 1), total(q, 0)


def _grid_sensitivities(stats: CellStatistics) -> tuple[Fraction, Fraction]:
    """``(2^k, 2^m)``: how far one record moves an arm's sum of ``Y`` and of ``Y^2``, in grid
    units (``Y`` in ``[0, 2^k]`` units of ``B 2^-k``, ``Y^2`` in ``[0, 2^m]`` of ``B^2 2^-m``)."""
    return Fraction(2) ** stats.k, Fraction(2) ** stats.m


def plan_difference_in_means_from_statistics(
    stats: CellStatistics,
    *,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    arm_sizes_public: bool = True,
    binary: bool = False,
) -> MechanismPlan:
    """:func:`plan_difference_in_means` from uncentred cell statistics (:func:`arm_statistics`,
    or a streamed site's, of any number of strata: the arms are summed over them). With
    ``binary=True`` the caller has checked that every outcome is 0 or ``B``
    (:func:`plan_difference_in_means` and :func:`dpate.schemas.site_data.site_statistics` do)."""
    bound = check_bound(stats.bound)
    total = _spent(epsilon, delta)
    n_t, n_c, s_t, s_c, q_t, q_c = _arm_sums(stats)
    if n_t + n_c < 2:
        raise ValueError(f"a release needs at least 2 records (got {n_t + n_c})")
    if binary:
        return _plan_binary_dim((n_t, n_c, s_t, s_c), stats, total, split, arm_sizes_public)
    sum_units, sq_units = _grid_sensitivities(stats)
    unit_s, unit_q = stats.sum_unit, stats.square_unit

    noise: list[NoiseSpec] = []
    if arm_sizes_public:
        _require_both_arms(n_t, n_c)
        shares = BudgetSplit.of(split, 2)
        p_sum, p_sq = shares.apply(total)
        sum_scale, sq_scale = p_sum.laplace_scale(sum_units), p_sq.laplace_scale(sq_units)
    else:
        shares = BudgetSplit.of(split, 3)
        p_sum, p_sq, p_cnt = shares.apply(total)
        sum_scale = p_sum.laplace_scale(2 * sum_units)
        sq_scale = p_sq.laplace_scale(2 * sq_units)
        noise.append(NoiseSpec("n_treated", float(n_t), p_cnt.laplace_scale(1), "integer_laplace"))
    noise += [
        NoiseSpec("sum_treated", float(s_t), sum_scale, "integer_laplace", unit_s),
        NoiseSpec("sum_control", float(s_c), sum_scale, "integer_laplace", unit_s),
        NoiseSpec("sumsq_treated", float(q_t), sq_scale, "integer_laplace", unit_q),
        NoiseSpec("sumsq_control", float(q_c), sq_scale, "integer_laplace", unit_q),
    ]
    b_sum = sum_scale * unit_s  # the sums' Laplace scale in outcome units

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {}
        nt_hat, nc_hat = _arm_sizes(v, n_t, n_c, arm_sizes_public, diagnostics)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        var_t_raw = v["sumsq_treated"] / nt_hat - (st / nt_hat) ** 2
        var_c_raw = v["sumsq_control"] / nc_hat - (sc / nc_hat) ** 2
        noise_var = 2.0 * b_sum**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        sampling_raw = var_t_raw / nt_hat + var_c_raw / nc_hat
        sampling = np.maximum(var_t_raw, 0.0) / nt_hat + np.maximum(var_c_raw, 0.0) / nc_hat
        diagnostics.update(sampling_variance_dp=sampling_raw, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling_raw + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, arm_sizes_public, total, bound, shares, noise, assemble)


def _spent(epsilon: Number, delta: Number) -> PrivacyParams:
    """The budget spent: ``(epsilon, 0)`` (``delta`` is validated, not spent); refuses a
    non-positive epsilon."""
    given = PrivacyParams.of(epsilon, delta)  # validates delta; the mechanism spends none of it
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    return total


def _require_both_arms(n_t: int, n_c: int) -> None:
    if n_t == 0 or n_c == 0:
        raise ValueError(f"both arms must be non-empty (treated {n_t}, control {n_c})")


def _arm_sizes(
    v: Mapping[str, Any], n_t: int, n_c: int, public: bool, diagnostics: dict[str, Any]
) -> tuple[Any, Any]:
    """``(N_t, N_c)`` as the assembly uses them: public counts, or the noisy treated count
    clipped to ``[1, N - 1]`` (post-processing: both arms >= 1), recorded in ``diagnostics``."""
    if public:
        return float(n_t), float(n_c)
    n = n_t + n_c
    nt_hat = np.clip(v["n_treated"], 1.0, n - 1.0)
    nc_hat = n - nt_hat
    diagnostics["n_treated_dp"] = nt_hat
    return nt_hat, nc_hat


def _dim_plan(
    n_t: int,
    n_c: int,
    arm_sizes_public: bool,
    total: PrivacyParams,
    bound: float,
    shares: BudgetSplit,
    noise: list[NoiseSpec],
    assemble: Callable[[Mapping[str, Any]], Outputs],
) -> MechanismPlan:
    return MechanismPlan(
        estimator="dim",
        n=n_t + n_c,
        n_treated=n_t if arm_sizes_public else None,
        n_control=n_c if arm_sizes_public else None,
        total=total,
        bound=bound,
        shares=shares,
        noise=tuple(noise),
        assemble=assemble,
    )


def _plan_binary_dim(
    sums: tuple[int, int, int, int],
    stats: CellStatistics,
    total: PrivacyParams,
    split: Sequence[Number] | None,
    arm_sizes_public: bool,
) -> MechanismPlan:
    """Difference in means of a binary outcome (0 or ``B``). Public arm sizes: the general
    plan's arm sums and noise, the variance from ``p (1 - p)`` (post-processing of the noisy
    sums). Private arm sizes: one query, the ``(arm, outcome)`` histogram (:func:`_arm_histogram`),
    whose arm means ``E / (E + F)`` and sizes are post-processing."""
    n_t, n_c, s_t, s_c = sums
    bound, (sum_units, _) = stats.bound, _grid_sensitivities(stats)
    if not arm_sizes_public:
        return _plan_binary_histogram_dim(n_t, n_c, stats, total, split)
    _require_both_arms(n_t, n_c)
    shares = BudgetSplit.of(split, 1)
    (p_sum,) = shares.apply(total)
    sum_scale = p_sum.laplace_scale(sum_units)
    noise = [
        NoiseSpec("sum_treated", float(s_t), sum_scale, "integer_laplace", stats.sum_unit),
        NoiseSpec("sum_control", float(s_c), sum_scale, "integer_laplace", stats.sum_unit),
    ]
    b_sum = sum_scale * stats.sum_unit  # the sums' Laplace scale in outcome units

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {"binary_outcome": 1.0}
        nt_hat, nc_hat = _arm_sizes(v, n_t, n_c, True, diagnostics)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        p_t = np.clip(st / (nt_hat * bound), 0.0, 1.0)
        p_c = np.clip(sc / (nc_hat * bound), 0.0, 1.0)
        sampling = bound * bound * (p_t * (1.0 - p_t) / nt_hat + p_c * (1.0 - p_c) / nc_hat)
        noise_var = 2.0 * b_sum**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        diagnostics.update(sampling_variance_dp=sampling, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, True, total, bound, shares, noise, assemble)


def _arm_histogram(stats: CellStatistics) -> np.ndarray:
    """A binary outcome's ``(arm, outcome)`` histogram ``(E_c, E_t, F_c, F_t)``: each arm's
    numbers of records with ``Y = B`` and with ``Y = 0``, summed over the strata of
    :func:`~dpate_core.statistics.outcome_histogram` (exact integers). One record is in one
    bin: L1 sensitivity 2 under replace-one neighbours whose treatment may change."""
    h = outcome_histogram(stats)
    cells = h.size // 2
    events, others = h[:cells], h[cells:]
    return np.array(
        [events[0::2].sum(), events[1::2].sum(), others[0::2].sum(), others[1::2].sum()],
        dtype=np.int64,
    )


def _plan_binary_histogram_dim(
    n_t: int, n_c: int, stats: CellStatistics, total: PrivacyParams, split: Sequence[Number] | None
) -> MechanismPlan:
    """Private arm sizes, a binary outcome: ``Lap(2 / eps)`` on each bin of the ``(arm,
    outcome)`` histogram, the whole budget one query (one part). Each arm's mean is ``B E / (E +
    F)`` (its count and sum noise cancel in part: the error is ``B ((1 - p) e_E - p e_F) / N``,
    variance ``B^2 ((1 - p)^2 + p^2) v / N^2``, ``v`` a bin's noise variance); ``N_t`` the mean
    of the two arms' noisy sizes, ``E_t + F_t`` and ``N - E_c - F_c`` (``N`` public), clipped to
    ``[1, N - 1]``. Against the arm sums at ``Lap(2B / eps_1)`` and a treated count sharing the
    budget, the means' noise variance is 1.2-8 times smaller (docs/explanation/privacy.md)."""
    shares = BudgetSplit.of(split, 1)
    (part,) = shares.apply(total)
    site = NoiseSpec(
        "histogram", _arm_histogram(stats).astype(np.float64),
        part.laplace_scale(COUNT_SENSITIVITY), "integer_laplace",
    )  # fmt: skip
    v_bin = 2.0 * site.value_scale**2
    n = float(n_t + n_c)
    bound = stats.bound

    def assemble(v: Mapping[str, Any]) -> Outputs:
        h = np.asarray(v["histogram"], dtype=np.float64)
        e_c, e_t, f_c, f_t = (h[..., i] for i in range(4))
        nt_hat = np.clip(0.5 * (e_t + f_t + n - e_c - f_c), 1.0, n - 1.0)
        nc_hat = n - nt_hat
        p_t = np.clip(e_t / np.maximum(e_t + f_t, 1.0), 0.0, 1.0)
        p_c = np.clip(e_c / np.maximum(e_c + f_c, 1.0), 0.0, 1.0)
        tau = bound * (p_t - p_c)
        sampling = bound * bound * (p_t * (1.0 - p_t) / nt_hat + p_c * (1.0 - p_c) / nc_hat)
        noise_var = (
            bound * bound * v_bin
            * (((1.0 - p_t) ** 2 + p_t**2) / nt_hat**2 + ((1.0 - p_c) ** 2 + p_c**2) / nc_hat**2)
        )  # fmt: skip
        diagnostics: dict[str, Any] = {
            "binary_outcome": 1.0,
            "n_treated_dp": nt_hat,
            "sampling_variance_dp": sampling,
            "noise_variance": noise_var,
        }
        return Outputs(tau, sampling + noise_var, sampling + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, False, total, bound, shares, [site], assemble)


def dp_difference_in_means(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
    arm_sizes_public: bool = True,
) -> SiteEstimate:
    """DP difference in means and its private variance (section 3.1.1).

    Privacy: ``(epsilon, 0)``-DP. With ``arm_sizes_public=True`` (the paper's setting: ``W`` is
    design information, so ``N_t``, ``N_c`` are public and a neighbour changes one record's outcome
    within its arm), the budget splits in two: ``eps_1`` for the arm sums (``Lap(B/eps_1)`` each,
    parallel composition) and ``eps_2`` for the arm sums of squares (``Lap(B^2/eps_2)`` each).

    With ``arm_sizes_public=False`` a neighbour may also move a record between arms (correction
    section 5); the budget splits in three: the pair of arm sums (L1 sensitivity ``2B``), the pair
    of sums of squares (``2B^2``), and the treated count (sensitivity 1; ``N_c = N - N_t``).

    Each outcome is first rounded to a public grid (``B 2^-k``; its square to ``B^2 2^-m``; module
    docstring), a deterministic, data-independent map of each record into ``[0, B]`` and
    ``[0, B^2]``: the sensitivities above hold for the rounded outcomes as for the raw ones.

    ``delta`` is accepted for a uniform interface; it is not spent. Negative ``s^2`` from noisy
    sums are clamped at 0 after the release (post-processing); ``raw_variance`` keeps the value.
    """
    plan = plan_difference_in_means(
        w,
        y,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        split=split,
        arm_sizes_public=arm_sizes_public,
    )
    return release_once(plan, rng)
