"""Know before you spend: predicted interval widths of a study from public inputs only.

Inputs: each site's ``N``, the strata domain ``|X|``, the outcome bound ``B``, the per-site budget
``(epsilon, delta)`` and its split, the estimator and the aggregator. No record is read and nothing
is spent. Where a prediction needs a feature of the data, it is an explicit :class:`Assumptions`
field, listed in every :class:`StudyPlan` (``assumptions``):

* the treated share of each site (default 1/2) and strata equally filled (each arm's records spread
  as evenly as possible over the ``|X|`` strata);
* the outcome's standard deviation within an arm and stratum (default ``B/2``, the largest any
  outcome in ``[0, B]`` can have: a worst case);
* the effect, for the matching variance estimate's ``(Yhat(1) - Yhat(0))^2`` (default 0).

Predictions per site (one function per estimator in :data:`PREDICTORS`; add one for a new
estimator): the sampling variance, the DP noise variance, the expected *reported* variance (the
release clamps a noisy sampling part at 0, which inflates it: ``E max(v + Lap(b), 0) = v +
(b/2) e^(-v/b)``) and the normal interval's half-width ``z sqrt(E reported variance)``. For the
matching estimators the smooth sensitivities are computed by :mod:`dpate_core.sensitivity` on the
assumed count vector (public, given the assumption). The adjusted estimator is predicted for the
weighting the release would use (the spec's ``adjusted_weighting``, ``"auto"`` resolved by the
release's own public rule: :func:`adjusted_weighting`). The combined prediction runs the spec's
combiner (:func:`dpate_core.aggregation.aggregate`) on the predicted variances: for MVAgg that is
its predicted choice of sites (in a release the choice is made on noisy variances).

``docs/inference.md`` describes the method and its accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.aggregation import AggregateResult, NoUsableSiteError, aggregate
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, exact, to_float
from dpate_core.sensitivity import (
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)

__all__ = [
    "CANDIDATE_SPLITS",
    "PREDICTORS",
    "Assumptions",
    "Recommendation",
    "SiteDesign",
    "SitePrediction",
    "StudyPlan",
    "adjusted_weighting",
    "balanced_counts",
    "clamped_mean",
    "plan_study",
    "predict_site",
    "register_predictor",
]


@dataclass(frozen=True)
class Assumptions:
    """What a prediction assumes about data it never sees. ``outcome_sd=None``: ``B/2``."""

    arm_share: float = 0.5
    outcome_sd: float | None = None
    effect: float = 0.0

    def sd(self, bound: float) -> float:
        return bound / 2.0 if self.outcome_sd is None else float(self.outcome_sd)

    def describe(self, bound: float) -> list[str]:
        sd = (
            f"outcome sd within arm and stratum {self.sd(bound):g} (B/2: the worst case for "
            f"outcomes in [0, B]; give --outcome-sd for a better guess)"
            if self.outcome_sd is None
            else f"outcome sd within arm and stratum {self.sd(bound):g} (user-supplied)"
        )
        return [
            f"treated share {self.arm_share:g} at every site",
            "each arm's records spread evenly over the |X| strata",
            sd,
            f"effect {self.effect:g} (enters the matching variance estimate, and the adjusted "
            f"estimator's count noise through arm means B/2 +- effect/2)",
        ]


@dataclass(frozen=True)
class SiteDesign:
    """The public design of one site's release."""

    site_id: str
    n: int
    epsilon: Fraction
    delta: Fraction
    split: tuple[Fraction, ...]

    @classmethod
    def of(
        cls,
        site_id: str,
        n: int,
        epsilon: Number,
        delta: Number = 0,
        split: Sequence[Number] | None = None,
        parts: int = 2,
    ) -> SiteDesign:
        if int(n) < 2:
            raise ValueError(f"site {site_id!r}: N ({n}) must be at least 2")
        return cls(
            site_id,
            int(n),
            exact(epsilon, "epsilon"),
            exact(delta, "delta"),
            BudgetSplit.of(split, parts).shares,
        )


