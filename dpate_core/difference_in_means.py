"""DP difference in means for randomized trials (section 3.1.1): the plan and the release.

:func:`dp_difference_in_means` states the privacy cost; :func:`plan_difference_in_means` builds
its :class:`~dpate_core.release.MechanismPlan` (one plan serves the release and the simulations,
see :mod:`dpate_core.release`). A binary outcome (every value 0 or ``B``) releases the arm sums
only and derives the variance from ``p (1 - p)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.estimators import arm_sums
from dpate_core.noise import Rng
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    Outputs,
    SiteEstimate,
    _check_bound,
    _check_outcomes,
    _release,
    _scale,
)

__all__ = ["dp_difference_in_means", "plan_difference_in_means"]

ArmSums = tuple[int, int, float, float, float, float]


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
    ``p = mean / B``): no sums of squares are released and their budget part is dropped (parts:
    the arm sums, plus the treated count when arm sizes are private)."""
    if binary:
        return _plan_binary_dim(w, y, bound, epsilon, delta, split, arm_sizes_public)
    bound, total, (n_t, n_c, s_t, s_c, q_t, q_c) = _dim_inputs(w, y, bound, epsilon, delta, False)

    noise: list[NoiseSpec] = []
    if arm_sizes_public:
        _require_both_arms(n_t, n_c)
        shares = BudgetSplit.of(split, 2)
        p_sum, p_sq = shares.apply(total)
        sum_scale, sq_scale = _scale(bound, p_sum), _scale(Fraction(bound) ** 2, p_sq)
    else:
        shares = BudgetSplit.of(split, 3)
        p_sum, p_sq, p_cnt = shares.apply(total)
        sum_scale = _scale(2 * Fraction(bound), p_sum)
        sq_scale = _scale(2 * Fraction(bound) ** 2, p_sq)
        noise.append(NoiseSpec("n_treated", float(n_t), _scale(1, p_cnt), "laplace"))
    noise += [
        NoiseSpec("sum_treated", s_t, sum_scale, "laplace"),
        NoiseSpec("sum_control", s_c, sum_scale, "laplace"),
        NoiseSpec("sumsq_treated", q_t, sq_scale, "laplace"),
        NoiseSpec("sumsq_control", q_c, sq_scale, "laplace"),
    ]

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {}
        nt_hat, nc_hat = _arm_sizes(v, n_t, n_c, arm_sizes_public, diagnostics)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        var_t_raw = v["sumsq_treated"] / nt_hat - (st / nt_hat) ** 2
        var_c_raw = v["sumsq_control"] / nc_hat - (sc / nc_hat) ** 2
        noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        sampling_raw = var_t_raw / nt_hat + var_c_raw / nc_hat
        sampling = np.maximum(var_t_raw, 0.0) / nt_hat + np.maximum(var_c_raw, 0.0) / nc_hat
        diagnostics.update(sampling_variance_dp=sampling_raw, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling_raw + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, arm_sizes_public, total, bound, shares, noise, assemble)


def _dim_inputs(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    bound: float,
    epsilon: Number,
    delta: Number,
    binary: bool,
) -> tuple[float, PrivacyParams, ArmSums]:
    """The checked bound, the budget spent (``(epsilon, 0)``: ``delta`` is validated, not
    spent) and the arm sums; refuses outcomes outside ``[0, B]`` (and, for a binary outcome,
    other than 0 or ``B``), a non-positive epsilon and fewer than 2 records."""
    w_arr = np.asarray(w)
    y_arr = np.asarray(y, dtype=np.float64)
    bound = _check_bound(bound)
    _check_outcomes(y_arr, bound)
    if binary and y_arr.size and not np.all((y_arr == 0.0) | (y_arr == bound)):
        raise ValueError(
            "a binary outcome must be exactly 0 or B in every record: map the outcome's two "
            "labels to 0 and B, or remove outcome.binary from the spec"
        )
    given = PrivacyParams.of(epsilon, delta)  # validates delta; the mechanism spends none of it
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    sums = arm_sums(w_arr, y_arr)
    n = sums[0] + sums[1]
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    return bound, total, sums


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
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    bound: float,
    epsilon: Number,
    delta: Number,
    split: Sequence[Number] | None,
    arm_sizes_public: bool,
) -> MechanismPlan:
    """Difference in means of a binary outcome (0 or ``B``): same sums and noise as the general
    plan, the variance from ``p (1 - p)`` (post-processing of the noisy sums)."""
    bound, total, (n_t, n_c, s_t, s_c, _, _) = _dim_inputs(w, y, bound, epsilon, delta, True)
    noise: list[NoiseSpec] = []
    if arm_sizes_public:
        _require_both_arms(n_t, n_c)
        shares = BudgetSplit.of(split, 1)
        (p_sum,) = shares.apply(total)
        sum_scale = _scale(bound, p_sum)
    else:
        shares = BudgetSplit.of(split, 2)
        p_sum, p_cnt = shares.apply(total)
        sum_scale = _scale(2 * Fraction(bound), p_sum)
        noise.append(NoiseSpec("n_treated", float(n_t), _scale(1, p_cnt), "laplace"))
    noise += [
        NoiseSpec("sum_treated", s_t, sum_scale, "laplace"),
        NoiseSpec("sum_control", s_c, sum_scale, "laplace"),
    ]

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {"binary_outcome": 1.0}
        nt_hat, nc_hat = _arm_sizes(v, n_t, n_c, arm_sizes_public, diagnostics)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        p_t = np.clip(st / (nt_hat * bound), 0.0, 1.0)
        p_c = np.clip(sc / (nc_hat * bound), 0.0, 1.0)
        sampling = bound * bound * (p_t * (1.0 - p_t) / nt_hat + p_c * (1.0 - p_c) / nc_hat)
        noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        diagnostics.update(sampling_variance_dp=sampling, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling + noise_var, diagnostics)

    return _dim_plan(n_t, n_c, arm_sizes_public, total, bound, shares, noise, assemble)


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

    With ``arm_sizes_public=False`` a neighbour may also move a record between arms (ERRATA
    section 5); the budget splits in three: the pair of arm sums (L1 sensitivity ``2B``), the pair
    of sums of squares (``2B^2``), and the treated count (sensitivity 1; ``N_c = N - N_t``).

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
    return _release(plan, rng)
