"""What SmoothDPMatching and GlobalDPMatching make checkable, drawable and predictable from
public values alone: the rules a published estimate satisfies, the mechanisms' noise in the
bootstrap world and their predicted variances for ``dpate plan``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dpate_core.mechanisms._rules import (
    clipped_tau_problems,
    no_arm_sizes_problems,
    noise_variance_problems,
    released_variance_problems,
)
from dpate_core.noise import analytic_gaussian_sigma
from dpate_core.privacy import PrivacyParams

from ._sensitivity import (
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)

if TYPE_CHECKING:
    from dpate_core.inference import NoiseDraws
    from dpate_core.planning import PredictionInputs
    from dpate_core.release import SiteEstimate

__all__ = [
    "global_noise_model",
    "global_plausible",
    "predict_global",
    "predict_smooth",
    "smooth_noise_model",
    "smooth_plausible",
]

_NO_ARMS = "matching does not publish arm sizes"


def smooth_plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """:func:`plan_matching` (``"smooth_matching"``): ``tau_hat + (2 S/eps_1) Lap(1)`` with the
    beta-smooth sensitivity ``S``; ``S_dp`` is the exp of a DP value, so positive."""
    out = clipped_tau_problems(e) + released_variance_problems(e)
    if not e.diagnostics["smooth_sensitivity_dp"] > 0:
        out.append("diagnostics.smooth_sensitivity_dp must be positive (exp of a DP value)")
    return out + no_arm_sizes_problems(e, _NO_ARMS)


def global_plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """:func:`plan_matching` (``"global_matching"``): ``tau_hat + Lap(2B/eps_1)`` (the global
    sensitivity is ``2B``); noise variance ``2 (2B/eps_1)^2``, public."""
    out = clipped_tau_problems(e) + released_variance_problems(e)
    b = PrivacyParams(e.epsilon * e.budget_split[0]).laplace_scale(2 * e.bound)
    out += noise_variance_problems(2.0 * b * b, e, "2 (2B/eps_1)^2")
    return out + no_arm_sizes_problems(e, _NO_ARMS)


def global_noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """``Lap(2B/eps_1)``, scale ``sqrt(noise_variance / 2)`` (public). The variance's noise scale
    ``2 S_V/eps_2`` is data-dependent and not published: the released variance is held."""
    from dpate_core.inference import NoiseDraws

    scale = np.sqrt(site.noise_variance / 2.0)
    return NoiseDraws(scale * rng.laplace(0.0, 1.0, reps), np.full(reps, site.variance))


def smooth_noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """Algorithm 2: ``Lap(2 S_dp / eps_1)`` with ``S_dp`` the released smooth sensitivity
    (diagnostic ``smooth_sensitivity_dp``). A re-run releases ``ln S + z``, ``z ~ N(0, sigma^2)``
    with the public ``sigma`` of the analytic Gaussian mechanism (``beta_1``-sensitive, budget
    part 3), so its noise variance ``8 exp(2 ln S + 2z - 2 sigma^2) / eps_1^2`` is redrawn;
    ``V_dp``'s noise scale is not published, so the sampling part is held."""
    from dpate_core.inference import NoiseDraws

    p_ate, _, p_sens = site.shares()
    e1 = p_ate.epsilon_float
    s_dp = float(site.diagnostics["smooth_sensitivity_dp"])
    beta1 = smooth_beta(e1, p_ate.delta_float)
    sigma = analytic_gaussian_sigma(beta1 + 1e-12, p_sens.epsilon_float, p_sens.delta_float)
    # ln S_dp = ln S + z0 - sigma^2/2 with z0 ~ N(0, sigma^2) public in law: the bootstrap world's
    # S is drawn as S_dp exp(sigma^2/2 - z1), so the interval carries the uncertainty of S_dp
    s_true = s_dp * np.exp(sigma**2 / 2.0 - rng.normal(0.0, sigma, reps))
    noise = (2.0 * s_true / e1) * rng.laplace(0.0, 1.0, reps)
    # a re-run releases S2_dp = S^2 exp(2z - 2 sigma^2), mean S^2
    z = rng.normal(0.0, sigma, reps)
    noise_var = 8.0 * s_true**2 * np.exp(2.0 * z - 2.0 * sigma**2) / e1**2
    return NoiseDraws(noise, site.sampling_variance + noise_var)


def _matching_sampling(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Assumed counts (over the assumed occupied strata), the matching estimator's sampling
    variance (per stratum ``(N_x/N)^2 sd^2 (1/T_x + 1/C_x)``) and ``E V_hat`` (appendix:
    ``1/(2N^2) sum_i (1+L_i)^2 E d_i^2``, ``E d^2 = effect^2 + 2 sd^2``)."""
    from dpate_core.planning import balanced_counts

    n = inp.design.n
    a = inp.assumptions
    tc, cc = balanced_counts(n, inp.domain_size, a.arm_share, a.occupied(inp.domain_size))
    sd2 = inp.assumptions.sd(inp.bound) ** 2
    both = (tc > 0) & (cc > 0)
    t, c = tc[both].astype(float), cc[both].astype(float)
    sampling = float((((t + c) / n) ** 2 * sd2 * (1.0 / t + 1.0 / c)).sum())

    def side(own: np.ndarray, opp: np.ndarray) -> float:
        q, r = opp // own, opp % own
        return float((r * (2.0 + q) ** 2 + (own - r) * (1.0 + q) ** 2).sum())

    ti, ci = tc[both], cc[both]
    d2 = inp.assumptions.effect**2 + 2.0 * sd2
    v_hat = (side(ti, ci) + side(ci, ti)) * d2 / (2.0 * n * n)
    return tc, cc, sampling, v_hat


def _variance_scale(
    inp: PredictionInputs, tc: npt.ArrayLike, cc: npt.ArrayLike, p_var: PrivacyParams
) -> float:
    e2 = p_var.epsilon_float
    beta2 = smooth_beta(e2, p_var.delta_float)
    s_v = matching_variance_smooth_sensitivity(
        tc, cc, inp.design.n, inp.bound, beta2, inp.domain_size
    )
    return 2.0 * s_v / e2


def predict_smooth(inp: PredictionInputs) -> tuple[float, float, float]:
    """Algorithm 2: noise ``8 S^2/eps_1^2`` with ``S`` the smooth sensitivity of the assumed
    counts (``E S2_dp = S^2``); reported ``E max(V_hat + Lap(2 S_V/eps_2), 0) + noise``."""
    from dpate_core.planning import clamped_mean

    p_ate, p_var, _ = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    e1 = p_ate.epsilon_float
    s = matching_smooth_sensitivity(
        tc, cc, inp.design.n, inp.bound, smooth_beta(e1, p_ate.delta_float), inp.domain_size
    )
    noise = 8.0 * s * s / (e1 * e1)
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise


def predict_global(inp: PredictionInputs) -> tuple[float, float, float]:
    """GlobalDPMatching: noise ``2 (2B/eps_1)^2``; reported as for SmoothDPMatching."""
    from dpate_core.planning import clamped_mean

    p_ate, p_var = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    noise = 2.0 * (2.0 * inp.bound / p_ate.epsilon_float) ** 2
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise
