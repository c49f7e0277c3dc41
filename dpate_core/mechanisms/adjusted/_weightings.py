"""The two post-processings of the adjusted release's noisy cell vectors
(:mod:`dpate_core.mechanisms.adjusted`, ``docs/explanation/adjusted.md``, "Two weightings"):
stratum fixed effects
(:func:`assemble_fixed_effects`) and Algorithm 1's subclassification
(:func:`assemble_subclassification`), each with its sampling and noise variances, from the noisy
vectors and public constants only (:class:`PublicConstants`). Both work on one release
``(cells,)`` and on ``(reps, cells)`` at once. The noisy sums and squares arrive in outcome units:
they are noised in grid units and multiplied by their grid unit after the draw
(:func:`dpate_core.statistics.cell_noise`, ``NoiseSpec.unit``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from dpate_core.intervals import normal_cdf
from dpate_core.release import Outputs
from dpate_core.statistics import histogram_cells

from ._fe_queries import QueryWeights
from ._fe_queries import combine as combine_queries
from ._fe_squares import SquaresPart, arm_sums_part, clipped_squares, pooled_df
from ._fe_squares import reading as squares_reading
from ._squares_sums import ARM_SQUARES, COMMON_SQUARES, cell_squares, variance_noise
from ._squares_sums import query_variance as sums_variance

__all__ = [
    "ESTIMANDS",
    "FIELLER_BELOW",
    "INTERVAL_Z",
    "PLUG_IN_CORRECTED_FROM",
    "RATIO_DAMPING",
    "RESOLVE_Z",
    "UNRESOLVED_FIXED_EFFECTS",
    "UNRESOLVED_SUBCLASSIFICATION",
    "Linearisation",
    "PublicConstants",
    "assemble_fixed_effects",
    "assemble_histogram",
    "assemble_subclassification",
    "design_resolution",
    "fieller_factor",
    "fieller_terms",
    "histogram_vectors",
    "resolution_probability",
    "squares_queried",
    "subclassification_linearisation",
    "used_strata",
]

#: fixed effects: the estimate is resolved when its noisy denominator exceeds this many of its
#: own (estimated) noise sds; below, the release publishes no estimate (``resolved`` False)
RESOLVE_Z = 2.0
#: fixed effects: a design whose release is predicted, from its public values alone, to resolve in
#: fewer than this share of releases (:func:`design_resolution`) publishes Fieller's length for
#: its interval (:func:`fieller_factor`): the releases that resolve there are selected on their
#: denominator's noise, and the delta method's interval under-covers them
#: (docs/explanation/adjusted.md, "The denominator's noise")
FIELLER_BELOW = 0.5
#: fixed effects: from this predicted share on (:func:`design_resolution`) nearly every release
#: resolves, so the resolution selects (almost) nothing and the delta method's variance, read at
#: the noisy estimate, has its noise part divided by ``1 + Var(D_hat) / D_hat^2``
#: (:func:`_plug_in_factor`): the noise part's ``V(t)`` read at ``tau_hat`` exceeds ``V(tau)``
#: by ``Var(D_hat) Var(tau_hat)`` on average. Between :data:`FIELLER_BELOW` and this share the
#: excess is kept: there it stands in for the shrinkage of the selected releases
#: (docs/explanation/adjusted.md, "The plug-in excess")
PLUG_IN_CORRECTED_FROM = 0.9
#: the normal quantile of the 95% interval every published variance is read with
#: (:func:`_noisy_variance_stretch` keeps that interval's coverage)
INTERVAL_Z = NormalDist().inv_cdf(0.975)
#: the public reasons of an unresolved release (``SiteEstimate.unresolved_reason``), one per
#: weighting: what a reader of the report sees in place of an estimate
UNRESOLVED_FIXED_EFFECTS = (
    "fixed effects: too few patients in strata holding both treatments at this budget (the "
    f"noisy sum of n_t n_c over the strata is not above {RESOLVE_Z:g} of its noise sds, or too "
    "close to 0 to bound the ratio)"
)
UNRESOLVED_SUBCLASSIFICATION = (
    "subclassification: no stratum has enough patients in both treatments at this budget "
    "(both noisy arm counts at least min_count)"
)
#: subclassification: the damping of the ratio-bias plug-in near the count threshold,
#: ``n_hat^2 + RATIO_DAMPING v_n^2 / n_hat^2`` (chosen by measurement, docs/explanation/adjusted.md)
RATIO_DAMPING = 100.0
#: each weighting's estimand in the words a report prints (docs/explanation/adjusted.md, "Estimand")
ESTIMANDS = {
    "subclassification": ("average effect over the patients in strata where both treatments occur"),
    "fixed_effects": (
        "average of the effects within strata where both treatments occur, each stratum weighted "
        "by how many treated-control pairs it holds (strata with balanced treatment count more)"
    ),
}


@dataclass(frozen=True)
class PublicConstants:
    """What both weightings' post-processing reads besides the noisy vectors: public values only
    (``N``, ``B``, ``|X|``, the noise scales and ``min_count``), no record."""

    n: int  # public N
    bound: float  # B
    n_strata: int  # |X|
    scale_n: float  # Laplace scale of the counts
    b_s: float  # the sums' Laplace scale in outcome units (>= B / eps_s)
    min_count: float  # subclassification: the noisy arm count a usable stratum needs
    half_b: float  # B / 2
    max_var: float  # B^2 / 4
    v_n: float  # variance of one noisy count
    v_s: float  # variance of one noisy sum (outcome units)
    #: variance of one noisy sum of squares (outcome units); 0 where the squares are taken from
    #: the counts (a binary outcome, :func:`histogram_vectors`)
    v_q: float = 0.0
    #: a binary outcome: each noisy count's share of its cell's squares, ``B^2/4``; else 0
    q_per_count: float = 0.0
    #: the fixed-effects queries' Laplace scales in their normalised units (numerator,
    #: denominator) where the release has them (:mod:`._fe_queries`); else None
    query_scales: tuple[float, float] | None = None
    #: the fixed-effects squares query's Laplace scale in its normalised units where the release
    #: has it (:mod:`._fe_squares`); else None
    squares_scale: float | None = None
    #: subclassification: the Laplace scale, in its normalised units, of the used cells' squares
    #: as one sum where the release reads one within-cell variance for both arms from it
    #: (:mod:`._squares_sums`; the propensity release below a public size); else None
    common_scale: float | None = None
    #: subclassification: the same of each arm's used cells' squares as one sum, where each arm
    #: reads its own variance from its sum (:mod:`._squares_sums`; the propensity release from
    #: that size); else None
    arm_scale: float | None = None


def histogram_vectors(c: PublicConstants, v: Mapping[str, Any]) -> dict[str, Any]:
    """The three cell vectors from a noisy histogram (``v["histogram"]``), or ``v`` itself
    where it holds them already (a caller that built the cell vectors, as tests do): the counts
    (the two bins' sum) and centred sums (``B/2`` times their difference,
    :func:`dpate_core.statistics.histogram_cells`) of the cells' two-end histogram
    (:func:`dpate_core.statistics.end_histogram`), the squares then their own noisy vector; or
    of a binary outcome's ``(cell, outcome)`` histogram
    (:func:`dpate_core.statistics.outcome_histogram`), whose every centred value is ``+-B/2``,
    so a cell's centred squares are its count times ``B^2 / 4``
    (:attr:`PublicConstants.max_var`). Post-processing; without noise, the records' own three
    vectors exactly."""
    if "histogram" not in v:
        return dict(v)
    cells = histogram_cells(v["histogram"], c.bound)
    if c.q_per_count:  # a binary outcome: no squares released
        return {**v, **cells, "squares": cells["counts"] * c.max_var}
    return {**v, **cells}


def assemble_histogram(
    c: PublicConstants,
    assemble: Callable[[PublicConstants, Mapping[str, Any]], Outputs],
    v: Mapping[str, Any],
) -> Outputs:
    """``assemble`` (a weighting) of the cells' noisy histogram (:func:`histogram_vectors`)."""
    return assemble(c, histogram_vectors(c, v))


def _clipped_cells(
    c: PublicConstants, v: Mapping[str, Any], count_range: tuple[float, float]
) -> tuple[Any, Any]:
    """The noisy counts and sums (outcome units), each clipped to the range its true value can
    take given the public ``N`` and ``B`` (counts to ``count_range``, ``|s| <= N B/2``; the
    squares, read where a release has their vector: :func:`._fe_squares.clipped_squares`): this
    can only bring a value closer to the truth, and nothing overflows. Works on ``(cells,)`` and
    ``(reps, cells)``."""
    n, half_b = c.n, c.half_b
    cnt = np.clip(np.asarray(v["counts"], dtype=np.float64), *count_range)
    return cnt, np.clip(np.asarray(v["sums"], dtype=np.float64), -n * half_b, n * half_b)


def assemble_fixed_effects(c: PublicConstants, v: Mapping[str, Any]) -> Outputs:
    """The stratum fixed-effects (product-weighted) estimate: a ratio of two sums over every
    stratum, ``A = sum (s_t n_c - s_c n_t)``, ``D = sum n_t n_c``; with independent zero-mean
    noise both noisy sums are unbiased for their true values (no threshold, no per-stratum
    ratio). Counts are clipped to ``[-N, N]`` only (clipping at 0 would bias the products
    upwards). Its variance is the delta method's (:func:`_fixed_effects_noise_variance`,
    :func:`_fixed_effects_sampling`); where the public design predicts that few releases resolve
    (:func:`design_resolution` below :data:`FIELLER_BELOW`) it is stretched to the length of
    Fieller's interval for the ratio (:func:`fieller_factor`), which carries the noise of the
    denominator it divides by: there the releases that resolve are those whose noise inflated
    ``D_hat`` (docs/explanation/adjusted.md, "The denominator's noise"); where it predicts that
    nearly every release resolves (from :data:`PLUG_IN_CORRECTED_FROM`) its noise part is divided
    by its plug-in excess (:func:`_plug_in_factor`) and every part stretched for the noise of the
    sandwich it reads (:func:`sandwich_noise_variance`, :func:`_noisy_variance_stretch`; in
    between, where the squares stay a vector, its clamp at 0 adds to the excess kept there:
    docs/explanation/adjusted.md, "The fixed-effects sandwich's own noise", "The sandwich's
    squares as one query")."""
    cnt, s = _clipped_cells(c, v, (-float(c.n), float(c.n)))
    part = squares_reading(c, cnt, s, v)  # the sandwich's squares part (._fe_squares)
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    big_a = np.sum(s_t * n_c - s_c * n_t, axis=-1)
    big_d = np.sum(n_t * n_c, axis=-1)
    # Var(D) = sum v_n (n_t^2 + n_c^2) + v_n^2, estimated without bias (E n_hat^2 = n^2 + v_n)
    # and never below its pure-noise part
    floor_d = c.n_strata * c.v_n**2
    var_d = np.maximum(np.sum(c.v_n * (n_t**2 + n_c**2), axis=-1) - floor_d, floor_d)
    weights = None
    if c.query_scales is not None:  # the queries' readings combined in (._fe_queries)
        big_a, big_d, var_d, weights = combine_queries(c, (cnt, s), (big_a, big_d), v)
    resolved = big_d > RESOLVE_Z * np.sqrt(var_d)
    factor = np.ones_like(big_d)
    share = design_resolution(c.n, c.n_strata, c.v_n, c.query_scales)
    fieller = share < FIELLER_BELOW
    if fieller:
        d_safe = np.where(resolved, big_d, 1.0)
        ratio = np.clip(big_a / d_safe, -c.bound, c.bound)
        factor = _fieller_stretch(c, (cnt, s), part, ratio, d_safe, weights)
        resolved &= np.isfinite(factor)
        factor = np.where(resolved, factor, 1.0)
    d_safe = np.where(resolved, big_d, 1.0)
    tau = np.where(resolved, np.clip(big_a / d_safe, -c.bound, c.bound), 0.0)
    noise_var = factor * _fixed_effects_noise_variance(c, cnt, s, tau, d_safe, weights)
    sampling_raw, sampling = (
        factor * x for x in _fixed_effects_sampling(c, cnt, s, part, tau, d_safe)
    )
    if not fieller and share >= PLUG_IN_CORRECTED_FROM:
        noise_var = noise_var * _plug_in_factor(var_d, d_safe)
        # the sandwich reads the noisy squares, sums and counts: the published variance carries
        # its own noise (_noisy_variance_stretch), each part stretched alike
        sigma2 = sandwich_noise_variance(c, (cnt, s, part.cells), tau, d_safe, part.variance)
        stretch = _noisy_variance_stretch(
            sampling + noise_var, *_clamped_moments(sampling_raw, sigma2)
        )
        sampling, sampling_raw, noise_var = (
            sampling * stretch,
            sampling_raw * stretch,
            noise_var * stretch,
        )
    # unresolved: nothing is estimated, and nothing is published as if it were (NaN, _outputs)
    used = resolved.astype(np.float64)
    return _outputs(
        resolved,
        UNRESOLVED_FIXED_EFFECTS,
        tau,
        sampling,
        sampling_raw,
        noise_var,
        np.zeros_like(tau),
        used * c.n_strata,
        used,
    )


def resolution_probability(big_d: float, var_d: float) -> float:
    """The probability that a fixed-effects release resolves, ``Phi(D / sd(D) - RESOLVE_Z)``,
    for a true denominator ``D = sum n_t n_c`` whose noisy value has variance ``var_d`` (normal
    approximation). The plan's (``dpate_core.mechanisms.adjusted``'s prediction) at its assumed
    counts, and the release's own switch at the design's default ones
    (:func:`design_resolution`)."""
    if big_d <= 0.0:
        return 0.0
    return 1.0 - NormalDist().cdf(RESOLVE_Z - big_d / math.sqrt(var_d))


