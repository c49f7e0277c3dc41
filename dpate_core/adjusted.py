"""The covariate-adjusted release ("adjusted"): DP subclassification from per-cell sufficient
statistics, pure epsilon-DP.

It needs, per cell ``g = (x, arm)``, only the count ``n_g``, the sum of centred outcomes
``s_g = sum (Y - B/2)`` and the sum of their squares ``q_g = sum (Y - B/2)^2``. One compiled pass
computes the three vectors; each is released with Laplace noise as ONE vector query (parallel
composition over cells), and the three share the budget by sequential composition.

Two post-processings of the same three noisy vectors (``weighting``; the privacy proof is the same):
``"subclassification"``, Algorithm 1's estimand ``sum_x (n_x / N) (mean_xt - mean_xc)`` over the
strata with both arms (a stratum with an empty arm, or too few noisy records, contributes 0), and
``"fixed_effects"``, the ratio of sums ``sum (s_xt n_xc - s_xc n_xt) / sum n_xt n_xc``: the
stratum effects averaged with weights ``n_xt n_xc`` (strata without both arms weigh 0), with no
threshold and no per-stratum ratio, so unbiased where strata hold few records per arm against the
count noise. ``"auto"`` (default) picks by a public rule (:func:`resolve_weighting`). Both equal
the common effect when every stratum has the same effect (Synth: 0.5).
``docs/adjusted.md`` has the design, the proofs and the measurements.

Exactness: the three vectors are exact integer sums on a public grid (:mod:`dpate_core.grid_sums`,
which has the argument); the noise is added to those integers, with scales in grid units, and
conversion to outcome units is post-processing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.grid_sums import CellStatistics, cell_statistics, sensitivities
from dpate_core.noise import Rng
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    Outputs,
    SiteEstimate,
    _scale,
    draw_once,
)

__all__ = [
    "AUTO_RATIO",
    "DEFAULT_SPLIT",
    "RESOLVE_Z",
    "THRESHOLD_FACTOR",
    "WEIGHTINGS",
    "dp_adjusted",
    "plan_adjusted",
    "plan_adjusted_from_statistics",
    "resolve_weighting",
]

DEFAULT_SPLIT = ("7/20", "11/20", "1/10")  # counts, centred sums, squares (docs/adjusted.md)
THRESHOLD_FACTOR = 1  # a stratum is used when both noisy arm counts >= max(2, 1 * (2 / eps_n))
#: the post-processings of the same three noisy vectors (docs/adjusted.md, "Two weightings")
WEIGHTINGS = ("auto", "subclassification", "fixed_effects")
#: "auto" uses subclassification when the public design gives at least this many records per arm
#: per stratum, ``N / (2 |X|)``, per unit of the count noise scale ``2 / eps_n``; else fixed effects
AUTO_RATIO = 10
#: fixed effects: the estimate is used when its noisy denominator exceeds this many of its own
#: (estimated) noise sds; below, the release is "uninformative" (tau 0, variance B^2 / 3)
RESOLVE_Z = 2.0


def plan_adjusted(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    domain_size: int,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
) -> MechanismPlan:
    """The plan of :func:`dp_adjusted` (see there for the privacy statement)."""
    stats = cell_statistics(w, y, x, domain_size=domain_size, bound=bound)
    return plan_adjusted_from_statistics(
        stats, epsilon=epsilon, delta=delta, split=split, min_count=min_count, weighting=weighting
    )


def resolve_weighting(weighting: str, n: int, domain_size: int, count_scale: float) -> str:
    """The weighting a plan uses: ``weighting`` itself, or for ``"auto"`` subclassification when
    the public design has at least :data:`AUTO_RATIO` count-noise scales of records per arm per
    stratum (``N / (2 |X|) >= AUTO_RATIO * 2 / eps_n``), else fixed effects. Public values only."""
    if weighting not in WEIGHTINGS:
        raise ValueError(
            f"weighting ({weighting!r}) must be one of {', '.join(WEIGHTINGS)} (docs/adjusted.md)"
        )
    if weighting != "auto":
        return weighting
    per_arm = n / (2.0 * domain_size)
    return "subclassification" if per_arm >= AUTO_RATIO * count_scale else "fixed_effects"


def plan_adjusted_from_statistics(
    stats: CellStatistics,
    *,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
) -> MechanismPlan:
    """:func:`plan_adjusted` from precomputed :func:`cell_statistics` (experiments reuse them)."""
    if not stats.centred:
        raise ValueError(
            "the adjusted estimator needs centred cell statistics: compute them with "
            "cell_statistics(..., centred=True)"
        )
    given = PrivacyParams.of(epsilon, delta)  # validates delta; none of it is spent
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    n = stats.n
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    shares = BudgetSplit.of(DEFAULT_SPLIT if split is None else split, 3)
    public = _public_constants(stats, shares.apply(total), min_count)
    noise = (
        NoiseSpec("counts", stats.counts.astype(np.float64), public.scale_n, "integer_laplace"),
        NoiseSpec("sums", stats.sums.astype(np.float64), public.scale_s, "integer_laplace"),
        NoiseSpec("squares", stats.squares.astype(np.float64), public.scale_q, "integer_laplace"),
    )
    mode = resolve_weighting(weighting, n, public.n_strata, public.scale_n)
    assemble = _assemble_fixed_effects if mode == "fixed_effects" else _assemble_subclassification
    return MechanismPlan(
        estimator="adjusted",
        n=n,
        n_treated=None,
        n_control=None,
        total=total,
        bound=stats.bound,
        shares=shares,
        noise=noise,
        assemble=functools.partial(assemble, public),
    )


@dataclass(frozen=True)
class _PublicConstants:
    """What both weightings' post-processing reads besides the noisy vectors: public values only
    (``N``, ``B``, ``|X|``, the grids, the noise scales and ``min_count``), no record."""

    n: int  # public N
    bound: float  # B
    n_strata: int  # |X|
    scale_n: float  # Laplace scale of the counts
    scale_s: float  # of the centred sums, grid units
    scale_q: float  # of the squares, grid units
    unit_s: float  # the sums' grid unit B 2^-k
    unit_q: float  # the squares' grid unit B^2 2^-m
    b_s: float  # the sums' Laplace scale in outcome units (>= B / eps_s)
    min_count: float  # subclassification: the noisy arm count a usable stratum needs
    half_b: float  # B / 2
    max_var: float  # B^2 / 4
    v_n: float  # variance of one noisy count
    v_s: float  # variance of one noisy sum (outcome units)
    sd_q: float  # sd of one noisy sum of squares (outcome units)


def _public_constants(
    stats: CellStatistics, parts: Sequence[PrivacyParams], min_count: float | None
) -> _PublicConstants:
    """The noise scales of the three vectors (budget parts ``(eps_n, eps_s, eps_q)``), their
    units, and ``min_count`` (default ``max(2, THRESHOLD_FACTOR * 2 / eps_n)``, checked)."""
    p_n, p_s, p_q = parts
    bound, k, m = stats.bound, stats.k, stats.m
    sens = sensitivities(bound, k, m)
    scale_n = _scale(sens["counts"], p_n)
    scale_s = _scale(sens["sums"], p_s)  # grid units
    scale_q = _scale(sens["squares"], p_q)
    unit_s = math.ldexp(bound, -k)  # exact: a power-of-two scaling
    unit_q = math.ldexp(bound * bound, -m)  # post-processing only
    b_s = scale_s * unit_s
    if min_count is None:
        min_count = max(2.0, THRESHOLD_FACTOR * scale_n)
    min_count = float(min_count)
    if not (min_count >= 1.0 and math.isfinite(min_count)):
        raise ValueError(f"min_count ({min_count}) must be a finite count of at least 1")
    return _PublicConstants(
        n=stats.n,
        bound=bound,
        n_strata=stats.counts.size // 2,
        scale_n=scale_n,
        scale_s=scale_s,
        scale_q=scale_q,
        unit_s=unit_s,
        unit_q=unit_q,
        b_s=b_s,
        min_count=min_count,
        half_b=bound / 2.0,
        max_var=bound * bound / 4.0,
        v_n=2.0 * scale_n**2,
        v_s=2.0 * b_s**2,
        sd_q=math.sqrt(2.0) * scale_q * unit_q,
    )


def _clipped_vectors(
    c: _PublicConstants, v: Mapping[str, Any], count_range: tuple[float, float]
) -> tuple[Any, Any, Any]:
    """The three noisy vectors in outcome units, each clipped to the range its true value can
    take given the public ``N`` and ``B`` (counts to ``count_range``, ``|s| <= N B/2``,
    ``|q| <= N B^2/4``; ``q`` may stay negative for the raw variance): this can only bring a
    value closer to the truth, and nothing overflows. Works on ``(cells,)`` and ``(reps, cells)``."""
    n, half_b, max_var = c.n, c.half_b, c.max_var
    cnt = np.clip(np.asarray(v["counts"], dtype=np.float64), *count_range)
    s = np.clip(np.asarray(v["sums"], dtype=np.float64) * c.unit_s, -n * half_b, n * half_b)
    q = np.clip(np.asarray(v["squares"], dtype=np.float64) * c.unit_q, -n * max_var, n * max_var)
    return cnt, s, q


def _assemble_fixed_effects(c: _PublicConstants, v: Mapping[str, Any]) -> Outputs:
    """The stratum fixed-effects (product-weighted) estimate: a ratio of two sums over every
    stratum, ``A = sum (s_t n_c - s_c n_t)``, ``D = sum n_t n_c``; with independent zero-mean
    noise both noisy sums are unbiased for their true values (no threshold, no per-stratum
    ratio). Counts are clipped to ``[-N, N]`` only (clipping at 0 would bias the products
    upwards)."""
    cnt, s, q = _clipped_vectors(c, v, (-float(c.n), float(c.n)))
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    big_a = np.sum(s_t * n_c - s_c * n_t, axis=-1)
    big_d = np.sum(n_t * n_c, axis=-1)
    # Var(D) = sum v_n (n_t^2 + n_c^2) + v_n^2, estimated without bias (E n_hat^2 = n^2 + v_n)
    # and never below its pure-noise part
    floor_d = c.n_strata * c.v_n**2
    var_d = np.maximum(np.sum(c.v_n * (n_t**2 + n_c**2), axis=-1) - floor_d, floor_d)
    resolved = big_d > RESOLVE_Z * np.sqrt(var_d)
    d_safe = np.where(resolved, big_d, 1.0)
    tau = np.where(resolved, np.clip(big_a / d_safe, -c.bound, c.bound), 0.0)
    noise_var = _fixed_effects_noise_variance(c, cnt, s, tau, var_d, d_safe)
    sampling_raw, sampling = _fixed_effects_sampling(c, cnt, s, q, d_safe)
    zero = np.zeros_like(tau)
    # unresolved: nothing is estimated; tau 0 with the variance of a uniform on [-B, B]
    unestimated_var = np.where(resolved, 0.0, c.bound * c.bound / 3.0)
    noise_var = np.where(resolved, noise_var, zero)
    sampling = np.where(resolved, sampling, zero)
    sampling_raw = np.where(resolved, sampling_raw, zero)
    used = resolved.astype(np.float64)
    return _outputs(
        tau, sampling, sampling_raw, noise_var, unestimated_var, used * c.n_strata, used
    )


def _fixed_effects_noise_variance(
    c: _PublicConstants, cnt: Any, s: Any, tau: Any, var_d: Any, d_safe: Any
) -> Any:
    """The noise variance of the fixed-effects ratio: ``tau_hat - tau = (1/D) sum [e_c (s_t -
    tau n_t) - e_t (s_c + tau n_c) + n_c h_t - n_t h_c + h_t e_c - h_c e_t - tau e_t e_c]``
    (``e`` count, ``h`` sum noise), exact for these bilinear terms; squares of noisy values are
    corrected by their noise variance; times the second order of ``E[1/D_hat^2] = (1/D^2)(1 +
    3 Var(D)/D^2 + ...)``, the ratio's own spread."""
    v_n, v_s = c.v_n, c.v_s
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    t = tau[..., None]
    per_stratum = (
        v_n * ((s_t - t * n_t) ** 2 + (s_c + t * n_c) ** 2 - 2.0 * (v_s + t * t * v_n))
        + v_s * (n_t**2 + n_c**2 - 2.0 * v_n)
        + 2.0 * v_s * v_n
        + t * t * v_n**2
    )
    floor_v = c.n_strata * (2.0 * v_s * v_n + tau * tau * v_n**2)
    noise_var = np.maximum(np.sum(per_stratum, axis=-1), floor_v) / d_safe**2
    return noise_var * (1.0 + 3.0 * var_d / d_safe**2)


