"""DP difference in means for randomized trials (section 3.1.1): the plan and the release.

:func:`dp_difference_in_means` states the privacy cost; :func:`plan_difference_in_means` builds
its :class:`~dpate_core.release.MechanismPlan` (one plan serves the release and the simulations,
see :mod:`dpate_core.release`). A binary outcome (every value 0 or ``B``) releases the arm sums
only and derives the variance from ``p (1 - p)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    bound, total, (n_t, n_c, s_t, s_c, q_t, q_c) = _dim_inputs(w, y, bound, epsilon, delta, binary)
    if arm_sizes_public:
        _require_both_arms(n_t, n_c)
    # parts: the arm sums, the arm sums of squares (unless binary), the treated count (if private)
    shares = BudgetSplit.of(split, (1 if binary else 2) + (0 if arm_sizes_public else 1))
    parts = shares.apply(total)
    # L1 sensitivity of a pair of arm sums: B, or 2B when a record may move between arms
    width = 1 if arm_sizes_public else 2
    sum_scale = _scale(width * Fraction(bound), parts[0])
    noise: list[NoiseSpec] = []
    if not arm_sizes_public:
        noise.append(NoiseSpec("n_treated", float(n_t), _scale(1, parts[-1]), "laplace"))
    noise += [
        NoiseSpec("sum_treated", s_t, sum_scale, "laplace"),
        NoiseSpec("sum_control", s_c, sum_scale, "laplace"),
    ]
    if not binary:
        sq_scale = _scale(width * Fraction(bound) ** 2, parts[1])
        noise += [
            NoiseSpec("sumsq_treated", q_t, sq_scale, "laplace"),
            NoiseSpec("sumsq_control", q_c, sq_scale, "laplace"),
        ]

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {"binary_outcome": 1.0} if binary else {}
        nt_hat, nc_hat = _arm_sizes(v, n_t, n_c, arm_sizes_public, diagnostics)
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        if binary:
            sampling = sampling_raw = _binary_sampling(st, sc, nt_hat, nc_hat, bound)
        else:
            sampling, sampling_raw = _sampling(v, st, sc, nt_hat, nc_hat)
        noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        diagnostics.update(sampling_variance_dp=sampling_raw, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling_raw + noise_var, diagnostics)

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


def _sampling(v: Mapping[str, Any], st: Any, sc: Any, nt: Any, nc: Any) -> tuple[Any, Any]:
    """The sampling variance ``s_t^2 / N_t + s_c^2 / N_c`` from the noisy sums and sums of
    squares: each arm's ``s^2`` clamped at 0, and unclamped (the raw variance)."""
    var_t_raw = v["sumsq_treated"] / nt - (st / nt) ** 2
    var_c_raw = v["sumsq_control"] / nc - (sc / nc) ** 2
    sampling_raw = var_t_raw / nt + var_c_raw / nc
    sampling = np.maximum(var_t_raw, 0.0) / nt + np.maximum(var_c_raw, 0.0) / nc
    return sampling, sampling_raw


def _binary_sampling(st: Any, sc: Any, nt: Any, nc: Any, bound: float) -> Any:
    """A binary outcome's sampling variance ``B^2 (p_t (1 - p_t) / N_t + p_c (1 - p_c) / N_c)``
    with ``p = mean / B`` clipped to ``[0, 1]`` (post-processing of the noisy sums)."""
    p_t = np.clip(st / (nt * bound), 0.0, 1.0)
    p_c = np.clip(sc / (nc * bound), 0.0, 1.0)
    return bound * bound * (p_t * (1.0 - p_t) / nt + p_c * (1.0 - p_c) / nc)


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