def design_resolution(
    n: int, n_strata: int, v_n: float, query_scales: tuple[float, float] | None = None
) -> float:
    """The share of fixed-effects releases predicted to resolve from the public design alone
    (``N``, ``|X|`` and the count noise variance ``v_n``): :func:`resolution_probability` at the
    counts ``dpate plan`` assumes by default, half the records treated (``round(N/2)``), each
    arm spread as evenly as possible over every stratum (``planning.balanced_counts``: ``q`` or
    ``q + 1`` records per stratum, the first strata taking the extra ones), so ``D`` and ``sum
    (n_t^2 + n_c^2)`` in closed form. Public: it reads no record, so the switch it drives
    (:data:`FIELLER_BELOW`) selects nothing. ``query_scales``: the release has the
    fixed-effects queries (:mod:`._fe_queries`), whose combined denominator has variance ``v_n
    sum n_t^2 + G b_r / (G + b_r)`` (``b_r`` from the largest control count at these counts)."""
    k = n_strata
    m_t = min(max(round(0.5 * n), 1), n - 1)
    m_c = n - m_t
    (q_t, r_t), (q_c, r_c) = divmod(m_t, k), divmod(m_c, k)
    big_d = k * q_t * q_c + q_t * r_c + q_c * r_t + min(r_t, r_c)
    sq_t = k * q_t * q_t + (2 * q_t + 1) * r_t
    sq_c = k * q_c * q_c + (2 * q_c + 1) * r_c
    if query_scales is None:
        return resolution_probability(float(big_d), v_n * (sq_t + sq_c) + k * v_n * v_n)
    # with the denominator query (._fe_queries.combine): v_n sum n_t^2 + G b_r / (G + b_r)
    g = v_n * sq_c + k * v_n * v_n
    b_r = 2.0 * (max(q_c + (1 if r_c else 0), 1) * query_scales[1]) ** 2
    return resolution_probability(float(big_d), v_n * sq_t + g * b_r / (g + b_r))


def squares_queried(c: PublicConstants) -> bool:
    """Whether a fixed-effects release (not a binary outcome's) queries its squares as one value
    (:mod:`._fe_squares`) rather than as their vector: everywhere but where the public design
    puts it between :data:`FIELLER_BELOW` and :data:`PLUG_IN_CORRECTED_FROM`
    (:func:`design_resolution`), where the release keeps the excess of its plug-in noise part
    and of its noisy sandwich's clamp at 0 as the allowance for the shrinkage of the releases
    its resolution selects (docs/explanation/adjusted.md, "The sandwich's squares as one
    query": with the query there IHDP's 128 strata at 2 sites covered 0.92-0.93). Public:
    ``N``, ``|X|`` and the noise scales."""
    share = design_resolution(c.n, c.n_strata, c.v_n, c.query_scales)
    return not FIELLER_BELOW <= share < PLUG_IN_CORRECTED_FROM


def _fieller_stretch(
    c: PublicConstants,
    vectors: tuple[Any, Any],
    part: SquaresPart,
    ratio: Any,
    d_safe: Any,
    weights: QueryWeights | None = None,
) -> Any:
    """:func:`fieller_factor` of this release: ``V(t) = Var(A_hat - t D_hat)``, noise and
    sampling (the numerators of :func:`_fixed_effects_noise_variance` and
    :func:`_fixed_effects_sampling` before their division by ``D_hat^2``, both quadratic in
    ``t``), read at ``r`` and ``r +- B``."""
    cnt, s = vectors

    def numerator(t: Any) -> Any:
        sampling_raw = _fixed_effects_sampling(c, cnt, s, part, t, d_safe)[0]
        return _noise_numerator(c, cnt, s, t, weights) + sampling_raw * d_safe**2

    b = c.bound
    return fieller_factor(numerator(ratio), numerator(ratio + b), numerator(ratio - b), b, d_safe)


def _plug_in_factor(var_d: Any, d_safe: Any) -> Any:
    """``1 / (1 + Var(D_hat) / D_hat^2)`` for the noise part: its numerator ``V(t)``
    (:func:`_noise_numerator`) is a quadratic in ``t`` whose ``t^2`` coefficient is the estimate
    of ``Var(D_hat)`` (``var_d``), read at the noisy estimate, and ``E V(tau_hat) = V(tau) +
    Var(D_hat) E (tau_hat - tau)^2`` given ``D_hat``, with ``E (tau_hat - tau)^2`` about ``V(tau)
    / D_hat^2`` where the noise is most of the variance (the delta method's own; the sampling
    part's share of it is left in, where ``Var(D_hat) / D_hat^2`` is small). About ``(sd(D) /
    D)^2``: a few percent where nearly every release resolves. Post-processing of the noisy
    vectors."""
    return 1.0 / (1.0 + var_d / d_safe**2)


def fieller_factor(v_r: Any, v_up: Any, v_down: Any, step: float, d: Any) -> Any:
    """How much longer Fieller's 95% interval for a ratio ``A / D`` is than the delta method's,
    squared: ``(1 - g rho) / (1 - g)^2``, ``inf`` where Fieller's set is unbounded (``g >= 1``:
    the data do not bound the ratio) (docs/explanation/adjusted.md, "The denominator's noise").
    The quadratic ``V(t) = Var(A_hat - t D_hat) = V_D (t - t*)^2 + V_min`` is read at ``r``,
    ``r + step`` and ``r - step`` (``v_r``, ``v_up``, ``v_down``; exact for a quadratic), ``d``
    the denominator.

    Fieller's set ``{t : (A_hat - t D_hat)^2 <= z^2 V(t)}`` is an interval when ``g = z^2 V_D /
    D_hat^2 < 1``, of half-length ``(z sqrt(V(r)) / D_hat) sqrt(1 - g rho) / (1 - g)`` at ``r =
    A_hat / D_hat``, ``rho = V_min / V(r)``: the delta method's half-length times the root of
    the factor (solve ``(D_hat^2 - z^2 V_D) t^2 - 2 (A_hat D_hat - z^2 C) t + A_hat^2 - z^2 V_A =
    0``; its discriminant is ``z^2 D_hat^2 V(r) (1 - g rho)`` since ``V_A V_D - C^2 = V_D
    V_min``). Far from the threshold (``g`` near 0) the factor is 1; near it, where the noisy
    ``D_hat`` may be several times the true ``D``, the interval widens with it. The release reads
    it at its noisy values (:func:`assemble_fixed_effects`), the plan at the assumed ones."""
    g, rho = fieller_terms(v_r, v_up, v_down, step, d)
    bounded = g < 1.0
    one_less = np.where(bounded, 1.0 - g, 1.0)
    return np.where(bounded, (1.0 - g * rho) / one_less**2, np.inf)


def fieller_terms(v_r: Any, v_up: Any, v_down: Any, step: float, d: Any) -> tuple[Any, Any]:
    """``(g, rho)`` of :func:`fieller_factor`: ``g = z^2 V_D / d^2`` and ``rho = V_min / V(r)``,
    from the quadratic ``V(t)`` read at ``r`` and ``r +- step``."""
    v_d = (v_up + v_down - 2.0 * v_r) / (2.0 * step * step)
    slope = (v_up - v_down) / (2.0 * step)
    v_safe = np.where(v_d > 0.0, v_d, 1.0)
    v_min = np.where(v_d > 0.0, v_r - slope * slope / (4.0 * v_safe), v_r)
    rho = np.clip(v_min / np.where(v_r > 0.0, v_r, 1.0), 0.0, 1.0)
    return INTERVAL_Z**2 * np.maximum(v_d, 0.0) / (d * d), rho


