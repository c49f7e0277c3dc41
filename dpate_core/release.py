"""The private releases a site makes: an ATE estimate and an estimate of its variance.

Each function is one mechanism with its privacy cost stated next to it: it spends exactly the
``(epsilon, delta)`` it is given (split by ``split`` among its parts, sequential composition) and
returns a :class:`SiteEstimate` holding public values only. ``rng=None`` draws secure noise
(OpenDP); a ``numpy.random.Generator`` is for simulations.

Neighbouring datasets replace one record; ``N`` is public. What else is assumed public is listed
per mechanism and in ``docs/privacy.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.estimators import arm_sums, matching_statistics
from dpate_core.noise import Rng, analytic_gaussian_sigma, gaussian, laplace
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, to_float
from dpate_core.sensitivity import (
    matching_global_sensitivity,
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)

__all__ = [
    "ESTIMATORS",
    "SiteEstimate",
    "dp_difference_in_means",
    "global_dp_matching",
    "smooth_dp_matching",
]

ESTIMATORS = ("dim", "smooth_matching", "global_matching")


@dataclass(frozen=True)
class SiteEstimate:
    """One site's release. Every field is public: a DP output, a public design constant, or a
    post-processing of those.

    ``variance`` is the private estimate of ``V[tau_dp]`` after clamping its sampling part at 0;
    ``raw_variance`` is the same before clamping (it may be negative; kept for audit).
    ``n_treated`` / ``n_control`` are given only when the design treats arm sizes as public.
    """

    estimator: str
    tau: float
    variance: float
    raw_variance: float
    n: int
    n_treated: int | None
    n_control: int | None
    epsilon: Fraction
    delta: Fraction
    bound: float
    budget_split: tuple[Fraction, ...]
    diagnostics: dict[str, float] = field(default_factory=dict)

    @property
    def privacy(self) -> PrivacyParams:
        return PrivacyParams(self.epsilon, self.delta)

    def conf_int(self, level: float = 0.95) -> tuple[float, float]:
        """Normal interval ``tau +- z sqrt(variance)`` (post-processing)."""
        z = _z(level)
        half = z * math.sqrt(self.variance)
        return self.tau - half, self.tau + half

    def public_fields(self) -> dict[str, Any]:
        """JSON-ready dictionary; privacy parameters as exact strings."""
        return {
            "estimator": self.estimator,
            "tau": self.tau,
            "variance": self.variance,
            "raw_variance": self.raw_variance,
            "n": self.n,
            "n_treated": self.n_treated,
            "n_control": self.n_control,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "bound": self.bound,
            "budget_split": [str(s) for s in self.budget_split],
            "diagnostics": dict(self.diagnostics),
        }


def _z(level: float) -> float:
    from statistics import NormalDist

    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def _check_bound(bound: float) -> float:
    bound = float(bound)
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    return bound


def _check_outcomes(y: np.ndarray, bound: float) -> None:
    # The privacy proof needs 0 <= Y <= B. Clipping is the data layer's job (schemas), done with the
    # public B before anything reaches here; the message carries the rule, never a value.
    if y.size and not (np.isfinite(y).all() and y.min() >= 0.0 and y.max() <= bound):
        raise ValueError(
            "outcomes must be finite and lie in [0, B]: clip or reject them with the study's "
            "public bound before the release"
        )


def _eps(p: PrivacyParams) -> float:
    """Epsilon as the float that scales noise: rounded down, so noise is never too small."""
    return to_float(p.epsilon, round_up=False)


def _delta(p: PrivacyParams) -> float:
    return to_float(p.delta, round_up=False)


# ---------------------------------------------------------------------------------------------
# Randomized trials: section 3.1.1


def dp_difference_in_means(
    w,
    y,
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
    w_arr = np.asarray(w)
    y_arr = np.asarray(y, dtype=np.float64)
    bound = _check_bound(bound)
    _check_outcomes(y_arr, bound)
    total = PrivacyParams.of(epsilon, delta)
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    n_t, n_c, s_t, s_c, q_t, q_c = arm_sums(w_arr, y_arr)
    n = n_t + n_c
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")

    if arm_sizes_public:
        if n_t == 0 or n_c == 0:
            raise ValueError(f"both arms must be non-empty (treated {n_t}, control {n_c})")
        shares = BudgetSplit.of(split, 2)
        p_sum, p_sq = shares.apply(total)
        e1, e2 = _eps(p_sum), _eps(p_sq)
        sum_scale, sq_scale = bound / e1, bound * bound / e2
        nt_hat, nc_hat = float(n_t), float(n_c)
        diagnostics: dict[str, float] = {}
    else:
        shares = BudgetSplit.of(split, 3)
        p_sum, p_sq, p_cnt = shares.apply(total)
        e1, e2 = _eps(p_sum), _eps(p_sq)
        sum_scale, sq_scale = 2.0 * bound / e1, 2.0 * bound * bound / e2
        nt_noisy = laplace(float(n_t), 1.0 / _eps(p_cnt), rng)
        nt_hat = min(max(nt_noisy, 1.0), n - 1.0)  # post-processing: both arms at least 1
        nc_hat = n - nt_hat
        diagnostics = {"n_treated_dp": nt_hat}

    st_dp = laplace(s_t, sum_scale, rng)
    sc_dp = laplace(s_c, sum_scale, rng)
    qt_dp = laplace(q_t, sq_scale, rng)
    qc_dp = laplace(q_c, sq_scale, rng)

    tau = st_dp / nt_hat - sc_dp / nc_hat
    var_t_raw = qt_dp / nt_hat - (st_dp / nt_hat) ** 2
    var_c_raw = qc_dp / nc_hat - (sc_dp / nc_hat) ** 2
    noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
    sampling_raw = var_t_raw / nt_hat + var_c_raw / nc_hat
    sampling = max(var_t_raw, 0.0) / nt_hat + max(var_c_raw, 0.0) / nc_hat
    diagnostics.update(sampling_variance_dp=sampling_raw, noise_variance=noise_var)
    return SiteEstimate(
        estimator="dim",
        tau=tau,
        variance=sampling + noise_var,
        raw_variance=sampling_raw + noise_var,
        n=n,
        n_treated=n_t if arm_sizes_public else None,
        n_control=n_c if arm_sizes_public else None,
        epsilon=total.epsilon,
        delta=total.delta,
        bound=bound,
        budget_split=shares.shares,
        diagnostics=diagnostics,
    )


# ---------------------------------------------------------------------------------------------
# Observational studies: Algorithm 2 and the appendix


def _matching_inputs(w, y, x, bound, domain_size):
    bound = _check_bound(bound)
    y_arr = np.asarray(y, dtype=np.float64)
    _check_outcomes(y_arr, bound)
    stats = matching_statistics(w, y_arr, x, domain_size)
    if stats.n < 2:
        raise ValueError(f"a release needs at least 2 records (got {stats.n})")
    return bound, stats


def _private_variance(
    stats, n, bound, p_var: PrivacyParams, domain_size, rng
) -> tuple[float, float]:
    """``V_hat + (2 S_V / eps_2) Lap(1)``: smooth-sensitivity Laplace on the variance estimate."""
    e2, d2 = _eps(p_var), _delta(p_var)
    beta2 = smooth_beta(e2, d2)
    s_var = matching_variance_smooth_sensitivity(
        stats.treated_counts, stats.control_counts, n, bound, beta2, domain_size
    )
    return laplace(stats.variance, 2.0 * s_var / e2, rng), beta2


def _require_delta(total: PrivacyParams, name: str) -> None:
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    if total.delta <= 0:
        raise ValueError(
            f"delta ({total.delta}) must be positive: {name} uses smooth sensitivity, which is "
            f"(epsilon, delta)-DP; give a small delta such as 1e-5"
        )


def smooth_dp_matching(
    w,
    y,
    x,
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
       ERRATA section 1, ``beta_1 = eps_1 / (2 ln(2/delta_1))``: ``(eps_1, delta_1)``-DP.
    2. ``V_dp = V_hat + (2 S_V / eps_2) eta'`` with the variance's beta_2-smooth bound
       (ERRATA section 3): ``(eps_2, delta_2)``-DP.
    3. ``ln S_dp = ln S + z``, ``z ~ N(0, sigma^2)``; ``ln S`` has global sensitivity ``beta_1``
       because ``S`` is beta_1-smooth, and ``sigma`` is calibrated by the analytic Gaussian
       mechanism (ERRATA section 4): ``(eps_3, delta_3)``-DP.

    The reported variance is ``max(V_dp, 0) + 8 S2_dp / eps_1^2`` with
    ``S2_dp = exp(2 ln S + 2z - 2 sigma^2)``, unbiased for ``S^2`` (ERRATA section 4).
    Public: ``N``, ``B``, ``|X|`` (``domain_size``) and the covariate discretisation.
    Arm sizes are **not** released.
    """
    total = PrivacyParams.of(epsilon, delta)
    _require_delta(total, "SmoothDPMatching")
    bound, stats = _matching_inputs(w, y, x, bound, domain_size)
    n = stats.n
    shares = BudgetSplit.of(split, 3)
    p_ate, p_var, p_sens = shares.apply(total)

    # 1. the ATE
    e1 = _eps(p_ate)
    beta1 = smooth_beta(e1, _delta(p_ate))
    s_ate = matching_smooth_sensitivity(
        stats.treated_counts, stats.control_counts, n, bound, beta1, domain_size
    )
    tau_dp = laplace(stats.tau, 2.0 * s_ate / e1, rng)
    # 2. the sampling variance
    v_dp, _ = _private_variance(stats, n, bound, p_var, domain_size, rng)
    # 3. the smooth sensitivity itself (for the noise-variance term)
    sigma = analytic_gaussian_sigma(beta1 + 1e-12, _eps(p_sens), _delta(p_sens))
    log_s_dp = gaussian(math.log(s_ate), sigma, rng)
    s_dp = math.exp(log_s_dp - sigma**2 / 2.0)  # unbiased for S (the Lemma)
    s2_dp = math.exp(2.0 * log_s_dp - 2.0 * sigma**2)  # unbiased for S^2
    noise_var = 8.0 * s2_dp / e1**2

    return SiteEstimate(
        estimator="smooth_matching",
        tau=tau_dp,
        variance=max(v_dp, 0.0) + noise_var,
        raw_variance=v_dp + noise_var,
        n=n,
        n_treated=None,
        n_control=None,
        epsilon=total.epsilon,
        delta=total.delta,
        bound=bound,
        budget_split=shares.shares,
        diagnostics={
            "smooth_sensitivity_dp": s_dp,
            "sampling_variance_dp": v_dp,
            "noise_variance": noise_var,
        },
    )