@dataclass(frozen=True)
class SitePrediction:
    """Predicted variances and the 95% normal interval of one site (``half_width``)."""

    site_id: str
    n: int
    epsilon: Fraction
    delta: Fraction
    split: tuple[Fraction, ...]
    estimator: str
    sampling_variance: float
    noise_variance: float
    reported_variance: float
    half_width: float
    #: the adjusted estimator's weighting this release would use (None for the others)
    weighting: str | None = None

    @property
    def rmse(self) -> float:
        """Predicted standard error of the estimate: ``sqrt(sampling + noise variance)``."""
        return math.sqrt(self.sampling_variance + self.noise_variance)

    @property
    def width(self) -> float:
        return 2.0 * self.half_width

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["epsilon"], d["delta"] = str(self.epsilon), str(self.delta)
        d["split"] = [str(s) for s in self.split]
        d["rmse"], d["width"] = self.rmse, self.width
        return d


@dataclass(frozen=True)
class Recommendation:
    estimator: str
    split: tuple[Fraction, ...]
    combined_width: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "split": [str(s) for s in self.split],
            "combined_width": self.combined_width,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class StudyPlan:
    """A study's predicted intervals, what it would take to reach a target, and warnings."""

    estimator: str
    aggregator: str
    bound: float
    level: float
    sites: tuple[SitePrediction, ...]
    combined_variance: float
    combined_half_width: float
    used: tuple[str, ...]
    target_width: float | None
    epsilon_needed: dict[str, Fraction] | None
    recommendation: Recommendation | None
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def combined_width(self) -> float:
        return 2.0 * self.combined_half_width

    def as_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "aggregator": self.aggregator,
            "bound": self.bound,
            "level": self.level,
            "sites": [s.as_dict() for s in self.sites],
            "combined": {
                "variance": self.combined_variance,
                "half_width": self.combined_half_width,
                "width": self.combined_width,
                "used": list(self.used),
            },
            "target_width": self.target_width,
            "epsilon_needed": None
            if self.epsilon_needed is None
            else {k: str(v) for k, v in self.epsilon_needed.items()},
            "recommendation": None
            if self.recommendation is None
            else self.recommendation.as_dict(),
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------
# closed forms


def clamped_mean(v: float, b: float) -> float:
    """``E max(v + L, 0)`` for ``L ~ Lap(b)``: ``v + (b/2) e^(-v/b)`` if ``v >= 0``, else
    ``(b/2) e^(v/b)``; ``max(v, 0)`` when ``b = 0``."""
    if b <= 0:
        return max(v, 0.0)
    if v >= 0:
        return v + 0.5 * b * math.exp(-v / b)
    return 0.5 * b * math.exp(v / b)