def _noise_numerator(
    c: PublicConstants, cnt: Any, s: Any, tau: Any, weights: QueryWeights | None = None
) -> Any:
    """``Var`` of the noise in ``A_hat - tau D_hat`` (``e`` count, ``h`` sum noise): ``sum [e_c
    (s_t - tau n_t) - e_t (s_c + tau n_c) + n_c h_t - n_t h_c + h_t e_c - h_c e_t - tau e_t
    e_c]``, exact for these bilinear terms; squares of noisy values are corrected by their noise
    variance. Quadratic in ``tau``; no floor (:func:`_fixed_effects_noise_variance` adds it)."""
    v_n, v_s = c.v_n, c.v_s
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    t = np.asarray(tau)[..., None]
    if weights is None:
        per_stratum = (
            v_n * ((s_t - t * n_t) ** 2 + (s_c + t * n_c) ** 2 - 2.0 * (v_s + t * t * v_n))
            + v_s * (n_t**2 + n_c**2 - 2.0 * v_n)
            + 2.0 * v_s * v_n
            + t * t * v_n**2
        )
        return np.sum(per_stratum, axis=-1)
    # the queries' readings combined in (._fe_queries.combine): the histogram keeps the sums'
    # noise at coefficients n_hat - lambda c and the treated counts' in the denominator at
    # n_hat_c - mu c_c (c the capped part); given the noisy control counts the latter's term is
    # read at them (docs/explanation/adjusted.md, "The variance the release reports")
    keep_t, keep_c, keep_d = weights.kept(cnt)
    per_stratum = (
        v_n * ((s_t - t * n_t) ** 2 - v_s - t * t * v_n)
        + v_n * ((s_c + t * keep_d) ** 2 - v_s)
        + v_s * (keep_t**2 + keep_c**2)
    )
    queries = weights.lam**2 * weights.b + np.asarray(tau) ** 2 * weights.mu**2 * weights.b_r
    return np.sum(per_stratum, axis=-1) + queries


def _fixed_effects_noise_variance(
    c: PublicConstants,
    cnt: Any,
    s: Any,
    tau: Any,
    d_safe: Any,
    weights: QueryWeights | None = None,
) -> Any:
    """The noise variance of the fixed-effects ratio given its noisy denominator: ``tau_hat -
    tau = (1/D_hat) sum [e_c (s_t - tau n_t) - e_t (s_c + tau n_c) + n_c h_t - n_t h_c + h_t e_c -
    h_c e_t - tau e_t e_c]`` (``e`` count, ``h`` sum noise; :func:`_noise_numerator`), never
    below its pure-noise part. Divided by the noisy ``D_hat^2`` the release reads: the variance
    of the error given ``D_hat``, which is what an interval around this release needs (the
    spread of ``1/D_hat`` over other draws of ``D_hat`` is :func:`fieller_factor`'s, where the
    design makes it matter)."""
    return floored_noise_numerator(c, cnt, s, tau, weights) / d_safe**2


def floored_noise_numerator(
    c: PublicConstants, cnt: Any, s: Any, tau: Any, weights: QueryWeights | None = None
) -> Any:
    """:func:`_noise_numerator` never below its pure-noise part: the products of two noises,
    ``|X| (2 v_s v_n + tau^2 v_n^2)``, or with the queries their own noise, ``lambda^2 b + tau^2
    mu^2 b_r`` (the rest an unbiased estimate that may fall below it where strata are nearly
    empty: the floor then raises the reported variance's mean, which ``dpate plan`` predicts
    by applying it to simulated histograms)."""
    if weights is None:
        floor_v = c.n_strata * (2.0 * c.v_s * c.v_n + tau * tau * c.v_n**2)
    else:
        floor_v = weights.lam**2 * weights.b + tau * tau * weights.mu**2 * weights.b_r
    return np.maximum(_noise_numerator(c, cnt, s, tau, weights), floor_v)


def _fixed_effects_sampling(
    c: PublicConstants, cnt: Any, s: Any, part: SquaresPart, tau: Any, d_safe: Any
) -> tuple[Any, Any]:
    """``(raw, clamped at 0)`` sampling variance of the fixed-effects ratio ``A / D``, by its
    linearisation (a sandwich): ``A - tau D`` is a sum over the pairs (treated ``i``, control
    ``j``) of a stratum of ``y_i - y_j - tau``, so each record's influence is ``n_c (y_i - ybar_c -
    tau)`` (treated) or ``n_t (ybar_t - y_j - tau)`` (control), and ``Var(A / D) = sum_i h_i^2 /
    D^2``. Per stratum that sum is a polynomial in the cell statistics, with no ratio:
    ``n_c^2 q_t - 2 n_c s_t (s_c + tau n_c) + n_t (s_c + tau n_c)^2`` plus the same with the arms
    swapped (``s_t - tau n_t``); each product of noisy values is corrected by its noise's mean
    (``E n_hat^2 = n^2 + v_n``, ``E s_hat^2 = s^2 + v_s``). It holds both the within-cell
    variance and the spread of the stratum effects around ``tau`` (what changes when the strata's
    arm sizes are drawn again, as in a new sample of patients). Its plug-in of the arm means
    adds ``n_t n_c (sigma_t^2 + sigma_c^2)`` per stratum, ``D (sigma_t^2 + sigma_c^2)`` in all,
    which is removed with each arm's within-cell variance pooled over the strata
    (:func:`._fe_squares.arm_weights`). The squares enter all of it linearly, as one value ``L``
    (``part``, :mod:`._fe_squares`: the release's query, or a sum over given squares), the rest
    from the noisy counts and sums: ``(sum_x (R_x - E noise_x) + L - D_h P_s) / D^2``, ``P_s``
    the arms' within-cell variances' parts from their sums (:func:`._fe_squares.arm_sums_part`)."""
    v_n, v_s = c.v_n, c.v_s
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    t = np.asarray(tau)[..., None]
    shift_c, shift_t = s_c + t * n_c, s_t - t * n_t
    rest = (
        n_t * shift_c**2 - 2.0 * n_c * s_t * shift_c + n_c * shift_t**2 - 2.0 * n_t * s_c * shift_t
    )
    noise_mean = -2.0 * t * v_n * (s_t - s_c) + (v_s + t * t * v_n) * (n_t + n_c)
    sums_part = arm_sums_part(c, n_t, s_t) + arm_sums_part(c, n_c, s_c)
    total = np.sum(rest - noise_mean, axis=-1) + part.big_l - part.big_d * sums_part
    raw = total / d_safe**2
    return raw, np.maximum(raw, 0.0)