def _fixed_effects_sampling(
    c: _PublicConstants, cnt: Any, s: Any, q: Any, d_safe: Any
) -> tuple[Any, Any]:
    """``(raw, clamped)`` sampling variance of the fixed-effects ratio: ``sum (n_t n_c)^2
    (sigma_t^2 / n_t + sigma_c^2 / n_c) / D^2``, with each arm's variance bounded by its total
    variance over all strata (noisy moments pooled over the strata, so the noise averages out;
    between-strata spread makes it conservative); clamped to ``[0, B^2/4]`` per arm."""
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    pos_t, pos_c = np.maximum(n_t, 0.0), np.maximum(n_c, 0.0)
    raw_t = _total_arm_variance(n_t, s_t, q[..., 1::2])[..., None]
    raw_c = _total_arm_variance(n_c, s_c, q[..., 0::2])[..., None]
    w_t, w_c = pos_c**2 * pos_t, pos_t**2 * pos_c

    def sampling_of(var_t: Any, var_c: Any) -> Any:
        return np.sum(w_t * var_t + w_c * var_c, axis=-1) / d_safe**2

    sampling_raw = sampling_of(raw_t, raw_c)
    max_var = c.max_var
    return sampling_raw, sampling_of(np.clip(raw_t, 0.0, max_var), np.clip(raw_c, 0.0, max_var))


