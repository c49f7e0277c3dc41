"""What the DP difference in means makes checkable, drawable and predictable from public values
alone: the rules a published estimate satisfies (:func:`plausible`), its noise in the bootstrap
world (:func:`noise_model`) and its predicted variances for ``dpate plan`` (:func:`predict`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms._rules import (
    clipped_tau_problems,
    noise_variance_problems,
    released_variance_problems,
)
from dpate_core.privacy import PrivacyParams

if TYPE_CHECKING:
    from dpate_core.inference import NoiseDraws
    from dpate_core.planning import PredictionInputs
    from dpate_core.release import SiteEstimate

__all__ = ["noise_model", "plausible", "predict", "required_diagnostics"]


def _public(options: Any) -> bool:
    return options is None or bool(options.arm_sizes_public)


def required_diagnostics(options: Any) -> tuple[str, ...]:
    base = ("noise_variance", "sampling_variance_dp")
    return base if _public(options) else (*base, "n_treated_dp")


def plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """:func:`plan_difference_in_means`: ``tau = S_t/N_t - S_c/N_c`` with each arm sum plus
    ``Lap(b)``; the noise variance ``2 b^2 (1/N_t^2 + 1/N_c^2)`` is public."""
    out = clipped_tau_problems(e) + released_variance_problems(e)
    eps_1 = e.epsilon * e.budget_split[0]
    bound = e.bound
    if _public(options):
        if e.n_treated is None or e.n_control is None:
            return [*out, "n_treated/n_control are missing: the spec treats arm sizes as public"]
        # public arms: b = B/eps_1 (a neighbour changes one outcome within its arm)
        nt, nc = float(e.n_treated), float(e.n_control)
        b = PrivacyParams(eps_1).laplace_scale(bound)
    else:
        if e.n_treated is not None:
            return [
                *out,
                "n_treated/n_control are published but the spec treats arm sizes as private "
                "(arm_sizes_public = false): they must be null",
            ]
        # private arms (a record may change arm): b = 2B/eps_1; N_t_dp post-processed into
        # [1, N-1]
        nt = diag_nt = e.diagnostics["n_treated_dp"]
        if not 1.0 <= diag_nt <= e.n - 1.0:
            return [
                *out,
                f"diagnostics.n_treated_dp ({diag_nt}) must lie in [1, N-1] (post-processing)",
            ]
        nc = e.n - nt
        b = PrivacyParams(eps_1).laplace_scale(2 * bound)
    noise_var = 2.0 * b * b * (1.0 / nt**2 + 1.0 / nc**2)
    return out + noise_variance_problems(noise_var, e, "2 b^2 (1/N_t^2 + 1/N_c^2)")


def noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """``Lap(s)/N_t - Lap(s)/N_c`` with ``s`` the public sum scale, read back from
    ``noise_variance = 2 s^2 (1/N_t^2 + 1/N_c^2)``; the re-run's sampling variance moves by the
    sums of squares' ``Lap(q)`` (``q = B^2/eps_2``, or ``2B^2`` with private arm sizes) over
    ``N_t^2`` and ``N_c^2``. With private arm sizes the treated count's ``Lap(1/eps_3)`` moves
    ``tau`` by about ``-(B/2)(1/N_t + 1/N_c)`` per unit (the arm means are not published: ``B/2``
    is their midpoint)."""
    from dpate_core.inference import NoiseDraws

    public_arms = site.n_treated is not None and site.n_control is not None
    if public_arms:
        nt, nc = float(site.n_treated), float(site.n_control)  # type: ignore[arg-type]
    else:
        nt = float(site.diagnostics["n_treated_dp"])
        nc = site.n - nt
    s = math.sqrt(site.noise_variance / (2.0 * (1.0 / nt**2 + 1.0 / nc**2)))
    noise = s * (rng.laplace(0.0, 1.0, reps) / nt - rng.laplace(0.0, 1.0, reps) / nc)
    parts = site.shares()
    held = np.full(reps, site.variance)
    if site.diagnostics.get("binary_outcome"):  # binary outcome: no sums of squares released
        if not public_arms and len(parts) == 2:  # a release before the histogram (stop 42)
            slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
            noise = noise - slope * rng.laplace(0.0, 1.0, reps) / parts[1].epsilon_float
        return NoiseDraws(noise, held)
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


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
    """Sampling ``sd^2 (1/N_t + 1/N_c)``; noise ``2 s^2 (1/N_t^2 + 1/N_c^2)`` with ``s = B/eps_1``
    (``2B/eps_1`` with private arm sizes); each arm's ``s^2`` is clamped after ``Lap(q)/N_arm``
    noise, ``q = B^2/eps_2`` (``2B^2``). The treated count's own noise (private arm sizes) is left
    out. A binary outcome (``inp.binary``) releases no squares: each arm's ``s^2`` is ``B^2 p (1 -
    p)`` from its noisy sum, reported as sampling plus noise; with private arm sizes its
    ``(arm, outcome)`` histogram, noise ``B^2 v ((1 - p)^2 + p^2) / N_arm^2`` per arm (``v =
    2 (2/eps)^2``, ``p`` the assumed mean plus or minus half the effect, over ``B``)."""
    from dpate_core.planning import clamped_mean

    b, sd = inp.bound, inp.assumptions.sd(inp.bound)
    n = inp.design.n
    nt = min(max(round(inp.assumptions.arm_share * n), 1), n - 1)
    nc = n - nt
    parts = inp.parts()
    sampling = sd * sd * (1.0 / nt + 1.0 / nc)
    if inp.binary and not _public(inp.options):  # the (arm, outcome) histogram, one part
        v_bin = 2.0 * (2.0 / parts[0].epsilon_float) ** 2
        mean, half = inp.assumptions.mean(b) / b, 0.5 * inp.assumptions.effect / b
        shares = [min(max(mean + d, 0.0), 1.0) for d in (half, -half)]
        spread = [(1.0 - q) ** 2 + q * q for q in shares]
        noise = b * b * v_bin * (spread[0] / nt**2 + spread[1] / nc**2)
        return sampling, noise, sampling + noise
    mult = 1.0 if _public(inp.options) else 2.0
    s = mult * b / parts[0].epsilon_float
    noise = 2.0 * s * s * (1.0 / nt**2 + 1.0 / nc**2)
    if inp.binary:
        return sampling, noise, sampling + noise
    q = mult * b * b / parts[1].epsilon_float
    reported = clamped_mean(sd * sd, q / nt) / nt + clamped_mean(sd * sd, q / nc) / nc + noise
    return sampling, noise, reported