def _influence_per_stratum(cnt: Any, s: Any, q: Any, t: Any) -> Any:
    """Each stratum's sum of squared influences in :func:`_fixed_effects_sampling` (before the
    noise's mean is taken out): ``n_c^2 q_t - 2 n_c s_t (s_c + t n_c) + n_t (s_c + t n_c)^2``
    plus the same with the arms swapped (``s_t - t n_t``); ``t`` broadcast over the strata."""
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    q_c, q_t = q[..., 0::2], q[..., 1::2]
    shift_c, shift_t = s_c + t * n_c, s_t - t * n_t
    treated = n_c**2 * q_t - 2.0 * n_c * s_t * shift_c + n_t * shift_c**2
    control = n_t**2 * q_c - 2.0 * n_t * s_c * shift_t + n_c * shift_t**2
    return treated + control


def sandwich_noise_variance(
    c: PublicConstants, vectors: tuple[Any, Any, Any], tau: Any, d: Any, squares_variance: Any
) -> Any:
    """The variance the noise gives the fixed-effects sandwich's raw value
    (:func:`_fixed_effects_sampling`, ``I / D^2`` with ``I`` its influence sum), by the delta
    method at the noisy point (``tau`` held, as the release reads it): the squares enter ``I``
    as one value ``L`` whose noise variance is ``squares_variance`` (:mod:`._fe_squares`: the
    query's, or the squares' vector's), the cells' sums and counts through the polynomial's
    derivatives (``q`` the per-cell squares those read, :func:`._fe_squares.reading`), the
    counts also through ``D = sum n_t n_c``; the noises are independent (the two-end
    histogram's count and sum noises are uncorrelated). Until stop 50 the squares were a vector
    and their part most of it (a cell's squares noise against its within-cell sum of squares
    ``n sigma^2``: docs/explanation/adjusted.md, "The fixed-effects sandwich's own noise"). The
    plug-in term's pooled variance is left out of the counts' derivatives (its squares weigh ``1
    / (D df)`` against ``n^2 / D^2``). A binary outcome's squares are its counts times ``B^2 /
    4``: their part moves with the counts."""
    cnt, s, q = vectors
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    q_c, q_t = q[..., 0::2], q[..., 1::2]
    t = np.asarray(tau)[..., None]
    dd = np.asarray(d)[..., None]
    shift_c, shift_t = s_c + t * n_c, s_t - t * n_t
    total = np.sum(_influence_per_stratum(cnt, s, q, t), axis=-1)[..., None]
    g_st = 2.0 * n_c * (shift_t - shift_c) - 2.0 * n_t * s_c
    g_sc = 2.0 * n_t * (shift_c - shift_t) - 2.0 * n_c * s_t
    g_nt = (
        shift_c**2 + 2.0 * n_t * q_c - 2.0 * s_c * shift_t + 2.0 * t * (n_t * s_c - n_c * shift_t)
    )
    g_nc = (
        shift_t**2 + 2.0 * n_c * q_t - 2.0 * s_t * shift_c + 2.0 * t * (n_t * shift_c - n_c * s_t)
    )
    g_nt = g_nt + c.q_per_count * n_c**2 - 2.0 * total * n_c / dd
    g_nc = g_nc + c.q_per_count * n_t**2 - 2.0 * total * n_t / dd
    per_cell = c.v_s * (g_st**2 + g_sc**2) + c.v_n * (g_nt**2 + g_nc**2)
    return (np.sum(per_cell, axis=-1) + squares_variance) / np.asarray(d) ** 4


def _clamped_moments(raw: Any, sigma2: Any) -> tuple[Any, Any]:
    """``(variance, bias)`` of a variance estimate the release clamps at 0, its noise normal of
    variance ``sigma2`` (both 0 where ``sigma2`` is): the variance of a normal of mean ``raw``
    clamped at 0, ``sigma^2 [(a^2 + 1) Phi(a) + a phi(a) - (a Phi(a) + phi(a))^2]`` at ``a = raw /
    sigma``, and what the clamp adds to its mean, ``E max(X, 0) - v = sigma (phi(b) + b Phi(b) -
    b)`` for ``X`` of mean ``v = max(raw, 0)`` (a variance is never below 0), ``b = v / sigma``:
    about ``0.4 sigma`` where the true value is small next to its noise, 0 where it is large."""
    positive = sigma2 > 0.0
    sigma = np.sqrt(np.where(positive, sigma2, 1.0))
    a = raw / sigma
    cdf = normal_cdf(a)
    pdf = np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    mean = a * cdf + pdf
    variance = np.where(positive, sigma2 * ((a * a + 1.0) * cdf + a * pdf - mean * mean), 0.0)
    b = np.maximum(raw, 0.0) / sigma
    excess = np.exp(-0.5 * b * b) / np.sqrt(2.0 * np.pi) + b * normal_cdf(b) - b
    return variance, np.where(positive, sigma * excess, 0.0)


def used_strata(c: PublicConstants, counts: Any) -> Any:
    """The strata subclassification uses: both arms' noisy counts (``counts``, clipped to ``[0,
    N]``, arms interleaved control then treated) at ``min_count``. One rule for the estimate and
    for every quantity that must cover the same patients (the propensity release's crude
    difference)."""
    return (counts[..., 1::2] >= c.min_count) & (counts[..., 0::2] >= c.min_count)


class UsedCells(NamedTuple):
    """The noisy cells as subclassification reads them (:func:`_used_cells`)."""

    usable: Any  # both noisy arm counts at min_count (:func:`used_strata`)
    n_t: Any  # the noisy counts clipped to [0, N]
    n_c: Any
    nt: Any  # the same where usable, 1 elsewhere (a divisor)
    nc: Any
    s_t: Any  # the noisy sums and squares, clipped (:func:`_clipped_cells`)
    s_c: Any
    q_t: Any
    q_c: Any
    m_t: Any  # the arm means minus B/2, clipped to [-B, B]
    m_c: Any
    size: Any  # a used stratum's noisy size, 0 elsewhere
    den: Any  # N_used (:func:`_used_size`)
    share_used: Any  # the weight of the used strata's own sizes in N_used


def _used_cells(c: PublicConstants, v: Mapping[str, Any]) -> UsedCells:
    """The clipped noisy vectors split by arm, the strata used, their arm means and ``N_used``:
    what the estimate, its variance and the propensity release's linearisation
    (:func:`subclassification_linearisation`) all read."""
    cnt, s = _clipped_cells(c, v, (0.0, c.n))
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    usable = used_strata(c, cnt)
    nt = np.where(usable, n_t, 1.0)
    nc = np.where(usable, n_c, 1.0)
    s_t, s_c = s[..., 1::2], s[..., 0::2]
    if COMMON_SQUARES in v or ARM_SQUARES in v:  # the used cells' squares as sums
        q_t, q_c = cell_squares(c, usable, (nt, nc), (s_t, s_c), v)
    elif "squares" in v:
        q = clipped_squares(c, v["squares"])
        q_t, q_c = q[..., 1::2], q[..., 0::2]
    else:  # a stage chosen before the squares' sum, reading the counts and sums only: NaN
        q_t = q_c = np.full(np.shape(s_t), np.nan)
    # arm means minus B/2, clipped to B/2 beyond the outcome's range [0, B]: a wider clip than
    # the range itself, so that it biases no mean whose noise is small next to B/2 and still
    # cuts the tails of the near-empty cells' noise-only means
    m_t = np.clip(s_t / nt, -c.bound, c.bound)
    m_c = np.clip(s_c / nc, -c.bound, c.bound)
    size = np.where(usable, n_t + n_c, 0.0)
    den, share_used = _used_size(c, v, usable, size)
    return UsedCells(usable, n_t, n_c, nt, nc, s_t, s_c, q_t, q_c, m_t, m_c, size, den,
                     share_used)  # fmt: skip