def _total_arm_variance(nn: Any, ss: Any, qq: Any) -> Any:
    """One arm's variance over all strata from its noisy counts, sums and squares."""
    tot = np.maximum(np.sum(nn, axis=-1), 1.0)
    return (np.sum(qq, axis=-1) - np.sum(ss, axis=-1) ** 2 / tot) / tot


def _assemble_subclassification(c: _PublicConstants, v: Mapping[str, Any]) -> Outputs:
    """Algorithm 1's estimand from the three noisy vectors (clipped, :func:`_clipped_vectors`):
    the strata whose noisy arm counts both reach ``min_count``, weighted by their noisy size over
    the public ``N``, with arm means clipped to ``[0, B]``."""
    n, half_b, max_var = c.n, c.half_b, c.max_var
    cnt, s, q = _clipped_vectors(c, v, (0.0, n))
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    usable = (n_t >= c.min_count) & (n_c >= c.min_count)
    nt = np.where(usable, n_t, 1.0)
    nc = np.where(usable, n_c, 1.0)
    s_t, s_c = s[..., 1::2], s[..., 0::2]
    m_t = np.clip(s_t / nt, -half_b, half_b)  # arm means minus B/2, clipped to [0, B]
    m_c = np.clip(s_c / nc, -half_b, half_b)
    weight = np.where(usable, (n_t + n_c) / n, 0.0)  # noisy stratum size over public N
    tau = np.sum(weight * (m_t - m_c), axis=-1)
    raw_t = _pooled_variance(c, usable, nt, s_t, q[..., 1::2])
    raw_c = _pooled_variance(c, usable, nc, s_c, q[..., 0::2])
    w2 = weight * weight
    sampling_raw = np.sum(w2 * (raw_t / nt + raw_c / nc), axis=-1)
    sampling = np.sum(
        w2 * (np.clip(raw_t, 0.0, max_var) / nt + np.clip(raw_c, 0.0, max_var) / nc), axis=-1
    )
    # noise variance (delta method at the noisy point): Var Lap(b) = 2 b^2 per entry
    diff = (m_t - m_c) / n
    d_nt = diff - weight * m_t / nt
    d_nc = diff + weight * m_c / nc
    per_stratum = 2.0 * c.b_s**2 * w2 * (1.0 / nt**2 + 1.0 / nc**2) + 2.0 * c.scale_n**2 * (
        d_nt**2 + d_nc**2
    )
    noise_var = np.sum(np.where(usable, per_stratum, 0.0), axis=-1)
    # the strata left out (an empty arm, or too few noisy records to use) hold a share u of
    # the records whose contribution to the estimand lies in [-B u, B u] and is not
    # estimated: its uncertainty enters as the variance of a uniform on that range, so a
    # site that could use little of its data reports that (and with nothing usable, an
    # interval wider than the outcome's range) instead of a falsely precise 0
    usable_weight = np.sum(weight, axis=-1)
    unestimated = np.clip(1.0 - usable_weight, 0.0, 1.0)
    unestimated_var = (c.bound * unestimated) ** 2 / 3.0
    usable_strata = np.sum(usable, axis=-1).astype(np.float64)
    return _outputs(
        tau, sampling, sampling_raw, noise_var, unestimated_var, usable_strata, usable_weight
    )