def balanced_counts(n: int, domain_size: int, arm_share: float) -> tuple[np.ndarray, np.ndarray]:
    """The assumed ``(|T_x|, |C_x|)``: ``round(share N)`` treated and the rest control, each
    spread as evenly as possible over the ``|X|`` strata (public given the assumption)."""
    if not 0 < arm_share < 1:
        raise ValueError(f"treated share ({arm_share}) must lie strictly between 0 and 1")
    k = int(domain_size)
    n_t = min(max(round(arm_share * n), 1), n - 1)
    n_c = n - n_t

    def spread(m: int) -> np.ndarray:
        return np.full(k, m // k, dtype=np.int64) + (np.arange(k) < m % k)

    return spread(n_t), spread(n_c)


def _eps(p: PrivacyParams) -> float:
    return to_float(p.epsilon, round_up=False)


def _delta(p: PrivacyParams) -> float:
    return to_float(p.delta, round_up=False)


@dataclass(frozen=True)
class _Inputs:
    design: SiteDesign
    domain_size: int
    bound: float
    arm_sizes_public: bool
    assumptions: Assumptions
    weighting: str = "auto"

    def parts(self) -> tuple[PrivacyParams, ...]:
        total = PrivacyParams(self.design.epsilon, self.design.delta)
        return BudgetSplit(self.design.split).apply(total)


Predictor = Callable[[_Inputs], tuple[float, float, float]]

#: estimator -> ``fn(inputs) -> (sampling variance, noise variance, expected reported variance)``
PREDICTORS: dict[str, Predictor] = {}


def register_predictor(estimator: str) -> Callable[[Predictor], Predictor]:
    """Decorator: register a new estimator's prediction (see :data:`PREDICTORS`)."""

    def wrap(fn: Predictor) -> Predictor:
        PREDICTORS[estimator] = fn
        return fn

    return wrap


@register_predictor("dim")
def _dim(inp: _Inputs) -> tuple[float, float, float]:
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
    s = mult * b / _eps(parts[0])
    q = mult * b * b / _eps(parts[1])
    sampling = sd * sd * (1.0 / nt + 1.0 / nc)
    noise = 2.0 * s * s * (1.0 / nt**2 + 1.0 / nc**2)
    reported = clamped_mean(sd * sd, q / nt) / nt + clamped_mean(sd * sd, q / nc) / nc + noise
    return sampling, noise, reported


def _matching_sampling(inp: _Inputs) -> tuple[np.ndarray, np.ndarray, float, float]:
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
    inp: _Inputs, tc: npt.ArrayLike, cc: npt.ArrayLike, p_var: PrivacyParams
) -> float:
    e2 = _eps(p_var)
    beta2 = smooth_beta(e2, _delta(p_var))
    s_v = matching_variance_smooth_sensitivity(
        tc, cc, inp.design.n, inp.bound, beta2, inp.domain_size
    )
    return 2.0 * s_v / e2


@register_predictor("smooth_matching")
def _smooth(inp: _Inputs) -> tuple[float, float, float]:
    """Algorithm 2: noise ``8 S^2/eps_1^2`` with ``S`` the smooth sensitivity of the assumed
    counts (``E S2_dp = S^2``); reported ``E max(V_hat + Lap(2 S_V/eps_2), 0) + noise``."""
    p_ate, p_var, _ = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    e1 = _eps(p_ate)
    s = matching_smooth_sensitivity(
        tc, cc, inp.design.n, inp.bound, smooth_beta(e1, _delta(p_ate)), inp.domain_size
    )
    noise = 8.0 * s * s / (e1 * e1)
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise


@register_predictor("global_matching")
def _global(inp: _Inputs) -> tuple[float, float, float]:
    """GlobalDPMatching: noise ``2 (2B/eps_1)^2``; reported as for SmoothDPMatching."""
    p_ate, p_var = inp.parts()
    tc, cc, sampling, v_hat = _matching_sampling(inp)
    noise = 2.0 * (2.0 * inp.bound / _eps(p_ate)) ** 2
    return sampling, noise, clamped_mean(v_hat, _variance_scale(inp, tc, cc, p_var)) + noise


def adjusted_weighting(
    weighting: str,
    n: int,
    domain_size: int,
    epsilon: Number,
    split: Sequence[Number] | None = None,
) -> str:
    """The weighting an adjusted release with these public values uses: ``weighting``, or for
    ``"auto"`` the rule of :func:`dpate_core.adjusted.resolve_weighting` (subclassification when
    ``N / (2 |X|) >= AUTO_RATIO * 2 / eps_n``) with the count scale computed exactly as the
    release computes it. Public values only: ``N`` is published in the site's report, the rest is
    in the spec."""
    from dpate_core.adjusted import COUNT_SENSITIVITY, DEFAULT_SPLIT, resolve_weighting
    from dpate_core.release import _scale

    total = PrivacyParams(exact(epsilon, "epsilon"), Fraction(0))
    p_n = BudgetSplit.of(DEFAULT_SPLIT if split is None else split, 3).apply(total)[0]
    return resolve_weighting(
        weighting, int(n), max(int(domain_size), 1), _scale(COUNT_SENSITIVITY, p_n)
    )