def _count_gradients(
    nt: Any, nc: Any, means: tuple[Any, Any], weight: Any, alpha: Any, tau: Any, den: Any
) -> tuple[Any, Any]:
    """``d tau / d n_t`` and ``d tau / d n_c`` per used stratum (``means``: the arm means in the
    true means' range ``[-B/2, B/2]``): a used cell's count moves its stratum's weight and
    ``N_used`` by ``alpha``, its arm mean by ``-m / n``. A left-out cell's count moves
    ``N_used`` by ``-(1 - alpha)``: ``(1 - alpha) tau / N_used``, not returned here."""
    in_t, in_c = means
    diff = (in_t - in_c - alpha[..., None] * tau[..., None]) / den[..., None]
    return diff - weight * in_t / nt, diff + weight * in_c / nc


class Linearisation(NamedTuple):
    """Subclassification's estimate as a linear function of its noisy cells, at the noisy
    point (:func:`subclassification_linearisation`)."""

    usable: Any
    nt: Any  # the used strata's noisy arm counts (1 elsewhere)
    nc: Any
    weight: Any  # each used stratum's weight (0 elsewhere)
    mean_t: Any  # the arms' overall means over the used strata, in [-B/2, B/2]
    mean_c: Any
    d_nt: Any  # d tau / d count per cell, the left-out cells' included
    d_nc: Any
    var_t: Any  # each arm's pooled within-cell variance, clamped to [0, B^2/4]
    var_c: Any
    cell_t: Any  # the cells' noisy arm means as the estimate reads them (centred, in [-B, B])
    cell_c: Any
    den: Any  # N_used
    share_used: Any  # the weight of the used strata's own sizes in N_used
    #: the controls' weight on their cell means where it differs from the treated's
    #: (``weight``): an estimate that is not a difference of the two arms' means band by band
    #: (the propensity release's regression on the index); None: the same
    weight_c: Any = None


def subclassification_linearisation(
    c: PublicConstants, v: Mapping[str, Any], tau: Any
) -> Linearisation:
    """The derivatives of the subclassification estimate ``tau`` (its delta method's,
    :func:`_subclassification_variance`) with respect to each noisy count, its weights on the
    arm means (``d tau / d s = w / n``), the arms' pooled within-cell variances, and the arms'
    overall means over the used strata (the crude difference a propensity release compares
    ``tau`` with). Post-processing of the noisy cells."""
    u = _used_cells(c, v)
    usable, nt, nc, den = u.usable, u.nt, u.nc, u.den
    weight = u.size / den[..., None]
    in_t = np.clip(u.m_t, -c.half_b, c.half_b)
    in_c = np.clip(u.m_c, -c.half_b, c.half_b)
    t = np.nan_to_num(np.asarray(tau, dtype=np.float64))
    d_nt, d_nc = _count_gradients(nt, nc, (in_t, in_c), weight, u.share_used, t, den)
    left = ((1.0 - u.share_used) * t / den)[..., None]
    tot_t = np.maximum(np.sum(np.where(usable, u.n_t, 0.0), axis=-1), 1.0)
    tot_c = np.maximum(np.sum(np.where(usable, u.n_c, 0.0), axis=-1), 1.0)
    mean_t = np.clip(np.sum(np.where(usable, u.s_t, 0.0), axis=-1) / tot_t, -c.half_b, c.half_b)
    mean_c = np.clip(np.sum(np.where(usable, u.s_c, 0.0), axis=-1) / tot_c, -c.half_b, c.half_b)
    raw_t = _pooled_variance(usable, nt, u.s_t, u.q_t)
    raw_c = _pooled_variance(usable, nc, u.s_c, u.q_c)
    return Linearisation(
        usable,
        nt,
        nc,
        np.where(usable, weight, 0.0),
        mean_t,
        mean_c,
        np.where(usable, d_nt, left),
        np.where(usable, d_nc, left),
        np.clip(raw_t, 0.0, c.max_var),
        np.clip(raw_c, 0.0, c.max_var),
        u.m_t,
        u.m_c,
        den,
        u.share_used,
    )


def assemble_subclassification(c: PublicConstants, v: Mapping[str, Any]) -> Outputs:
    """The average effect over the patients of the strata where both treatments occur, from the
    three noisy vectors (clipped, :func:`_clipped_cells`; or one within-cell variance for
    both arms, :mod:`._squares_sums`): the strata whose noisy arm counts
    both reach ``min_count`` are used, each weighted by its noisy size over the size of the
    strata used (:func:`_used_size`: the public ``N`` where every stratum is used), less the
    ratio bias of the noisy arm means (:func:`_ratio_bias`),
    clipped to ``[-B, B]``. The noisy arm means are clipped to ``[-B/2, 3B/2]``, not to the
    outcome's range ``[0, B]``, which biased them inwards wherever a true mean is near 0 or
    ``B``; the delta-method variance reads them clipped to ``[0, B]``, the range of the true
    means whose derivatives it estimates. Variance: :func:`_subclassification_variance`."""
    u = _used_cells(c, v)
    usable, nt, nc, m_t, m_c, den = u.usable, u.nt, u.nc, u.m_t, u.m_c, u.den
    weight = u.size / den[..., None]
    tau = np.clip(
        np.sum(weight * (m_t - m_c), axis=-1) - _ratio_bias(c, usable, nt, nc, m_t, m_c) / den,
        -c.bound,
        c.bound,
    )
    sampling, sampling_raw, noise_var, unestimated_var = _subclassification_variance(
        c,
        usable,
        (nt, nc, u.n_t, u.n_c),
        (u.s_t, u.s_c, u.q_t, u.q_c),
        (m_t, m_c),
        tau,
        (den, u.share_used),
    )
    usable_weight = np.sum(u.size, axis=-1) / c.n
    usable_strata = np.sum(usable, axis=-1).astype(np.float64)
    return _outputs(
        usable_strata > 0.0,
        UNRESOLVED_SUBCLASSIFICATION,
        tau,
        sampling,
        sampling_raw,
        noise_var,
        unestimated_var,
        usable_strata,
        usable_weight,
    )