def _pooled_variance(c: _PublicConstants, usable: Any, nn: Any, ss: Any, qq: Any) -> Any:
    """Subclassification: the within-cell variance of one arm, pooled over the usable strata
    (sum of within-cell squared deviations over their records; centring does not change a
    variance): the noise of the squares averages out over the strata instead of being clamped
    cell by cell (plus one sd of the squares' noise in that sum, public: an upper estimate, so
    that a noisy sum of squares does not understate the sampling part where noise is small)."""
    dev = np.sum(np.where(usable, qq - ss * ss / nn, 0.0), axis=-1)
    total = np.maximum(np.sum(np.where(usable, nn, 0.0), axis=-1), 1.0)
    margin = c.sd_q * np.sqrt(np.sum(usable, axis=-1))
    return ((dev + margin) / total)[..., None]


def _outputs(
    tau: Any,
    sampling: Any,
    sampling_raw: Any,
    noise_var: Any,
    unestimated_var: Any,
    usable_strata: Any,
    usable_weight: Any,
) -> Outputs:
    """Both weightings' outputs: the variance is the sampling part (clamped; ``raw_variance``
    unclamped) plus the noise variance plus the variance of what is not estimated."""
    diagnostics = {
        "sampling_variance_dp": sampling_raw,
        "noise_variance": noise_var,
        "unestimated_variance": unestimated_var,
        "usable_strata": usable_strata,
        "usable_weight": usable_weight,
    }
    return Outputs(
        tau,
        sampling + noise_var + unestimated_var,
        sampling_raw + noise_var + unestimated_var,
        diagnostics,
    )