@register_predictor("adjusted")
def _adjusted(inp: _Inputs) -> tuple[float, float, float]:
    """The adjusted release (``dpate_core.adjusted``) with the weighting it would use
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


def _adjusted_subclassification(inp: _Inputs) -> tuple[float, float, float]:
    """A stratum is used when both noisy arm counts reach ``m = max(2, 2/eps_n)``: with the
    assumed counts ``n`` and Laplace count noise, with probability ``p_x`` (the product of the two
    arms' tail probabilities); a used stratum's noisy size is, on average, its size plus the
    noise's mean given that it reached ``m`` (the selection the release makes). Noise variance:
    the release's own delta-method formula, each stratum weighted by ``p_x``; the reported
    sampling part clamps each cell's ``s^2`` after ``Lap(B^2/(2 eps_q))/n_cell``; the strata left
    out add the release's unestimated variance ``B^2 E[max(u, 0)^2] / 3``, ``u`` one minus the
    used strata's noisy weight (normal, with the mean and variance of the ``p_x`` draws and of the
    counts' noise). No stratum with both arms in the assumed counts: infinite (the release would
    estimate 0 from nothing)."""
    from dpate_core.adjusted import COUNT_SENSITIVITY, THRESHOLD_FACTOR

    p_n, p_s, p_q = inp.parts()
    b = inp.bound
    scale_n = COUNT_SENSITIVITY / _eps(p_n)
    b_s = b / _eps(p_s)
    b_q = b * b / 2.0 / _eps(p_q)
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
    # u = 1 - (used strata's noisy weight), clipped at 0 by the release: E[max(u, 0)^2] for a
    # normal u with the mean and variance of the p_x draws and of the counts' noise
    mu = 1.0 - float((p * used_w).sum())
    var_u = float((p * (1.0 - p) * used_w**2 + p * 2.0 * (2.0 * scale_n**2) / n**2).sum())
    unestimated = b * b * _positive_square(mu, math.sqrt(var_u)) / 3.0
    return sampling, noise, reported_sampling + noise + unestimated


def _adjusted_fixed_effects(inp: _Inputs) -> tuple[float, float, float]:
    """``tau = A / D`` with ``A = sum (S_t n_c - S_c n_t)``, ``D = sum n_t n_c`` over every stratum
    (docs/adjusted.md). With count noise variance ``v_n = 2 (2/eps_n)^2``, sum noise variance
    ``v_s = 2 (B/eps_s)^2`` and centred means ``m_t = effect/2``, ``m_c = -effect/2``
    (``S_t - tau n_t = n_t m_c``, ``S_c + tau n_c = n_c m_t``), the release's own noise variance
    at the assumed counts: ``sum [v_n (n_t^2 m_c^2 + n_c^2 m_t^2) + v_s (n_t^2 + n_c^2) + 2 v_s v_n
    + tau^2 v_n^2] / D^2 (1 + 3 Var(D) / D^2)``, ``Var(D) = sum v_n (n_t^2 + n_c^2) + |X| v_n^2``.
    Sampling: ``sum n_t n_c (n_c + n_t) sd^2 / D^2`` (the release bounds each arm's variance by its
    total variance over the strata, so ``sd`` stands for that). The release is uninformative
    (variance ``B^2/3``) when its noisy ``D`` is at most ``RESOLVE_Z`` sds: with probability
    ``1 - p``, ``p = Phi(D / sd(D) - RESOLVE_Z)``; the reported variance is the one whose normal
    half-width is the expected half-width, ``(p sqrt(v) + (1 - p) sqrt(B^2/3))^2``."""
    from dpate_core.adjusted import COUNT_SENSITIVITY, RESOLVE_Z

    p_n, p_s, _ = inp.parts()
    b = inp.bound
    v_n = 2.0 * (COUNT_SENSITIVITY / _eps(p_n)) ** 2
    v_s = 2.0 * (b / _eps(p_s)) ** 2
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

    reported = (p * math.sqrt(at(d_kept)) + (1.0 - p) * b / math.sqrt(3.0)) ** 2
    noise = noise / big_d**2 * (1.0 + 3.0 * var_d / big_d**2)
    return sampling_num / big_d**2, noise, reported


# ---------------------------------------------------------------------------------------------
# sites and studies

_Z = {0.95: NormalDist().inv_cdf(0.975)}


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    return _Z.get(level) or NormalDist().inv_cdf(0.5 + level / 2.0)


def _predictor(estimator: str) -> Predictor:
    try:
        return PREDICTORS[estimator]
    except KeyError:
        raise ValueError(
            f"no prediction for estimator {estimator!r} (known: {sorted(PREDICTORS)}): register "
            f"one with dpate_core.planning.register_predictor"
        ) from None


def predict_site(
    estimator: str,
    design: SiteDesign,
    *,
    domain_size: int,
    bound: float,
    arm_sizes_public: bool = True,
    assumptions: Assumptions = Assumptions(),
    level: float = 0.95,
    weighting: str = "auto",
) -> SitePrediction:
    """One site's predicted variances and normal-interval half-width (public inputs only).
    ``weighting``: the adjusted estimator's (the spec's ``adjusted_weighting``)."""
    predictor = _predictor(estimator)
    if _needs_delta(estimator) and design.delta <= 0:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} needs delta > 0 (e.g. '1e-5')"
        )
    parts = _parts(estimator, arm_sizes_public)
    if len(design.split) != parts:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} splits its budget into {parts} "
            f"parts, but the split has {len(design.split)} shares: give exactly {parts}"
        )
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    inp = _Inputs(
        design, max(int(domain_size), 1), float(bound), arm_sizes_public, assumptions, weighting
    )
    sampling, noise, reported = predictor(inp)
    mode = None
    if estimator == "adjusted":
        mode = adjusted_weighting(
            weighting, design.n, inp.domain_size, design.epsilon, design.split
        )
    return SitePrediction(
        site_id=design.site_id,
        n=design.n,
        epsilon=design.epsilon,
        delta=design.delta,
        split=design.split,
        estimator=estimator,
        sampling_variance=sampling,
        noise_variance=noise,
        reported_variance=reported,
        half_width=_z(level) * math.sqrt(reported),
        weighting=mode,
    )


def _combine(aggregator: str, preds: Sequence[SitePrediction]) -> AggregateResult:
    return aggregate(
        aggregator,
        np.zeros(len(preds)),
        [p.n for p in preds],
        [p.reported_variance for p in preds],
    )


#: splits tried for a recommendation (fractions for ATE, variance[, ln S / treated count]); the
#: first is the even split. SmoothDPMatching's come from docs/inference.md ("budget split").
CANDIDATE_SPLITS: dict[tuple[str, int], tuple[tuple[Fraction, ...], ...]] = {
    ("dim", 2): tuple(
        (Fraction(a), 1 - Fraction(a))
        for a in (Fraction(1, 2), Fraction(7, 10), Fraction(4, 5), Fraction(9, 10))
    ),
    ("dim", 3): (
        (Fraction(1, 3),) * 3,
        (Fraction(9, 10), Fraction(1, 20), Fraction(1, 20)),
        (Fraction(7, 10), Fraction(3, 20), Fraction(3, 20)),
    ),
    ("smooth_matching", 3): (
        (Fraction(1, 3),) * 3,
        (Fraction(11, 20), Fraction(3, 20), Fraction(3, 10)),
        (Fraction(7, 10), Fraction(1, 20), Fraction(1, 4)),
    ),
    ("global_matching", 2): tuple(
        (Fraction(a), 1 - Fraction(a)) for a in (Fraction(1, 2), Fraction(4, 5), Fraction(9, 10))
    ),
    ("adjusted", 3): ((Fraction(1, 3),) * 3, (Fraction(1, 4), Fraction(13, 20), Fraction(1, 10))),
}


def _valid_estimators(design: str) -> tuple[str, ...]:
    """Estimators the registry allows for ``design`` (``dpate_core.registry``)."""
    from dpate_core.registry import ESTIMATORS

    return tuple(name for name, e in ESTIMATORS.items() if design in e.designs)


def _parts(estimator: str, arm_sizes_public: bool) -> int:
    from dpate_core.registry import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    return 2 if e is None else e.n_parts(arm_sizes_public)


def _needs_delta(estimator: str) -> bool:
    from dpate_core.registry import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    return e is not None and not e.pure


def _default_split(estimator: str, arm_sizes_public: bool) -> tuple[Fraction, ...]:
    from dpate_core.registry import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    parts = _parts(estimator, arm_sizes_public)
    return (e.default_split(arm_sizes_public) if e else BudgetSplit.even(parts)).shares


def plan_study(
    estimator: str,
    aggregator: str,
    designs: Sequence[SiteDesign],
    *,
    domain_size: int,
    bound: float,
    design: str = "observational",
    arm_sizes_public: bool = True,
    assumptions: Assumptions = Assumptions(),
    target_width: float | None = None,
    level: float = 0.95,
    recommend: bool = True,
    weighting: str = "auto",
) -> StudyPlan:
    """Predicted site and combined intervals; with ``target_width`` (the full width of the
    combined interval) the per-site epsilon that reaches it (every site's epsilon times one
    common factor, splits kept); a recommendation of estimator and split among those valid for the
    ``design``; and warnings when the study cannot answer its question at its budget.
    ``weighting``: the adjusted estimator's (the spec's ``adjusted_weighting``); the weighting
    each site would use is in its prediction and, for the adjusted estimator, in the notes."""
    if not designs:
        raise ValueError("a plan needs at least one site")
    if target_width is not None and not (target_width > 0 and math.isfinite(target_width)):
        raise ValueError(f"target width ({target_width}) must be positive and finite")

    def predict(est: str, ds: Sequence[SiteDesign]) -> list[SitePrediction]:
        return [
            predict_site(
                est,
                d,
                domain_size=domain_size,
                bound=bound,
                arm_sizes_public=arm_sizes_public,
                assumptions=assumptions,
                level=level,
                weighting=weighting,
            )
            for d in ds
        ]

    preds = predict(estimator, designs)
    z = _z(level)
    try:
        res = _combine(aggregator, preds)
        variance, used = float(res.variance), tuple(preds[j].site_id for j in res.used)
    except NoUsableSiteError:  # every site predicted without a usable stratum
        variance, used = math.inf, ()
    half = z * math.sqrt(variance)
    warnings: list[str] = []
    notes: list[str] = []
    for p in preds:
        if p.width >= 2.0 * bound:
            warnings.append(
                f"site {p.site_id}: predicted interval width {p.width:.3g} >= the outcome range "
                f"2B = {2 * bound:g}: uninformative at this budget on its own"
            )
    if 2.0 * half >= 2.0 * bound:
        warnings.append(
            f"the combined interval (predicted width {2 * half:.3g}) is at least as wide as the "
            f"outcome range 2B = {2 * bound:g}: the study cannot answer its question at this "
            f"budget; raise epsilon, add records, or narrow B"
        )
    if estimator == "adjusted":
        notes.append(
            "adjusted weighting (adjusted_weighting = "
            + f"{weighting!r}): "
            + ", ".join(f"{p.site_id} {p.weighting}" for p in preds)
            + " (docs/adjusted.md: subclassification targets Algorithm 1's estimand, fixed "
            "effects the overlap-weighted average of the stratum effects)"
        )
    if len(used) < len(preds) and aggregator == "mvagg":
        notes.append(
            f"MVAgg is predicted to use {', '.join(used)} only (on noisy variances its choice "
            f"varies between releases; docs/inference.md)"
        )

    eps_needed = None
    if target_width is not None:
        if 2.0 * half > target_width:
            warnings.append(
                f"the combined interval (predicted width {2 * half:.3g}) is wider than the target "
                f"{target_width:g}"
            )

        def width_of(ds: Sequence[SiteDesign]) -> float:
            try:
                return 2.0 * z * math.sqrt(_combine(aggregator, predict(estimator, ds)).variance)
            except NoUsableSiteError:
                return math.inf

        factor = _factor_for_width(width_of, designs, target_width)
        if factor is None:
            warnings.append(
                f"no epsilon reaches the target width {target_width:g}: the sampling variance "
                f"alone (at the assumed outcome sd) is too large; add records"
            )
        else:
            eps_needed = {d.site_id: _round_up(d.epsilon * factor) for d in designs}

    recommendation = None
    if recommend:
        recommendation = _recommend(design, designs, aggregator, arm_sizes_public, predict, level)
    return StudyPlan(
        estimator=estimator,
        aggregator=aggregator,
        bound=float(bound),
        level=level,
        sites=tuple(preds),
        combined_variance=variance,
        combined_half_width=half,
        used=used,
        target_width=target_width,
        epsilon_needed=eps_needed,
        recommendation=recommendation,
        warnings=tuple(warnings),
        assumptions=tuple(assumptions.describe(bound)),
        notes=tuple(notes),
    )


def _round_up(value: Fraction, digits: int = 3) -> Fraction:
    """``value`` rounded up to ``digits`` significant decimal digits (a budget to ask for)."""
    if value <= 0:
        return value
    e = math.floor(math.log10(value)) - (digits - 1)
    q = Fraction(10) ** e
    return math.ceil(value / q) * q


def _scaled(designs: Sequence[SiteDesign], factor: Fraction) -> list[SiteDesign]:
    return [replace(d, epsilon=d.epsilon * factor) for d in designs]


def _factor_for_width(
    width_of: Callable[[Sequence[SiteDesign]], float],
    designs: Sequence[SiteDesign],
    target: float,
) -> Fraction | None:
    """The smallest common factor on every site's epsilon (bisection in log scale, 40 steps)
    whose predicted combined width is at most ``target``; None if even 10^4 times fails."""
    lo, hi = -3.0 * math.log(10), 4.0 * math.log(10)

    def ok(log_f: float) -> bool:
        f = Fraction(math.exp(log_f)).limit_denominator(10**9)
        return bool(width_of(_scaled(designs, f)) <= target)

    if not ok(hi):
        return None
    if ok(lo):
        return Fraction(math.exp(lo)).limit_denominator(10**9)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return Fraction(math.exp(hi)).limit_denominator(10**9)


def _recommend(
    design: str,
    designs: Sequence[SiteDesign],
    aggregator: str,
    arm_sizes_public: bool,
    predict: Callable[[str, Sequence[SiteDesign]], list[SitePrediction]],
    level: float,
) -> Recommendation | None:
    """The estimator and split with the narrowest predicted combined interval; ``predict``: the
    site predictions of an estimator (:func:`plan_study`'s, so both predict alike)."""
    best: tuple[float, str, tuple[Fraction, ...]] | None = None
    valid = _valid_estimators(design)
    for est in valid:
        if est not in PREDICTORS or (_needs_delta(est) and any(d.delta <= 0 for d in designs)):
            continue
        parts = _parts(est, arm_sizes_public)
        splits = dict.fromkeys(
            (_default_split(est, arm_sizes_public), *CANDIDATE_SPLITS.get((est, parts), ()))
        )
        for split in splits:
            preds = predict(est, [replace(d, split=split) for d in designs])
            try:
                w = 2.0 * _z(level) * math.sqrt(_combine(aggregator, preds).variance)
            except NoUsableSiteError:
                continue
            if best is None or w < best[0] * (1 - 1e-9):
                best = (w, est, split)
    if best is None:
        return None
    w, est, split = best
    return Recommendation(
        est,
        split,
        w,
        f"narrowest predicted combined interval among {list(valid)} "
        f"and the candidate splits, under the stated assumptions",
    )
