"""One prediction per estimator (:data:`PREDICTORS`): from a site's public design and the stated
assumptions, its sampling variance, DP noise variance and expected *reported* variance (the
release clamps a noisy sampling part at 0). :mod:`dpate_core.planning` describes the method;
register a new estimator's prediction with :func:`register_predictor`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from dpate_core.mechanisms.matching import (
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)
from dpate_core.planning._inputs import PredictionInputs, balanced_counts, clamped_mean
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, exact

__all__ = [
    "PREDICTORS",
    "Predictor",
    "adjusted_resolution",
    "adjusted_weighting",
    "register_predictor",
]


Predictor = Callable[[PredictionInputs], tuple[float, float, float]]

#: estimator -> ``fn(inputs) -> (sampling variance, noise variance, expected reported variance)``
PREDICTORS: dict[str, Predictor] = {}


def register_predictor(estimator: str) -> Callable[[Predictor], Predictor]:
    """Decorator: register a new estimator's prediction (see :data:`PREDICTORS`)."""

    def wrap(fn: Predictor) -> Predictor:
        PREDICTORS[estimator] = fn
        return fn

    return wrap


@register_predictor("dim")
def _dim(inp: PredictionInputs) -> tuple[float, float, float]:
    """Section 3.1.1: sampling ``sd^2 (1/N_t + 1/N_c)``; noise ``2 s^2 (1/N_t^2 + 1/N_c^2)`` with
    ``s = B/eps_1`` (``2B/eps_1`` with private arm sizes); each arm's ``s^2`` is clamped after
    ``Lap(q)/N_arm`` noise, ``q = B^2/eps_2`` (``2B^2``). The treated count's own noise (private
    arm sizes) is left out."""
    b, sd = inp.bound, inp.assumptions.sd(inp.bound)
    n = inp.design.n
    nt = min(max(round(inp.assumptions.arm_share * n), 1), n - 1)
    nc = n - nt
    parts = inp.parts()
    mult = 1.0 if inp.arm_sizes_public else 2.0
    s = mult * b / parts[0].epsilon_float
    q = mult * b * b / parts[1].epsilon_float
    sampling = sd * sd * (1.0 / nt + 1.0 / nc)
    noise = 2.0 * s * s * (1.0 / nt**2 + 1.0 / nc**2)
    reported = clamped_mean(sd * sd, q / nt) / nt + clamped_mean(sd * sd, q / nc) / nc + noise
    return sampling, noise, reported


def _counts(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray]:
    """The assumed arm counts per stratum (:func:`balanced_counts` over the assumed occupied
    strata)."""
    a = inp.assumptions
    return balanced_counts(inp.design.n, inp.domain_size, a.arm_share, a.occupied(inp.domain_size))