def dp_adjusted(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    domain_size: int,
    split: Sequence[Number] | None = None,
    min_count: float | None = None,
    weighting: str = "auto",
    rng: Rng = None,
) -> SiteEstimate:
    """DP subclassification (the "adjusted" estimator): Algorithm 1's estimand from noisy per-cell
    counts, centred sums and centred sums of squares.

    Privacy: ``(epsilon, 0)``-DP under replace-one neighbours (a record's ``W``, ``Y`` and ``X`` may
    all change); ``delta`` is accepted for a uniform interface and not spent (the estimate records
    ``delta = 0``). Sequential composition of three Laplace vector queries with shares
    ``(eps_n, eps_s, eps_q)`` (default :data:`DEFAULT_SPLIT`), each parallel over the ``2 |X|``
    cells: counts ``Lap(2 / eps_n)``, centred sums ``Lap(B / eps_s)``, centred squares
    ``Lap(B^2 / (2 eps_q))`` (scales exact and rounded up; the sums in grid units). Public: ``N``,
    ``B``, ``|X|`` (``domain_size``), the covariate discretisation and ``min_count``; arm sizes are
    not released.

    Post-processing (``weighting``, see :func:`resolve_weighting` and docs/adjusted.md): with
    ``"fixed_effects"`` the ratio of sums ``sum (s_t n_c - s_c n_t) / sum n_t n_c`` over every
    stratum (uninformative, ``tau = 0`` with variance ``B^2/3``, when the noisy denominator is
    below ``RESOLVE_Z`` of its noise sds). With ``"subclassification"``: each noisy vector clipped
    to the range the true one can take (counts to
    ``[0, N]``, sums to ``N B/2`` in absolute value, squares to ``N B^2/4``); a stratum is used
    when both noisy arm counts are ``>= min_count`` (default ``max(2, 2 / eps_n)``, the count
    noise scale), else it contributes 0 (Algorithm 1's convention for a stratum with an empty
    arm); arm means clipped to ``[0, B]``; each arm's within-cell variance pooled over the usable
    strata (plus one noise sd of its sum of squares) and clamped to ``[0, B^2/4]``
    (``raw_variance`` keeps the unclamped value).
    """
    plan = plan_adjusted(
        w,
        y,
        x,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        domain_size=domain_size,
        split=split,
        min_count=min_count,
        weighting=weighting,
    )
    return plan.estimate(draw_once(plan, rng))