def global_dp_matching(
    w,
    y,
    x,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
) -> SiteEstimate:
    """GlobalDPMatching, the baseline: ``tau_hat + Lap(2B / eps_1)`` (ERRATA section 2: the global
    sensitivity is ``2B``, not the paper's ``B``), with the private variance of step 2 of
    :func:`smooth_dp_matching`.

    Privacy: ``(epsilon, delta)``-DP; even split in two by default. The Laplace step is pure
    ``eps_1``-DP; the ``delta_1`` share it receives is counted but not used. The noise variance
    ``2 (2B/eps_1)^2`` is public.
    """
    total = PrivacyParams.of(epsilon, delta)
    _require_delta(total, "GlobalDPMatching's variance")
    bound, stats = _matching_inputs(w, y, x, bound, domain_size)
    n = stats.n
    shares = BudgetSplit.of(split, 2)
    p_ate, p_var = shares.apply(total)
    e1 = _eps(p_ate)
    scale = matching_global_sensitivity(n, bound) / e1
    tau_dp = laplace(stats.tau, scale, rng)
    v_dp, _ = _private_variance(stats, n, bound, p_var, domain_size, rng)
    noise_var = 2.0 * scale * scale
    return SiteEstimate(
        estimator="global_matching",
        tau=tau_dp,
        variance=max(v_dp, 0.0) + noise_var,
        raw_variance=v_dp + noise_var,
        n=n,
        n_treated=None,
        n_control=None,
        epsilon=total.epsilon,
        delta=total.delta,
        bound=bound,
        budget_split=shares.shares,
        diagnostics={"sampling_variance_dp": v_dp, "noise_variance": noise_var},
    )