def _matching_sampling(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Assumed counts, the matching estimator's sampling variance (per stratum
    ``(N_x/N)^2 sd^2 (1/T_x + 1/C_x)``) and ``E V_hat`` (appendix:
    ``1/(2N^2) sum_i (1+L_i)^2 E d_i^2``, ``E d^2 = effect^2 + 2 sd^2``)."""
    n = inp.design.n
    tc, cc = _counts(inp)
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


@register_predictor("smooth_matching")
def _smooth(inp: PredictionInputs) -> tuple[float, float, float]:
    """Algorithm 2: noise ``8 S^2/eps_1^2`` with ``S`` the smooth sensitivity of the assumed
    counts (``E S2_dp = S^2``); reported ``E max(V_hat + Lap(2 S_V/eps_2), 0) + noise``."""
    p_ate, p_var, _ = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    e1 = p_ate.epsilon_float
    s = matching_smooth_sensitivity(
        tc, cc, inp.design.n, inp.bound, smooth_beta(e1, p_ate.delta_float), inp.domain_size
    )
    noise = 8.0 * s * s / (e1 * e1)
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise


@register_predictor("global_matching")
def _global(inp: PredictionInputs) -> tuple[float, float, float]:
    """GlobalDPMatching: noise ``2 (2B/eps_1)^2``; reported as for SmoothDPMatching."""
    p_ate, p_var = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    noise = 2.0 * (2.0 * inp.bound / p_ate.epsilon_float) ** 2
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise


def adjusted_weighting(
    weighting: str,
    n: int,
    domain_size: int,
    epsilon: Number,
    split: Sequence[Number] | None = None,
) -> str:
    """The weighting an adjusted release with these public values uses: ``weighting``, or for
    ``"auto"`` the rule of :func:`dpate_core.mechanisms.adjusted.resolve_weighting` (subclassification when
    ``N / (2 |X|) >= AUTO_RATIO * 2 / eps_n`` and the ratio bias's predicted remainder is small)
    with the count scale and the sums' epsilon computed exactly as the
    release computes it. Public values only: ``N`` is published in the site's report, the rest is
    in the spec."""
    from dpate_core.mechanisms.adjusted import DEFAULT_SPLIT, resolve_weighting
    from dpate_core.statistics import COUNT_SENSITIVITY

    total = PrivacyParams(exact(epsilon, "epsilon"), Fraction(0))
    p_n, p_s, _ = BudgetSplit.of(DEFAULT_SPLIT if split is None else split, 3).apply(total)
    return resolve_weighting(
        weighting,
        int(n),
        max(int(domain_size), 1),
        p_n.laplace_scale(COUNT_SENSITIVITY),
        float(p_s.epsilon),
    )


@register_predictor("adjusted")
def _adjusted(inp: PredictionInputs) -> tuple[float, float, float]:
    """The adjusted release (``dpate_core.mechanisms.adjusted``) with the weighting it would use
    (:func:`adjusted_weighting`): Laplace ``2/eps_n`` on every cell count, ``B/eps_s`` on every
    centred sum, ``B^2/(2 eps_q)`` on every sum of squares (the module's sensitivities in outcome
    units), at the assumed counts and centred arm means. Subclassification:
    :func:`_adjusted_subclassification`; fixed effects: :func:`_adjusted_fixed_effects`. An
    unresolved release (no estimate) counts as the whole range, a 95% half-width of ``B``: the
    reported variance is the one whose normal half-width is the expected half-width,
    ``(p sqrt(v) + (1 - p) B / z)^2`` (:func:`adjusted_resolution` gives ``p`` and ``v``)."""
    sampling, noise, p, v = _adjusted_parts(inp)
    if p <= 0.0 or not math.isfinite(v):
        return sampling, noise, inp.bound * inp.bound / 3.0
    half_b = inp.bound / NormalDist().inv_cdf(0.975)
    return sampling, noise, (p * math.sqrt(v) + (1.0 - p) * half_b) ** 2


def adjusted_resolution(inp: PredictionInputs) -> tuple[float, float]:
    """The probability that the adjusted release resolves an estimate, and the variance it
    reports when it does (what a combiner of resolved sites reads)."""
    _, _, p, v = _adjusted_parts(inp)
    return p, v


def _adjusted_parts(inp: PredictionInputs) -> tuple[float, float, float, float]:
    d = inp.design
    mode = adjusted_weighting(inp.weighting, d.n, inp.domain_size, d.epsilon, d.split)
    if mode == "fixed_effects":
        return _adjusted_fixed_effects(inp)
    return _adjusted_subclassification(inp)


def _laplace_kept(n: np.ndarray, m: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """For true counts ``n`` released as ``n + Lap(b)``: the probability that the noisy count
    reaches ``m``, and the noise's mean given that it does (``E[L | L >= m - n]``)."""
    c = m - n
    below = c <= 0
    tail = 0.5 * np.exp(-np.abs(c) / b)  # P(L >= c) for c > 0; P(L < c) for c <= 0
    p = np.where(below, 1.0 - tail, tail)
    mean = np.where(below, tail * (b - c) / np.maximum(p, 1e-300), c + b)
    return p, mean


def _adjusted_subclassification(inp: PredictionInputs) -> tuple[float, float, float, float]:
    """A stratum is used when both noisy arm counts reach ``m = max(2, 2/eps_n)``: with the
    assumed counts and Laplace count noise, with probability ``p_x`` (the product of the two
    arms' tail probabilities). The estimate averages the used strata's effects over the size of
    the strata used, ``N_used = sum p_x (n_t + n_c)`` in expectation; the noise variance is the
    release's own delta-method formula (``dpate_core.mechanisms.adjusted``), each stratum
    weighted by ``p_x``, with the count noise of ``N_used`` (a share ``alpha`` of left-out
    strata); the sampling part ``sum p_x w_x^2 sd^2 (1/n_t + 1/n_c)`` (the effect assumed common
    to every stratum, so the strata's spread and the left-out part add nothing). With no stratum
    used (probability ``prod (1 - p_x)``) the release is unresolved and counts as the whole range
    (half-width ``B``), as for fixed effects. No stratum with both arms in the assumed counts:
    infinite (the release would never resolve)."""
    from dpate_core.mechanisms.adjusted import THRESHOLD_FACTOR
    from dpate_core.statistics import COUNT_SENSITIVITY

    p_n, p_s, _ = inp.parts()
    b = inp.bound
    scale_n = COUNT_SENSITIVITY / p_n.epsilon_float
    v_n, v_s = 2.0 * scale_n**2, 2.0 * (b / p_s.epsilon_float) ** 2
    tc, cc = _counts(inp)
    both = (tc > 0) & (cc > 0)
    if not both.any():
        return math.inf, math.inf, 0.0, math.inf
    t, c = tc[both].astype(float), cc[both].astype(float)
    m = max(2.0, THRESHOLD_FACTOR * scale_n)
    p_t, _ = _laplace_kept(t, m, scale_n)
    p_c, _ = _laplace_kept(c, m, scale_n)
    p = p_t * p_c
    # an empty arm's noisy count reaches m with P(Lap >= m): such strata are used too, rarely
    expected_used = float(p.sum())
    alpha = 1.0 - expected_used / inp.domain_size
    n_used = max(float((p * (t + c)).sum()), m)
    w = (t + c) / n_used
    tau = inp.assumptions.effect
    centre = inp.assumptions.mean(b) - b / 2.0
    m_t, m_c = centre + tau / 2.0, centre - tau / 2.0
    diff = (m_t - m_c - alpha * tau) / n_used
    d_nt, d_nc = diff - w * m_t / t, diff + w * m_c / c
    per_noise = v_s * w**2 * (1 / t**2 + 1 / c**2) + v_n * (d_nt**2 + d_nc**2)
    left_cells = 2.0 * (inp.domain_size - expected_used)
    noise = float((p * per_noise).sum()) + left_cells * v_n * ((1.0 - alpha) * tau / n_used) ** 2
    sd2 = inp.assumptions.sd(b) ** 2
    sampling = float((p * w**2 * sd2 * (1 / t + 1 / c)).sum())
    return sampling, noise, 1.0 - float(np.prod(1.0 - p)), sampling + noise


def _adjusted_fixed_effects(inp: PredictionInputs) -> tuple[float, float, float, float]:
    """``tau = A / D`` with ``A = sum (S_t n_c - S_c n_t)``, ``D = sum n_t n_c`` over every stratum
    (docs/adjusted.md). With count noise variance ``v_n = 2 (2/eps_n)^2``, sum noise variance
    ``v_s = 2 (B/eps_s)^2`` and centred arm means ``m_t = mu + effect/2``, ``m_c = mu -
    effect/2`` (``mu`` the assumed outcome mean less ``B/2``)
    (``S_t - tau n_t = n_t m_c``, ``S_c + tau n_c = n_c m_t``), the release's own noise variance
    at the assumed counts (every one of the ``|X|`` strata, empty or not, is noised): ``sum [v_n
    (n_t^2 m_c^2 + n_c^2 m_t^2) + v_s (n_t^2 + n_c^2) + 2 v_s v_n + tau^2 v_n^2] / D^2``,
    ``Var(D) = sum v_n (n_t^2 + n_c^2) + |X| v_n^2``. Sampling (the release's sandwich with the
    effect common to every stratum): ``sum n_t n_c (n_c + n_t) sd^2 / D^2`` (``sd`` the assumed
    outcome sd within a cell). The release is unresolved (no estimate: it says no more than the
    range ``[-B, B]``, a 95% half-width of ``B``) when its noisy ``D`` is at most ``RESOLVE_Z``
    sds: with probability ``1 - p``, ``p = Phi(D / sd(D) - RESOLVE_Z)``; the reported variance
    is the one whose normal half-width is the expected half-width, ``(p sqrt(v) + (1 - p) B /
    z)^2`` (``z = 1.96``), ``v`` at the resolved releases' mean ``D_hat``."""
    from dpate_core.mechanisms.adjusted import RESOLVE_Z
    from dpate_core.statistics import COUNT_SENSITIVITY

    p_n, p_s, _ = inp.parts()
    b = inp.bound
    v_n = 2.0 * (COUNT_SENSITIVITY / p_n.epsilon_float) ** 2
    v_s = 2.0 * (b / p_s.epsilon_float) ** 2
    tc, cc = _counts(inp)
    t, c = tc.astype(float), cc.astype(float)
    big_d = float((t * c).sum())
    var_d = float((v_n * (t * t + c * c)).sum()) + t.size * v_n * v_n
    if big_d <= 0:
        return math.inf, math.inf, 0.0, math.inf
    tau = inp.assumptions.effect
    centre = inp.assumptions.mean(b) - b / 2.0
    m_t, m_c = centre + tau / 2.0, centre - tau / 2.0
    noise = float(
        (
            v_n * (t * t * m_c * m_c + c * c * m_t * m_t)
            + v_s * (t * t + c * c)
            + 2.0 * v_s * v_n
            + tau * tau * v_n * v_n
        ).sum()
    )
    sd2 = inp.assumptions.sd(b) ** 2
    sampling_num = float((t * c * (t + c)).sum()) * sd2
    sd_d = math.sqrt(var_d)
    alpha = RESOLVE_Z - big_d / sd_d
    p = 1.0 - NormalDist().cdf(alpha)
    # a released variance divides by the noisy D, which is >= RESOLVE_Z sd(D) when resolved:
    # its mean given that (a normal tail), so a budget near the edge is not overstated
    d_kept = big_d + sd_d * NormalDist().pdf(alpha) / max(p, 1e-300)
    return sampling_num / big_d**2, noise / big_d**2, p, (noise + sampling_num) / d_kept**2
