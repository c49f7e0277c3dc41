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
    noise_variance_range_problems,
    released_variance_problems,
)
from dpate_core.privacy import PrivacyParams
from dpate_core.statistics import COUNT_SENSITIVITY

from ._release import spread

if TYPE_CHECKING:
    from dpate_core.inference import NoiseDraws
    from dpate_core.planning import PredictionInputs
    from dpate_core.release import SiteEstimate

__all__ = [
    "histogram_mode",
    "histogram_noise_range",
    "noise_model",
    "plausible",
    "predict",
    "required_diagnostics",
]


def _public(options: Any) -> bool:
    return options is None or bool(options.arm_sizes_public)


def required_diagnostics(options: Any) -> tuple[str, ...]:
    base = ("noise_variance", "sampling_variance_dp")
    return base if _public(options) else (*base, "n_treated_dp")


def histogram_mode(public_arms: bool, binary: bool, parts: int) -> bool:
    """Whether a release with these public values is the ``(arm, end)`` histogram's: private arm
    sizes, one part for a binary outcome (since stop 42), two for any other (since stop 44; a
    part more is the arm sums and treated count of earlier releases)."""
    return not public_arms and parts == (1 if binary else 2)


def histogram_noise_range(
    bound: float, v_bin: float, tau: float, nt: float, nc: float
) -> tuple[float, float]:
    """The least and greatest noise variance ``B^2 v ((1 - p_t)^2 + p_t^2) / N_t^2 + B^2 v ((1 -
    p_c)^2 + p_c^2) / N_c^2`` of an ``(arm, end)`` histogram release over the arm means the
    report leaves open (``p_t - p_c = tau / B``, both in ``[0, 1]``; the means themselves are not
    published). The function is a convex quadratic in ``p_c``: least at its stationary point
    ``1/2 - d a / (a + b)`` (``d = tau / B``, ``a = 1/N_t^2``, ``b = 1/N_c^2``) clipped to the
    feasible range, greatest at an end of it."""
    a, b, d = 1.0 / (nt * nt), 1.0 / (nc * nc), min(max(tau / bound, -1.0), 1.0)
    lo, hi = max(0.0, -d), min(1.0, 1.0 - d)

    def g(p: float) -> float:
        return float(a * spread(p + d) + b * spread(p))

    star = min(max(0.5 - d * a / (a + b), lo), hi)
    scale = bound * bound * v_bin
    return scale * g(star), scale * max(g(lo), g(hi))


def plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """:func:`plan_difference_in_means`: ``tau = S_t/N_t - S_c/N_c`` with each arm sum plus
    ``Lap(b)``; the noise variance ``2 b^2 (1/N_t^2 + 1/N_c^2)`` is public. With private arm
    sizes the ``(arm, end)`` histogram's noise variance depends on the arm means, which are not
    published: it must lie in the range :func:`histogram_noise_range` gives."""
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
        # private arms (a record may change arm): N_t_dp post-processed into [1, N-1]
        nt = diag_nt = e.diagnostics["n_treated_dp"]
        if not 1.0 <= diag_nt <= e.n - 1.0:
            return [
                *out,
                f"diagnostics.n_treated_dp ({diag_nt}) must lie in [1, N-1] (post-processing)",
            ]
        nc = e.n - nt
        binary = bool(e.diagnostics.get("binary_outcome"))
        if histogram_mode(False, binary, len(e.budget_split)):
            v_bin = 2.0 * PrivacyParams(eps_1).laplace_scale(COUNT_SENSITIVITY) ** 2
            least, greatest = histogram_noise_range(bound, v_bin, e.tau, nt, nc)
            rule = "B^2 v ((1 - p_t)^2 + p_t^2) / N_t^2 + B^2 v ((1 - p_c)^2 + p_c^2) / N_c^2"
            return out + noise_variance_range_problems(least, greatest, e, rule)
        b = PrivacyParams(eps_1).laplace_scale(2 * bound)  # the arm sums at 2B / eps_1
    noise_var = 2.0 * b * b * (1.0 / nt**2 + 1.0 / nc**2)
    return out + noise_variance_problems(noise_var, e, "2 b^2 (1/N_t^2 + 1/N_c^2)")


def noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """``Lap(s)/N_t - Lap(s)/N_c`` with ``s`` the public sum scale, read back from
    ``noise_variance = 2 s^2 (1/N_t^2 + 1/N_c^2)`` (with private arm sizes, the ``(arm, end)``
    histogram's arm-mean noise, drawn as Laplace of the published variance); the re-run's
    sampling variance moves by the sums of squares' ``Lap(q)`` (``q = B^2/eps_2``, or ``2B^2``
    with private arm sizes) over ``N_t^2`` and ``N_c^2``. A release with private arm sizes from
    before the histogram (a treated count as its own part) adds the count's ``Lap(1/eps)``, which
    moves ``tau`` by about ``-(B/2)(1/N_t + 1/N_c)`` per unit (the arm means are not published:
    ``B/2`` is their midpoint)."""
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
    binary = bool(site.diagnostics.get("binary_outcome"))
    if not public_arms and not histogram_mode(False, binary, len(parts)):  # a treated count
        slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
        noise = noise - slope * rng.laplace(0.0, 1.0, reps) / parts[-1].epsilon_float
    if binary:  # no sums of squares released
        return NoiseDraws(noise, np.full(reps, site.variance))
    b2 = site.bound**2 if public_arms else 2.0 * site.bound**2
    q = b2 / parts[1].epsilon_float
    sampling = np.maximum(
        site.sampling_variance
        + q * (rng.laplace(0.0, 1.0, reps) / nt**2 + rng.laplace(0.0, 1.0, reps) / nc**2),
        0.0,
    )
    return NoiseDraws(noise, sampling + site.noise_variance)


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
    """Sampling ``sd^2 (1/N_t + 1/N_c)``; noise ``2 s^2 (1/N_t^2 + 1/N_c^2)`` with ``s = B/eps_1``;
    each arm's ``s^2`` is clamped after ``Lap(q)/N_arm`` noise, ``q = B^2/eps_2``. With private
    arm sizes the ``(arm, end)`` histogram: noise ``B^2 v ((1 - p)^2 + p^2) / N_arm^2`` per arm
    (``v = 2 (2/eps_1)^2``, ``p`` the assumed mean plus or minus half the effect, over ``B``),
    the squares at ``q = 2B^2/eps_2``. A binary outcome (``inp.binary``) releases no squares:
    each arm's ``s^2`` is ``B^2 p (1 - p)`` from its noisy mean, reported as sampling plus
    noise."""
    from dpate_core.planning import clamped_mean

    b, sd = inp.bound, inp.assumptions.sd(inp.bound)
    n = inp.design.n
    nt = min(max(round(inp.assumptions.arm_share * n), 1), n - 1)
    nc = n - nt
    parts = inp.parts()
    sampling = sd * sd * (1.0 / nt + 1.0 / nc)
    if _public(inp.options):
        s = b / parts[0].epsilon_float
        noise = 2.0 * s * s * (1.0 / nt**2 + 1.0 / nc**2)
    else:  # the (arm, end) histogram, the first part
        v_bin = 2.0 * (2.0 / parts[0].epsilon_float) ** 2
        mean, half = inp.assumptions.mean(b) / b, 0.5 * inp.assumptions.effect / b
        p_t, p_c = (min(max(mean + d, 0.0), 1.0) for d in (half, -half))
        noise = b * b * v_bin * (spread(p_t) / nt**2 + spread(p_c) / nc**2)
    if inp.binary:
        return sampling, noise, sampling + noise
    q = (1.0 if _public(inp.options) else 2.0) * b * b / parts[1].epsilon_float
    reported = clamped_mean(sd * sd, q / nt) / nt + clamped_mean(sd * sd, q / nc) / nc + noise
    return sampling, noise, reported
