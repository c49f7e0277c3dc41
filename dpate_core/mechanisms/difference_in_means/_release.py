"""DP difference in means for randomized trials (section 3.1.1): the plan and the release.

:func:`dp_difference_in_means` states the privacy cost; :func:`plan_difference_in_means` builds
its :class:`~dpate_core.release.MechanismPlan` (one plan serves the release and the simulations,
see :mod:`dpate_core.release`). With private arm sizes the arms' sizes and sums are one query,
their ``(arm, end)`` histogram (:func:`_plan_histogram_dim`). A binary outcome (every value 0 or
``B``) releases no sums of squares and derives the variance from ``p (1 - p)``.

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
    end_histogram_noise,
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
    if not arm_sizes_public:  # one query for the arms' sizes and sums: the (arm, end) histogram
        return _plan_histogram_dim((n_t, n_c, s_t, s_c, q_t, q_c), stats, total, split, binary)
    if binary:
        return _plan_binary_dim((n_t, n_c, s_t, s_c), stats, total, split)
    sum_units, sq_units = _grid_sensitivities(stats)
    unit_s, unit_q = stats.sum_unit, stats.square_unit
    _require_both_arms(n_t, n_c)
    shares = BudgetSplit.of(split, 2)
    p_sum, p_sq = shares.apply(total)
    sum_scale, sq_scale = p_sum.laplace_scale(sum_units), p_sq.laplace_scale(sq_units)
    noise = [
        NoiseSpec("sum_treated", float(s_t), sum_scale, "integer_laplace", unit_s),
        NoiseSpec("sum_control", float(s_c), sum_scale, "integer_laplace", unit_s),
        *_squares_noise(q_t, q_c, sq_scale, unit_q),
    ]
    b_sum = sum_scale * unit_s  # the sums' Laplace scale in outcome units

    def assemble(v: Mapping[str, Any]) -> Outputs:
        nt_hat, nc_hat = float(n_t), float(n_c)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        var_t_raw = v["sumsq_treated"] / nt_hat - (st / nt_hat) ** 2
        var_c_raw = v["sumsq_control"] / nc_hat - (sc / nc_hat) ** 2
        noise_var = 2.0 * b_sum**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        sampling_raw = var_t_raw / nt_hat + var_c_raw / nc_hat
        sampling = np.maximum(var_t_raw, 0.0) / nt_hat + np.maximum(var_c_raw, 0.0) / nc_hat
        diagnostics = {"sampling_variance_dp": sampling_raw, "noise_variance": noise_var}
        return Outputs(tau, sampling + noise_var, sampling_raw + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, True, total, bound, shares, noise, assemble)


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


def _squares_noise(q_t: int, q_c: int, scale: float, unit: float) -> list[NoiseSpec]:
    """The arm sums of squares' noise sites (grid units, ``unit`` the squares' grid unit)."""
    return [
        NoiseSpec("sumsq_treated", float(q_t), scale, "integer_laplace", unit),
        NoiseSpec("sumsq_control", float(q_c), scale, "integer_laplace", unit),
    ]


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
) -> MechanismPlan:
    """Difference in means of a binary outcome (0 or ``B``) with public arm sizes: the general
    plan's arm sums and noise, the variance from ``p (1 - p)`` (post-processing of the noisy
    sums). Private arm sizes: :func:`_plan_histogram_dim`."""
    n_t, n_c, s_t, s_c = sums
    bound, (sum_units, _) = stats.bound, _grid_sensitivities(stats)
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
        nt_hat, nc_hat = float(n_t), float(n_c)
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


def spread(p: Any) -> Any:
    """``(1 - p)^2 + p^2``: an arm mean's noise variance from its ``(arm, end)`` histogram over
    ``B^2 v / N_arm^2`` (``p`` the arm mean over ``B``, ``v`` a bin's noise variance): its error
    is ``B ((1 - p) e_U - p e_L) / N_arm``. Between 1/2 (``p = 1/2``) and 1."""
    return (1.0 - p) ** 2 + p * p


def _plan_histogram_dim(
    arms: ArmSums,
    stats: CellStatistics,
    total: PrivacyParams,
    split: Sequence[Number] | None,
    binary: bool,
) -> MechanismPlan:
    """Private arm sizes: the arms' sizes and sums as one query, their ``(arm, end)``
    histogram ``(U_c, U_t, L_c, L_t)``, each record's unit mass split between its arm's ends,
    ``Y/B`` on the upper and ``1 - Y/B`` on the lower (:func:`~dpate_core.statistics.end_histogram`;
    a binary outcome's :func:`_arm_histogram`, each record's mass all on one end, as counts).
    Replacing one record, whose arm and outcome may both change, moves it by at most 2 in L1:
    ``Lap(2 / eps_1)`` on each bin (in records; grid units and their sensitivity ``2^(k+1)``
    for a continuous outcome). Each arm's mean ``B U / (U + L)``, ``N_t`` (the mean of ``U_t +
    L_t`` and ``N - U_c - L_c``, ``N`` public, clipped to ``[1, N - 1]``) and the variances are
    post-processing; an arm mean's error is ``B ((1 - p) e_U - p e_L) / N_arm``, variance ``B^2
    ((1 - p)^2 + p^2) v / N_arm^2``, ``v`` a bin's noise variance. A binary outcome: one part
    (``Y^2 = B Y``); any other: the arm sums of squares besides, their pair at L1 sensitivity
    ``2 B^2`` (a record may change arm), two parts. Against the arm sums at ``Lap(2B / eps_1)``
    and a treated count sharing the budget, the means' noise variance is 2-8 times smaller
    (docs/explanation/privacy.md, "DP difference in means")."""
    n_t, n_c, s_t, s_c, q_t, q_c = arms
    bound, n = stats.bound, float(n_t + n_c)
    noise: list[NoiseSpec]
    if binary:
        shares = BudgetSplit.of(split, 1)
        (part,) = shares.apply(total)
        site = NoiseSpec(
            "histogram", _arm_histogram(stats).astype(np.float64),
            part.laplace_scale(COUNT_SENSITIVITY), "integer_laplace",
        )  # fmt: skip
        noise = [site]
    else:
        shares = BudgetSplit.of(split, 2)
        part, p_sq = shares.apply(total)
        cells = CellStatistics(
            np.array([n_c, n_t], np.int64), np.array([s_c, s_t], np.int64),
            np.array([q_c, q_t], np.int64), bound, stats.k, stats.m, centred=False,
        )  # fmt: skip
        site = end_histogram_noise(cells, part)
        sq_scale = p_sq.laplace_scale(2 * _grid_sensitivities(stats)[1])
        noise = [site, *_squares_noise(q_t, q_c, sq_scale, stats.square_unit)]
    v_bin = 2.0 * site.value_scale**2  # a bin's noise variance, in records

    def assemble(v: Mapping[str, Any]) -> Outputs:
        h = np.asarray(v["histogram"], dtype=np.float64)
        u_c, u_t, l_c, l_t = (h[..., i] for i in range(4))
        nt_hat = np.clip(0.5 * (u_t + l_t + n - u_c - l_c), 1.0, n - 1.0)
        nc_hat = n - nt_hat
        p_t = np.clip(u_t / np.maximum(u_t + l_t, 1.0), 0.0, 1.0)
        p_c = np.clip(u_c / np.maximum(u_c + l_c, 1.0), 0.0, 1.0)
        tau = bound * (p_t - p_c)
        noise_var = bound * bound * v_bin * (spread(p_t) / nt_hat**2 + spread(p_c) / nc_hat**2)
        diagnostics: dict[str, Any] = {"binary_outcome": 1.0} if binary else {}
        if binary:
            raw = sampling = (
                bound * bound * (p_t * (1.0 - p_t) / nt_hat + p_c * (1.0 - p_c) / nc_hat)
            )
        else:
            var_t = v["sumsq_treated"] / nt_hat - (bound * p_t) ** 2
            var_c = v["sumsq_control"] / nc_hat - (bound * p_c) ** 2
            raw = var_t / nt_hat + var_c / nc_hat
            sampling = np.maximum(var_t, 0.0) / nt_hat + np.maximum(var_c, 0.0) / nc_hat
        diagnostics.update(n_treated_dp=nt_hat, sampling_variance_dp=raw, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, raw + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, False, total, bound, shares, noise, assemble)


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
    section 5); the budget splits in two: the arms' ``(arm, end)`` histogram, which carries their
    sizes and sums (L1 sensitivity 2 records' mass, :func:`_plan_histogram_dim`), and the pair of
    sums of squares (``2B^2``). Until stop 44 it split in three: the pair of arm sums (``2B``), the
    squares, and the treated count (sensitivity 1; ``N_c = N - N_t``).

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
