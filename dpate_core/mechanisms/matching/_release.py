"""DP matching for observational studies: SmoothDPMatching (Algorithm 2) with its private
variance (the appendix, as corrected), and the GlobalDPMatching baseline.

:func:`smooth_dp_matching` and :func:`global_dp_matching` state the privacy costs;
:func:`plan_matching` builds their :class:`~dpate_core.release.MechanismPlan` from the one-pass
statistics of :func:`dpate_core.statistics.matching_statistics` (one plan serves the release and
the simulations, see :mod:`dpate_core.release`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.mechanisms.matching._sensitivity import (
    matching_ate_float_error,
    matching_global_sensitivity,
    matching_smooth_sensitivity,
    matching_variance_float_error,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)
from dpate_core.noise import Rng, analytic_gaussian_sigma
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    Outputs,
    SiteEstimate,
    check_bound,
    release_once,
)
from dpate_core.statistics import MatchingStatistics, matching_statistics

__all__ = ["global_dp_matching", "plan_matching", "smooth_dp_matching"]

ReadVariance = Callable[[Mapping[str, Any]], Any]
#: the noise variance of an ATE part and its diagnostics, from the noisy values
ReadNoise = Callable[[Mapping[str, Any]], tuple[Any, dict[str, Any]]]


def _require_delta(total: PrivacyParams, name: str) -> None:
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    if total.delta <= 0:
        raise ValueError(
            f"delta ({total.delta}) must be positive: {name} uses smooth sensitivity, which is "
            f"(epsilon, delta)-DP; give a small delta such as 1e-5"
        )


def _variance_noise(
    stats: MatchingStatistics, bound: float, p_var: PrivacyParams, domain_size: int | None
) -> NoiseSpec:
    """``V_hat + (2 S_V / eps_2) Lap(1)``: smooth-sensitivity Laplace on the variance estimate,
    ``S_V`` padded by twice the computed ``V_hat``'s rounding bound
    (:func:`dpate_core.mechanisms.matching.matching_variance_float_error`)."""
    e2 = p_var.epsilon_float
    beta2 = smooth_beta(e2, p_var.delta_float)
    s_var = matching_variance_smooth_sensitivity(
        stats.treated_counts, stats.control_counts, stats.n, bound, beta2, domain_size
    ) + 2.0 * matching_variance_float_error(bound)  # the computed V_hat's rounding, both sides
    return NoiseSpec("variance", stats.variance, 2.0 * s_var / e2, "laplace")


def _read_appendix(v: Mapping[str, Any]) -> Any:
    return v["variance"]


def _variance_part(
    variance: str,
    stats: MatchingStatistics,
    cells: Any,
    bound: float,
    p_var: PrivacyParams,
    domain_size: int | None,
) -> tuple[tuple[NoiseSpec, ...], ReadVariance]:
    """The variance part of a matching plan: its noise sites and how to read ``V_dp`` back.

    ``"appendix"``: one smooth-sensitivity Laplace draw on ``V_hat`` (the paper's). ``"stratified"``:
    the three per-cell Laplace vectors of :func:`dpate_core.mechanisms.matching.stratified_noise`,
    the part's epsilon split by its ``SUBSPLIT`` (sensitivities of
    :func:`dpate_core.statistics.sensitivities`); its delta is not spent."""
    if variance == "appendix":
        return (_variance_noise(stats, bound, p_var, domain_size),), _read_appendix
    from dpate_core.mechanisms.adjusted import THRESHOLD_FACTOR
    from dpate_core.mechanisms.matching._stratified_variance import SUBSPLIT, stratified_noise
    from dpate_core.statistics import CellStatistics, cell_scales

    if not isinstance(cells, CellStatistics):
        raise ValueError(
            "variance = 'stratified' needs the per-cell statistics of the same records: pass "
            "cells=dpate_core.statistics.cell_statistics(w, y, x, domain_size=..., bound=B)"
        )
    if (
        cells.n != stats.n
        or cells.bound > bound
        or cells.counts.size != 2 * stats.treated_counts.size
    ):
        raise ValueError(
            "the per-cell statistics do not match this release (N, the bound B and 2 |X| cells "
            "must agree): compute them from the same records with the study's domain size"
        )
    scales = cell_scales(
        cells, BudgetSplit(SUBSPLIT).apply(PrivacyParams(p_var.epsilon, Fraction(0)))
    )
    noise, estimate = stratified_noise(cells, scales, max(2.0, THRESHOLD_FACTOR * scales[0]))
    return noise, estimate


def plan_matching(
    estimator: str,
    stats: MatchingStatistics,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    variance: str = "appendix",
    cells: Any = None,
) -> MechanismPlan:
    """The plan of :func:`smooth_dp_matching` or :func:`global_dp_matching` from the one-pass
    statistics of :func:`dpate_core.statistics.matching_statistics` (see those for the privacy
    statements). Experiments compute ``stats`` once per data split and reuse it.

    ``variance``: ``"appendix"`` (default, the paper's ``V_hat`` with its smooth sensitivity) or
    ``"stratified"``: the within-cell sampling variance of :mod:`dpate_core.mechanisms.matching`,
    released from noisy per-cell statistics (``cells``, from
    :func:`dpate_core.statistics.cell_statistics` on the same records) with the variance part of
    the budget, pure ``(eps_2, 0)``-DP (``docs/explanation/privacy.md``, Stratified variance)."""
    bound, total = _checked_request(estimator, stats, bound, epsilon, delta, variance)
    smooth = estimator == "smooth_matching"
    _require_delta(total, "SmoothDPMatching" if smooth else "GlobalDPMatching's variance")
    # SmoothDPMatching: ATE, variance, ln S; GlobalDPMatching: ATE, variance
    shares = BudgetSplit.of(split, 3 if smooth else 2)
    p_ate, p_var, *p_sens = shares.apply(total)
    var_noise, read_variance = _variance_part(variance, stats, cells, bound, p_var, domain_size)
    if smooth:
        ate_noise, read_noise = _smooth_ate(stats, bound, domain_size, p_ate, p_sens[0])
    else:
        ate_noise, read_noise = _global_ate(stats, bound, p_ate)
    noise = (ate_noise[0], *var_noise, *ate_noise[1:])
    return MechanismPlan(
        estimator=estimator,
        n=stats.n,
        n_treated=None,
        n_control=None,
        total=total,
        bound=bound,
        shares=shares,
        noise=noise,
        assemble=functools.partial(_assemble_matching, read_noise, read_variance),
    )


def _checked_request(
    estimator: str,
    stats: MatchingStatistics,
    bound: float,
    epsilon: Number,
    delta: Number,
    variance: str,
) -> tuple[float, PrivacyParams]:
    """``(B, total budget)`` of a matching release, after checking the variance mode, the bound
    the statistics were checked against, the record count and the estimator's name."""
    if variance not in ("appendix", "stratified"):
        raise ValueError(
            f"variance ({variance!r}) must be 'appendix' (the paper's) or 'stratified'"
        )
    bound = check_bound(bound)
    if stats.bound is None or stats.bound > bound:
        raise ValueError(
            "the matching statistics were not checked against this release's outcome bound B: "
            "compute them with matching_statistics(..., bound=B)"
        )
    total = PrivacyParams.of(epsilon, delta)
    if stats.n < 2:
        raise ValueError(f"a release needs at least 2 records (got {stats.n})")
    if estimator not in ("smooth_matching", "global_matching"):
        raise ValueError(
            f"estimator ({estimator!r}) is not a matching estimator: use 'smooth_matching' or "
            f"'global_matching'"
        )
    return bound, total


def _assemble_matching(
    read_noise: ReadNoise, read_variance: ReadVariance, v: Mapping[str, Any]
) -> Outputs:
    """A matching plan's outputs: the noisy ATE, with variance ``max(V_dp, 0)`` plus the ATE
    part's noise variance (``raw_variance``: ``V_dp`` unclamped)."""
    noise_var, diagnostics = read_noise(v)
    v_dp = read_variance(v)
    return Outputs(
        v["tau"],
        np.maximum(v_dp, 0.0) + noise_var,
        v_dp + noise_var,
        {**diagnostics, "sampling_variance_dp": v_dp, "noise_variance": noise_var},
    )


def _smooth_ate(
    stats: MatchingStatistics,
    bound: float,
    domain_size: int | None,
    p_ate: PrivacyParams,
    p_sens: PrivacyParams,
) -> tuple[tuple[NoiseSpec, ...], ReadNoise]:
    """SmoothDPMatching's ATE parts (steps 1 and 3 of :func:`smooth_dp_matching`): the noise sites
    of ``tau`` and ``ln S``, and how the noise variance ``8 S2_dp / eps_1^2`` and the
    ``smooth_sensitivity_dp`` diagnostic are read back."""
    e1 = p_ate.epsilon_float
    beta1 = smooth_beta(e1, p_ate.delta_float)
    s_ate = matching_smooth_sensitivity(
        stats.treated_counts, stats.control_counts, stats.n, bound, beta1, domain_size
    ) + 2.0 * matching_ate_float_error(stats.n, bound)  # the computed tau's rounding, both sides
    # ln S has global sensitivity beta_1 (S is beta_1-smooth); analytic Gaussian calibration
    sigma = analytic_gaussian_sigma(beta1 + 1e-12, p_sens.epsilon_float, p_sens.delta_float)
    noise = (
        NoiseSpec("tau", stats.tau, 2.0 * s_ate / e1, "laplace"),
        NoiseSpec("log_smooth_sensitivity", math.log(s_ate), sigma, "gaussian"),
    )

    def read(v: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        log_s = v["log_smooth_sensitivity"]
        s_dp = np.exp(log_s - sigma**2 / 2.0)  # unbiased for S (the Lemma)
        s2_dp = np.exp(2.0 * log_s - 2.0 * sigma**2)  # unbiased for S^2 (correction 4)
        return 8.0 * s2_dp / e1**2, {"smooth_sensitivity_dp": s_dp}

    return noise, read


def _global_ate(
    stats: MatchingStatistics, bound: float, p_ate: PrivacyParams
) -> tuple[tuple[NoiseSpec, ...], ReadNoise]:
    """GlobalDPMatching's ATE part (see :func:`global_dp_matching`): ``tau + Lap(2B / eps_1)``;
    its noise variance ``2 (2B / eps_1)^2`` is public."""
    sensitivity = Fraction(matching_global_sensitivity(stats.n, bound)) + 2 * Fraction(
        matching_ate_float_error(stats.n, bound)
    )  # 2B, plus the computed tau's rounding on both sides
    scale = p_ate.laplace_scale(sensitivity)
    noise_var = 2.0 * scale * scale  # public
    return (NoiseSpec("tau", stats.tau, scale, "laplace"),), lambda v: (noise_var, {})


def _matching_release(
    estimator: str,
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None,
    split: Sequence[Number] | None,
    rng: Rng,
) -> SiteEstimate:
    # the outcome range [0, B] is checked inside the one compiled pass
    stats = matching_statistics(w, y, x, domain_size, bound=check_bound(bound))
    plan = plan_matching(
        estimator,
        stats,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        domain_size=domain_size,
        split=split,
    )
    return release_once(plan, rng)


def smooth_dp_matching(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
) -> SiteEstimate:
    """SmoothDPMatching (Algorithm 2) with its private variance (appendix), as corrected.

    Privacy: ``(epsilon, delta)``-DP by sequential composition of three parts (even split by
    default, the paper's ``eps/3, delta/3``):

    1. ``tau_dp = tau_hat + (2 S / eps_1) eta``, ``eta ~ Lap(1)``, ``S`` the beta_1-smooth bound of
       correction 1, ``beta_1 = eps_1 / (2 ln(2/delta_1))``: ``(eps_1, delta_1)``-DP.
    2. ``V_dp = V_hat + (2 S_V / eps_2) eta'`` with the variance's beta_2-smooth bound
       (correction 3): ``(eps_2, delta_2)``-DP.
    3. ``ln S_dp = ln S + z``, ``z ~ N(0, sigma^2)``; ``ln S`` has global sensitivity ``beta_1``
       because ``S`` is beta_1-smooth, and ``sigma`` is calibrated by the analytic Gaussian
       mechanism (correction 4): ``(eps_3, delta_3)``-DP.

    The reported variance is ``max(V_dp, 0) + 8 S2_dp / eps_1^2`` with
    ``S2_dp = exp(2 ln S + 2z - 2 sigma^2)``, unbiased for ``S^2`` (correction 4).
    Public: ``N``, ``B``, ``|X|`` (``domain_size``) and the covariate discretisation.
    Arm sizes are **not** released.
    """
    return _matching_release(
        "smooth_matching", w, y, x, bound, epsilon, delta, domain_size, split, rng
    )


def global_dp_matching(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
) -> SiteEstimate:
    """GlobalDPMatching, the baseline: ``tau_hat + Lap(2B / eps_1)`` (correction 2: the global
    sensitivity is ``2B``, not the paper's ``B``), with the private variance of step 2 of
    :func:`smooth_dp_matching`.

    Privacy: ``(epsilon, delta)``-DP; even split in two by default. The Laplace step is pure
    ``eps_1``-DP; the ``delta_1`` share it receives is counted but not used. The noise variance
    ``2 (2B/eps_1)^2`` is public.
    """
    return _matching_release(
        "global_matching", w, y, x, bound, epsilon, delta, domain_size, split, rng
    )
