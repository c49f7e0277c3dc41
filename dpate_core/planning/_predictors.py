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

__all__ = ["PREDICTORS", "Predictor", "adjusted_weighting", "register_predictor"]


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


def _matching_sampling(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Assumed counts, the matching estimator's sampling variance (per stratum
    ``(N_x/N)^2 sd^2 (1/T_x + 1/C_x)``) and ``E V_hat`` (appendix:
    ``1/(2N^2) sum_i (1+L_i)^2 E d_i^2``, ``E d^2 = effect^2 + 2 sd^2``)."""
    n = inp.design.n
    tc, cc = balanced_counts(n, inp.domain_size, inp.assumptions.arm_share)
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
    units), at the assumed counts and centred arm means ``+-effect/2`` (arm means
    ``B/2 +- effect/2``). Subclassification: :func:`_adjusted_subclassification`; fixed effects:
    :func:`_adjusted_fixed_effects`."""
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


def _positive_square(mu: float, sd: float) -> float:
    """``E[max(U, 0)^2]`` for ``U ~ N(mu, sd^2)``."""
    if sd <= 0:
        return max(mu, 0.0) ** 2
    a = mu / sd
    return (mu * mu + sd * sd) * NormalDist().cdf(a) + mu * sd * NormalDist().pdf(a)


def _adjusted_subclassification(inp: PredictionInputs) -> tuple[float, float, float]:
    """A stratum is used when both noisy arm counts reach ``m = max(2, 2/eps_n)``: with the
    assumed counts ``n`` and Laplace count noise, with probability ``p_x`` (the product of the two
    arms' tail probabilities); a used stratum's noisy size is, on average, its size plus the
    noise's mean given that it reached ``m`` (the selection the release makes). Noise variance:
    the release's own delta-method formula, each stratum weighted by ``p_x``; the reported
    sampling part clamps each cell's ``s^2`` after ``Lap(B^2/(2 eps_q))/n_cell``; the strata left
    out add the release's unestimated variance ``B^2 E[max(u, 0)^2] / 3``, ``u`` the left-out
    strata's share of the noisy counts, one minus the used strata's (normal, with the mean and
    variance of the ``p_x`` draws and of the left-out strata's count noise; the noise of the
    total count cancels in that share). No stratum with both arms in the assumed counts:
    infinite (the release would estimate 0 from nothing)."""
    from dpate_core.mechanisms.adjusted import THRESHOLD_FACTOR
    from dpate_core.statistics import COUNT_SENSITIVITY

    p_n, p_s, p_q = inp.parts()
    b = inp.bound
    scale_n = COUNT_SENSITIVITY / p_n.epsilon_float
    b_s = b / p_s.epsilon_float
    b_q = b * b / 2.0 / p_q.epsilon_float
    n = inp.design.n
    tc, cc = balanced_counts(n, inp.domain_size, inp.assumptions.arm_share)
    both = (tc > 0) & (cc > 0)
    if not both.any():
        return math.inf, math.inf, math.inf
    t, c = tc[both].astype(float), cc[both].astype(float)
    m = max(2.0, THRESHOLD_FACTOR * scale_n)
    p_t, g_t = _laplace_kept(t, m, scale_n)
    p_c, g_c = _laplace_kept(c, m, scale_n)
    p = p_t * p_c
    w = (t + c) / n
    sd2 = inp.assumptions.sd(b) ** 2
    m_t, m_c = inp.assumptions.effect / 2.0, -inp.assumptions.effect / 2.0
    diff = (m_t - m_c) / n
    d_nt, d_nc = diff - w * m_t / t, diff + w * m_c / c
    per_noise = 2.0 * b_s**2 * w**2 * (1 / t**2 + 1 / c**2) + 2.0 * scale_n**2 * (d_nt**2 + d_nc**2)
    noise = float((p * per_noise).sum())
    sampling = float((p * w**2 * sd2 * (1 / t + 1 / c)).sum())
    clamp = np.vectorize(clamped_mean)
    reported_sampling = float(
        (p * w**2 * (clamp(sd2, b_q / t) / t + clamp(sd2, b_q / c) / c)).sum()
    )
    used_w = (t + c + g_t + g_c) / n
    # u = 1 - (used strata's share of the noisy counts): E[max(u, 0)^2] for a normal u with the
    # mean and variance of the p_x draws and of the left-out strata's count noise
    # the release clips each noisy count at 0, which adds (b/2) e^(-n/b) = E[max(n + L, 0)] - n
    # on average to a cell's count, so to the total it divides by (mostly in left-out strata)
    cells = np.concatenate([tc, cc]).astype(float)
    total = n + float((0.5 * scale_n * np.exp(-cells / scale_n)).sum())
    mu = 1.0 - float((p * used_w).sum()) * n / total
    var_u = float((p * (1.0 - p) * used_w**2 + (1.0 - p) * 2.0 * (2.0 * scale_n**2) / n**2).sum())
    unestimated = b * b * _positive_square(mu, math.sqrt(var_u)) / 3.0
    return sampling, noise, reported_sampling + noise + unestimated