def _used_size(c: PublicConstants, v: Mapping[str, Any], usable: Any, size: Any) -> tuple[Any, Any]:
    """``N_used``, the size of the strata used, read two ways and combined by their noise: the
    sum of their noisy sizes ``W`` (noise from ``2 k_used`` counts) and ``N - L``, ``L`` the
    noisy size of the strata left out (their counts not clipped at 0: a zero count's noise has
    mean 0; noise from ``2 k_left`` counts, and none shared with the estimate's numerator):
    ``(k_left W + k_used (N - L)) / |X|``, never below ``min_count``. Where every stratum is used
    it is the public ``N``. Also the weight ``k_left / |X|`` of ``W`` in it."""
    n = float(c.n)
    signed = np.clip(np.asarray(v["counts"], dtype=np.float64), -n, n)
    left = np.sum(np.where(usable, 0.0, signed[..., 0::2] + signed[..., 1::2]), axis=-1)
    k_used = np.sum(usable, axis=-1)
    alpha = (c.n_strata - k_used) / float(c.n_strata)
    den = alpha * np.sum(size, axis=-1) + (1.0 - alpha) * (n - left)
    return np.maximum(den, c.min_count), alpha


def _subclassification_variance(
    c: PublicConstants,
    usable: Any,
    counts: tuple[Any, Any, Any, Any],
    sums: tuple[Any, Any, Any, Any],
    means: tuple[Any, Any],
    tau: Any,
    used_size: tuple[Any, Any],
) -> tuple[Any, Any, Any, Any]:
    """Subclassification's ``(sampling, raw sampling, noise, left-out)`` variances.

    Sampling, by the linearisation of ``tau = sum_x n_x d_x / sum_x n_x`` (a sandwich): each
    record's influence is its stratum's weight times its deviation from its cell's mean over
    its arm's size, plus ``(d_x - tau) / N_used``; so ``sum_x w_x^2 (s2_t / n_t + s2_c / n_c)``
    with each arm's within-cell variance ``s2`` pooled over the strata used
    (:func:`_pooled_variance`, clamped to ``[0, B^2/4]``), plus the spread of the stratum effects
    ``sum_x n_x (d_x - tau)^2 / N_used^2`` (what a new sample's stratum sizes move), each noisy
    ``(d_x - tau)^2`` less what sampling and noise add to it. Noise, by the delta method at the
    noisy point (``Var Lap(b) = 2 b^2`` for each noisy count and sum that enters ``tau``,
    including the left-out strata's counts through ``N_used``). Left out: if the strata left out
    (a share ``u`` of the noisy counts) are like those used, their mean effect differs from
    ``tau`` by the spread between strata over their effective number:
    ``u^2 sigma_b^2 sum_left n^2 / (sum_left n)^2``."""
    nt, nc, n_t, n_c = counts
    s_t, s_c, q_t, q_c = sums
    m_t, m_c = means
    den, alpha = used_size
    den2 = den[..., None]
    size = np.where(usable, n_t + n_c, 0.0)
    weight = size / den2
    w2 = weight * weight
    t = tau[..., None]
    # the delta method's derivatives at means in the true means' range [0, B]
    in_t = np.clip(m_t, -c.half_b, c.half_b)
    in_c = np.clip(m_c, -c.half_b, c.half_b)
    d_nt, d_nc = _count_gradients(nt, nc, (in_t, in_c), weight, alpha, tau, den)
    per_stratum = c.v_s * w2 * (1.0 / nt**2 + 1.0 / nc**2) + c.v_n * (d_nt**2 + d_nc**2)
    left_cells = 2.0 * np.sum(~usable, axis=-1)
    noise_var = np.sum(np.where(usable, per_stratum, 0.0), axis=-1)
    noise_var = noise_var + left_cells * c.v_n * ((1.0 - alpha) * tau / den) ** 2
    raw_t = _pooled_variance(usable, nt, s_t, q_t)
    raw_c = _pooled_variance(usable, nc, s_c, q_c)
    var_t, var_c = np.clip(raw_t, 0.0, c.max_var), np.clip(raw_c, 0.0, c.max_var)
    d_var = var_t / nt + var_c / nc + c.v_s * (1.0 / nt**2 + 1.0 / nc**2)
    d_var = d_var + c.v_n * (in_t**2 / nt**2 + in_c**2 / nc**2)
    spread = np.sum(np.where(usable, size * ((m_t - m_c - t) ** 2 - d_var), 0.0), axis=-1)
    spread = spread / den**2
    within_raw = np.sum(w2 * (raw_t / nt + raw_c / nc), axis=-1)
    within = np.sum(w2 * (var_t / nt + var_c / nc), axis=-1)
    sampling_raw = within_raw + spread
    sampling = within + np.maximum(spread, 0.0)
    left = np.where(usable, 0.0, np.maximum(n_t, 0.0) + np.maximum(n_c, 0.0))
    left_total = np.sum(left, axis=-1)
    u = left_total / np.maximum(left_total + np.sum(size, axis=-1), 1.0)
    conc = np.sum(left * left, axis=-1) / np.maximum(left_total, 1.0) ** 2
    sigma_b2 = np.maximum(spread, 0.0) * den
    unestimated = u * u * sigma_b2 * conc
    # the within-cell variances are estimated from noisy squares: the published variance carries
    # their own noise (_noisy_variance_stretch), each part stretched alike
    a_t = np.sum(np.where(usable, w2 / nt, 0.0), axis=-1)
    a_c = np.sum(np.where(usable, w2 / nc, 0.0), axis=-1)
    var_within, bias_within = within_variance_noise(
        c, usable, ((nt, in_t, raw_t), (nc, in_c, raw_c)), (a_t, a_c)
    )
    stretch = _noisy_variance_stretch(sampling + noise_var + unestimated, var_within, bias_within)
    return sampling * stretch, sampling_raw * stretch, noise_var * stretch, unestimated * stretch


def _pooled_variance_noise(
    c: PublicConstants, usable: Any, nn: Any, m: Any, raw: Any
) -> tuple[Any, Any]:
    """``(variance, bias)`` of one arm's pooled within-cell variance as the release uses it
    (clamped at 0; ``raw`` unclamped, :func:`_pooled_variance`; ``usable`` a mask, or the plan's
    probabilities that each cell is used), from public noise scales at the noisy point (the
    plan: at the assumed values): each used cell's ``q - s^2/n`` moves by its squares' noise
    (variance ``v_q``), its sum's (``-2 m h``) and its count's (``(q_per_count + m^2) e``, ``m``
    the centred cell mean), over the degrees of freedom squared, plus the sampling variance of
    a variance estimate ``2 s2^2 / df`` (normal within-cell values): ``sigma^2``; the clamp at 0
    narrows its spread and adds to its mean (:func:`_clamped_moments`)."""
    m2 = m * m
    per_cell = c.v_q + 4.0 * m2 * c.v_s + c.v_n * (c.q_per_count + m2) ** 2
    noise = np.sum(usable * per_cell, axis=-1) + sums_variance(c)  # each arm's sum, if queried
    df = pooled_df(usable, nn)
    value = raw[..., 0]
    sigma2 = noise / df**2 + 2.0 * np.clip(value, 0.0, c.max_var) ** 2 / df
    return _clamped_moments(value, sigma2)


