"""The mechanisms' noise in the bootstrap world, from published fields only: one model per
estimator in :data:`NOISE_MODELS` (add one with :func:`register_noise_model`), each drawing the
error a re-run's DP noise adds to ``tau`` and the variance the re-run would publish.

Post-processing of DP releases and public design constants, like all of
:mod:`dpate_core.inference` (which combines these draws with the sampling error in
:func:`dpate_core.inference.site_draws` and re-exports the names here): ``numpy.random`` is
allowed, the draws protect nothing. A model draws the mechanism's noise as the mechanism adds it;
the bootstrap clips each re-run's ``tau`` to ``[-B, B]`` afterwards, as the release does
(:func:`dpate_core.inference.site_bootstrap_interval`). An unresolved release has no model draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpate_core.mechanisms.matching import smooth_beta
from dpate_core.noise import analytic_gaussian_sigma
from dpate_core.release import SiteEstimate

__all__ = ["NOISE_MODELS", "NoiseDraws", "NoiseModel", "register_noise_model"]


@dataclass(frozen=True)
class NoiseDraws:
    """``reps`` draws of a re-run of the mechanism in the bootstrap world: ``noise`` the error the
    DP noise adds to ``tau``; ``variance`` the variance the re-run would publish."""

    noise: np.ndarray
    variance: np.ndarray


NoiseModel = Callable[[SiteEstimate, np.random.Generator, int], NoiseDraws]

#: estimator name -> its noise model from public fields
NOISE_MODELS: dict[str, NoiseModel] = {}


def register_noise_model(estimator: str) -> Callable[[NoiseModel], NoiseModel]:
    """Decorator: register ``fn(site, rng, reps) -> NoiseDraws`` as ``estimator``'s model.

    A new estimator needs one such function: the error its noise adds to ``tau`` (from the public
    scales) and the released variance a re-run would publish (``site.variance`` if it is not
    random given the public fields)."""

    def wrap(fn: NoiseModel) -> NoiseModel:
        NOISE_MODELS[estimator] = fn
        return fn

    return wrap


def _held(site: SiteEstimate, reps: int) -> np.ndarray:
    return np.full(reps, site.variance)


@register_noise_model("dim")
def _dim_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """Difference in means (section 3.1.1): ``Lap(s)/N_t - Lap(s)/N_c`` with ``s`` the public
    sum scale, read back from ``noise_variance = 2 s^2 (1/N_t^2 + 1/N_c^2)``; the re-run's
    sampling variance moves by the sums of squares' ``Lap(q)`` (``q = B^2/eps_2``, or ``2B^2``
    with private arm sizes) over ``N_t^2`` and ``N_c^2``. With private arm sizes the treated count's
    ``Lap(1/eps_3)`` moves ``tau`` by about ``-(B/2)(1/N_t + 1/N_c)`` per unit (the arm means are
    not published: ``B/2`` is their midpoint)."""
    public_arms = site.n_treated is not None and site.n_control is not None
    if public_arms:
        nt, nc = float(site.n_treated), float(site.n_control)  # type: ignore[arg-type]
    else:
        nt = float(site.diagnostics["n_treated_dp"])
        nc = site.n - nt
    s = math.sqrt(site.noise_variance / (2.0 * (1.0 / nt**2 + 1.0 / nc**2)))
    noise = s * (rng.laplace(0.0, 1.0, reps) / nt - rng.laplace(0.0, 1.0, reps) / nc)
    parts = site.shares()
    if site.diagnostics.get("binary_outcome"):  # binary outcome: no sums of squares released
        if not public_arms:
            slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
            noise = noise - slope * rng.laplace(0.0, 1.0, reps) / parts[1].epsilon_float
        return NoiseDraws(noise, _held(site, reps))
    b2 = site.bound**2 if public_arms else 2.0 * site.bound**2
    q = b2 / parts[1].epsilon_float
    if not public_arms:
        count_scale = 1.0 / parts[2].epsilon_float
        slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
        noise = noise - slope * count_scale * rng.laplace(0.0, 1.0, reps)
    sampling = np.maximum(
        site.sampling_variance
        + q * (rng.laplace(0.0, 1.0, reps) / nt**2 + rng.laplace(0.0, 1.0, reps) / nc**2),
        0.0,
    )
    return NoiseDraws(noise, sampling + site.noise_variance)


@register_noise_model("global_matching")
def _global_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """GlobalDPMatching: ``Lap(2B/eps_1)``, scale ``sqrt(noise_variance / 2)`` (public). The
    variance's noise scale ``2 S_V/eps_2`` is data-dependent and not published: the released
    variance is held."""
    scale = math.sqrt(site.noise_variance / 2.0)
    return NoiseDraws(scale * rng.laplace(0.0, 1.0, reps), _held(site, reps))


@register_noise_model("smooth_matching")
def _smooth_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """SmoothDPMatching (Algorithm 2): ``Lap(2 S_dp / eps_1)`` with ``S_dp`` the released smooth
    sensitivity (diagnostic ``smooth_sensitivity_dp``). A re-run releases
    ``ln S + z``, ``z ~ N(0, sigma^2)`` with the public ``sigma`` of the analytic Gaussian
    mechanism (``beta_1``-sensitive, budget part 3), so its noise variance
    ``8 exp(2 ln S + 2z - 2 sigma^2) / eps_1^2`` is redrawn; ``V_dp``'s noise scale is not
    published, so the sampling part is held."""
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


@register_noise_model("adjusted")
def _adjusted_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """DP subclassification (``dpate_core.mechanisms.adjusted``, ``docs/adjusted.md``): the error is a sum of
    Laplace terms over the usable strata's cells (sums and counts, delta method), whose total
    variance is the published ``noise_variance``. Per-cell counts are not published, so the
    model spreads that variance evenly over ``2 k`` Laplace terms, ``k`` the published
    ``usable_strata`` (capped at 32 terms, where the sum is already close to normal): one stratum
    gives the shape of a difference of two Laplaces, many give a normal. The sampling part's noise
    scale depends on unpublished cell counts: the released variance is held."""
    k = int(min(max(site.diagnostics.get("usable_strata", 1.0), 1.0), 16.0))
    terms = rng.laplace(0.0, 1.0, (reps, 2 * k)).sum(axis=1)
    noise = math.sqrt(site.noise_variance / (2.0 * 2 * k)) * terms
    return NoiseDraws(noise, _held(site, reps))