def _adjusted_fixed_effects(inp: PredictionInputs) -> tuple[float, float, float]:
    """``tau = A / D`` with ``A = sum (S_t n_c - S_c n_t)``, ``D = sum n_t n_c`` over every stratum
    (docs/adjusted.md). With count noise variance ``v_n = 2 (2/eps_n)^2``, sum noise variance
    ``v_s = 2 (B/eps_s)^2`` and centred means ``m_t = effect/2``, ``m_c = -effect/2``
    (``S_t - tau n_t = n_t m_c``, ``S_c + tau n_c = n_c m_t``), the release's own noise variance
    at the assumed counts: ``sum [v_n (n_t^2 m_c^2 + n_c^2 m_t^2) + v_s (n_t^2 + n_c^2) + 2 v_s v_n
    + tau^2 v_n^2] / D^2 (1 + 3 Var(D) / D^2)``, ``Var(D) = sum v_n (n_t^2 + n_c^2) + |X| v_n^2``.
    Sampling: ``sum n_t n_c (n_c + n_t) sd^2 / D^2`` (``sd`` the assumed outcome sd within a
    cell; the release pools each arm's within-cell variance, bounded by its total variance over
    the strata). The release is unresolved (no estimate: it says no more than the range
    ``[-B, B]``, a 95% half-width of ``B``) when its noisy ``D`` is at most ``RESOLVE_Z`` sds:
    with probability ``1 - p``, ``p = Phi(D / sd(D) - RESOLVE_Z)``; the reported variance is the
    one whose normal half-width is the expected half-width, ``(p sqrt(v) + (1 - p) B / z)^2``
    (``z = 1.96``)."""
    from dpate_core.mechanisms.adjusted import RESOLVE_Z
    from dpate_core.statistics import COUNT_SENSITIVITY

    p_n, p_s, _ = inp.parts()
    b = inp.bound
    v_n = 2.0 * (COUNT_SENSITIVITY / p_n.epsilon_float) ** 2
    v_s = 2.0 * (b / p_s.epsilon_float) ** 2
    tc, cc = balanced_counts(inp.design.n, inp.domain_size, inp.assumptions.arm_share)
    t, c = tc.astype(float), cc.astype(float)
    big_d = float((t * c).sum())
    var_d = float((v_n * (t * t + c * c)).sum()) + t.size * v_n * v_n
    if big_d <= 0:
        return math.inf, math.inf, b * b / 3.0
    tau = inp.assumptions.effect
    m_t, m_c = tau / 2.0, -tau / 2.0
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

    def at(d: float) -> float:
        return (noise * (1.0 + 3.0 * var_d / d**2) + sampling_num) / d**2

    # an unresolved release counts as the whole range: half-width B
    reported = (p * math.sqrt(at(d_kept)) + (1.0 - p) * b / NormalDist().inv_cdf(0.975)) ** 2
    noise = noise / big_d**2 * (1.0 + 3.0 * var_d / big_d**2)
    return sampling_num / big_d**2, noise, reported