def within_variance_noise(
    c: PublicConstants,
    usable: Any,
    arms: tuple[tuple[Any, Any, Any], tuple[Any, Any, Any]],
    weights: tuple[Any, Any],
) -> tuple[Any, Any]:
    """``(variance, bias)`` of the sampling part's within-cell term ``a_t sigma_t^2 + a_c
    sigma_c^2`` as the release reads it (each arm's variance clamped at 0): each arm's pooled
    variance's own (:func:`_pooled_variance_noise`, independent), or where one variance serves
    both arms (:attr:`PublicConstants.common_scale`, :mod:`._squares_sums`) that one's, times
    ``a_t + a_c``. ``arms``: ``((n_t, m_t, raw_t), (n_c, m_c, raw_c))``, the arms' counts,
    centred cell means and unclamped pooled variances ``(..., 1)``; the release's and the plan's
    (at its probabilities that each stratum is used)."""
    (nt, m_t, raw_t), (nc, m_c, _) = arms  # one variance: both raw values are the same
    a_t, a_c = weights
    if c.common_scale is None:
        (var_t, bias_t), (var_c, bias_c) = (
            _pooled_variance_noise(c, usable, nn, mm, raw) for nn, mm, raw in arms
        )
        return a_t**2 * var_t + a_c**2 * var_c, a_t * bias_t + a_c * bias_c
    var, bias = _clamped_moments(*variance_noise(c, usable, ((nt, m_t), (nc, m_c)), raw_t))
    return (a_t + a_c) ** 2 * var, (a_t + a_c) * bias


def _noisy_variance_stretch(total: Any, var_total: Any, bias: Any = 0.0) -> Any:
    """The factor a variance estimate ``total`` whose own noise has variance ``var_total`` (and
    mean ``bias``, what a clamp at 0 adds) is multiplied by so that its normal 95% interval keeps
    its coverage (docs/explanation/adjusted.md, "A noisy variance's interval"). An interval ``+- z
    sqrt(V (1 + d))`` covers ``2 Phi(z sqrt(1 + d)) - 1``; to second order in a ``d`` of mean
    ``mu`` and variance ``r^2`` that is ``0.95 + phi(z) z mu - phi(z) z (z^2 + 1) (r^2 + mu^2) /
    4``, and a factor ``1 + k`` adds ``phi(z) z k``: so ``1 + kappa (r^2 + mu^2) - mu``, ``kappa =
    (z^2 + 1) / 4``, ``r^2 = var_total / total^2``, ``mu = bias / total``, never below 1. In
    variance units that adds ``m^2 / total - bias`` (``m^2 = kappa (var_total + bias^2)``), which
    grows without end as the estimate falls towards 0: a release whose estimate came out low
    would publish a wider interval than one whose estimate came out right. So below ``total =
    m`` the addition is ``m - bias`` (the published variance never falls as the estimate rises;
    measured: forced fixed effects at eps 40 covered 0.984 without it, 0.958 with it). (Student
    ``t`` at Satterthwaite's ``2 / r^2`` degrees of freedom agrees to first order in ``r^2``; it
    assumes a chi-square spread, where this noise is symmetric, and over-covered: measured.)"""
    safe = np.where(total > 0.0, total, 1.0)
    # (a clamped variance's formula can round below 0 far from the clamp)
    m2 = (INTERVAL_Z**2 + 1.0) / 4.0 * (np.maximum(var_total, 0.0) + bias * bias)
    added = m2 / np.maximum(safe, np.sqrt(m2)) - bias
    return np.where(total > 0.0, np.maximum(1.0 + added / safe, 1.0), 1.0)


def _ratio_bias(c: PublicConstants, usable: Any, nt: Any, nc: Any, m_t: Any, m_c: Any) -> Any:
    """The bias of the subclassification sum from its noisy denominators, estimated at the noisy
    point (docs/explanation/adjusted.md, "The ratio bias and its correction"), times the size of the strata
    used ``N_used`` (the caller divides by it).

    A stratum's term ``(n_t + n_c) (s_t/n_t - s_c/n_c)``, with noisy counts, is
    ``(s_t - s_c) + (n_c s_t/n_t - n_t s_c/n_c)``; the first part is unbiased, and the second
    is biased by ``n_c m_t (E[n_t/n_hat_t] - 1) - n_t m_c (E[n_c/n_hat_c] - 1)`` (``m`` the
    centred arm means; the count noise is independent of everything else). For Laplace noise of
    variance ``v_n``, ``E g(e) = g(0) + (v_n/2) E g''(e)``, so ``E[n/n_hat] - 1 = v_n n
    E[1/n_hat^3]``: the plug-in ``v_n n_hat_c m_t / n_hat_t^2`` is unbiased for it, except near
    the threshold ``min_count``, where the identity does not hold for the counts that are kept
    and the plug-in over-states the bias (up to 4 times). The denominator is damped there,
    ``n_hat^2 + RATIO_DAMPING v_n^2 / n_hat^2``: a relative change of ``RATIO_DAMPING (v_n /
    n_hat^2)^2``, 4% at ten count-noise scales, 0.25% at twenty. Post-processing only."""
    v_n = c.v_n
    damp = RATIO_DAMPING * v_n * v_n
    term_t = nc * m_t / (nt * nt + damp / (nt * nt))
    term_c = nt * m_c / (nc * nc + damp / (nc * nc))
    return v_n * np.sum(np.where(usable, term_t - term_c, 0.0), axis=-1)


def _pooled_variance(usable: Any, nn: Any, ss: Any, qq: Any) -> Any:
    """The within-cell variance of one arm, pooled over the usable strata (sum of within-cell
    squared deviations over their degrees of freedom, :func:`._fe_squares.pooled_df`; centring
    does not change a variance): the noise of the squares averages out over the strata instead
    of being clamped cell by cell."""
    dev = np.sum(np.where(usable, qq - ss * ss / nn, 0.0), axis=-1)
    return (dev / pooled_df(usable, nn))[..., None]


def _outputs(
    resolved: Any,
    unresolved_reason: str,
    tau: Any,
    sampling: Any,
    sampling_raw: Any,
    noise_var: Any,
    unestimated_var: Any,
    usable_strata: Any,
    usable_weight: Any,
) -> Outputs:
    """Both weightings' outputs: the variance is the sampling part (clamped; ``raw_variance``
    unclamped) plus the noise variance plus the variance of what is not estimated. Where
    ``resolved`` is False the estimate, its variances and their parts are NaN (a row every
    combiner leaves out; the release publishes ``resolved`` False with ``unresolved_reason``);
    the counts of what was usable (0 strata, weight 0) stay."""
    nan = np.where(resolved, 0.0, np.nan)  # adds NaN where unresolved, nothing elsewhere
    diagnostics = {
        "sampling_variance_dp": sampling_raw + nan,
        "noise_variance": noise_var + nan,
        "unestimated_variance": unestimated_var + nan,
        "usable_strata": usable_strata,
        "usable_weight": usable_weight,
        "resolved": np.asarray(resolved, dtype=np.float64),
    }
    return Outputs(
        tau + nan,
        sampling + noise_var + unestimated_var + nan,
        sampling_raw + noise_var + unestimated_var + nan,
        diagnostics,
        unresolved_reason,
    )
