"""What the adjusted release makes checkable, drawable and predictable from public values alone:
the weighting a study's releases use (:func:`study_weighting`, the public rule of ``"auto"`` over
every site's public design; :func:`adjusted_weighting`, the rule at one site),
the rules a published estimate satisfies (:func:`plausible`), its noise in the bootstrap world
(:func:`noise_model`) and its predicted variances for ``dpate plan`` (:func:`predict`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms._rules import (
    RTOL,
    at_least,
    clipped_tau_problems,
    no_arm_sizes_problems,
)
from dpate_core.mechanisms._weighted_query import query_site
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, exact
from dpate_core.statistics import COUNT_SENSITIVITY, histogram_scales

from ._fe_queries import denominator_variance, query_weights
from ._fe_squares import SQUARES, coefficients, query_variance
from ._release import (
    AUTO_RATIO,
    DEFAULT_SPLIT,
    DEFAULT_SPLIT_QUERIES,
    THRESHOLD_FACTOR,
    count_scale,
    public_constants,
    query_sites,
    resolve_weighting,
    sum_epsilon,
)
from ._squares_sums import query_site as squares_sums_site
from ._squares_sums import with_scale as with_sums_scale
from ._weightings import (
    FIELLER_BELOW,
    INTERVAL_Z,
    PLUG_IN_CORRECTED_FROM,
    PublicConstants,
    _clamped_moments,
    _noisy_variance_stretch,
    design_resolution,
    fieller_factor,
    floored_noise_numerator,
    resolution_probability,
    sandwich_noise_variance,
    within_variance_noise,
)

if TYPE_CHECKING:
    from dpate_core.inference import NoiseDraws
    from dpate_core.mechanisms._estimator import StudySite
    from dpate_core.planning import PredictionInputs, SitePrediction
    from dpate_core.release import SiteEstimate

__all__ = [
    "MOSTLY_READ",
    "MOSTLY_RESOLVES",
    "RARELY_RESOLVES",
    "SELECTED_RESOLUTION",
    "adjusted_resolution",
    "adjusted_weighting",
    "cautions",
    "cell_noise_scales",
    "count_kept",
    "noise_model",
    "plausible",
    "predict",
    "required_diagnostics",
    "study_queries",
    "study_weighting",
]


#: ``dpate plan`` notes a fixed-effects site predicted to resolve in fewer than this share of
#: releases (the others publish no estimate: its budget mostly buys "no answer"); the share below
#: which the release itself, reading its public design under the plan's default assumptions,
#: stretches its interval to Fieller's length (:data:`FIELLER_BELOW`)
RARELY_RESOLVES = FIELLER_BELOW
#: below this predicted share the releases that do resolve are selected on their denominator's
#: noise: Fieller's length brings their coverage up but not always to 95% (Synth, 2-10%
#: resolved, since stop 43's histogram: 0.88-0.95, 0.70-0.86 with the delta method; 0.75-0.87
#: and 0.34-0.59 with the three-query cells; docs/explanation/adjusted.md, "The denominator's
#: noise"). Between it and :data:`RARELY_RESOLVES` Fieller's length covers (Synth at 14-39%:
#: 0.965-0.977 since stop 43, 0.90-0.94 before)
SELECTED_RESOLUTION = 0.2
#: from :data:`RARELY_RESOLVES` to this predicted share the release keeps the delta method's
#: interval as it reads it (the release's :data:`PLUG_IN_CORRECTED_FROM`), and the releases that
#: resolve are still selected on their denominator's noise, which pulls them towards 0 in
#: proportion to the effect (Synth, effect half the range, 49-89% resolved: covering 0.939-0.959
#: since stop 43's histogram, whose counts are quieter next to the sums; 0.88-0.91 with the
#: three-query cells); docs/explanation/adjusted.md, "Milder stretches between a half and 0.9,
#: and a narrower delta method" and "The denominator's noise with the histogram (stop 43)"
MOSTLY_RESOLVES = PLUG_IN_CORRECTED_FROM
#: ``dpate plan`` notes a subclassification site predicted to read the strata of less than this
#: share of its estimand's records (:func:`read_share`): it stands for the others as if their
#: effects were like those of the strata it reads, and is biased where they are not (Synth's 384
#: strata at 3,000 and 6,000 records per site, predicted 0.34 and 0.77: pooled coverage
#: 0.84-0.92; docs/explanation/adjusted.md, "What subclassification reads"). The ``"auto"`` rule
#: picks subclassification only where every stratum is read (ten count-noise scales per arm)
MOSTLY_READ = 0.9


def cautions(options: Any, preds: Sequence[SitePrediction]) -> list[str]:
    """The adjusted estimator's cautions (``dpate plan``, ``dpate check`` and the study's
    result): its subclassification sites predicted to read few of their strata
    (:func:`_read_share_notes`), and the fixed-effects sites predicted to
    resolve in fewer than :data:`MOSTLY_RESOLVES` of their releases (one note per predicted
    share, naming its sites): the releases that resolve are selected on their denominator's
    noise. Below :data:`RARELY_RESOLVES` the release widens their intervals to Fieller's length
    where its public design predicts this (:data:`FIELLER_BELOW`), and below
    :data:`SELECTED_RESOLUTION` they can under-cover even so; above it they are pulled towards
    0 in proportion to the effect (measured covering 0.94-0.96 with an effect of half the
    outcome's range since stop 43)."""
    groups: dict[tuple[int, float], list[str]] = {}
    for p in preds:
        share = p.resolved_probability
        if p.weighting == "fixed_effects" and share < MOSTLY_RESOLVES:
            band = next(
                b for b in (SELECTED_RESOLUTION, RARELY_RESOLVES, MOSTLY_RESOLVES) if share < b
            )
            groups.setdefault((round(100 * share), band), []).append(p.site_id)
    notes = _read_share_notes(preds)
    for (percent, band), sites in groups.items():
        note = (
            f"{'site' if len(sites) == 1 else 'sites'} {', '.join(sites)}: fixed effects is "
            f"predicted to resolve its estimate in {percent}% of releases at this budget (under "
            f"the plan's assumptions); the others publish no estimate"
        )
        if band == MOSTLY_RESOLVES:
            note += (
                ", and the releases that resolve are selected on their denominator's noise (more "
                "of them had it inflated), which pulls them towards 0 in proportion to the "
                "effect (with an effect of half the outcome's range they covered 0.94-0.96 in "
                "simulation: docs/explanation/adjusted.md, \"The denominator's noise with the "
                'histogram (stop 43)")'
            )
        else:
            note += (
                ", and those that resolve are the ones whose noise inflated the denominator: "
                f"the release widens their intervals to Fieller's length where its public "
                f"design (N, |X|, epsilon, every stratum filled evenly) predicts fewer than "
                f"{RARELY_RESOLVES:.0%} resolve, so they are wide"
                + (" and can still under-cover" if band == SELECTED_RESOLUTION else "")
                + ' (docs/explanation/adjusted.md, "The denominator\'s noise")'
            )
        notes.append(
            note + '; raise epsilon, add records, use fewer strata, or estimator = "propensity"'
        )
    return notes


def _read_share_notes(preds: Sequence[SitePrediction]) -> list[str]:
    """One note per predicted share for the subclassification sites that read the strata of
    less than :data:`MOSTLY_READ` of their estimand's records."""
    groups: dict[int, list[str]] = {}
    for p in preds:
        if p.weighting == "subclassification" and p.read_share < MOSTLY_READ:
            groups.setdefault(round(100 * p.read_share), []).append(p.site_id)
    return [
        f"{'site' if len(sites) == 1 else 'sites'} {', '.join(sites)}: subclassification is "
        f"predicted to read the strata of {percent}% of the records in its estimand at this "
        f"budget (under the plan's assumptions; the others' noisy arm counts fall below its "
        f"threshold), and stands for the rest as if their effects were like those of the strata "
        f"it reads: where the effect differs in the small strata the estimate is biased beyond "
        f"its interval (Synth's 384 strata at 3,000 and 6,000 records per site: pooled "
        f"coverage 0.84-0.92; the coarse strata of IHDP and Lalonde covered 0.97-0.99; "
        f'docs/explanation/adjusted.md, "What subclassification reads"); adjusted_weighting = '
        f'"auto" or "fixed_effects" reads every stratum, or raise epsilon, add records, use '
        f'fewer strata, or estimator = "propensity"'
        for percent, sites in groups.items()
    ]


def _weighting(options: Any) -> str:
    return "auto" if options is None else str(options.weighting)


def required_diagnostics(options: Any) -> tuple[str, ...]:
    return ("noise_variance", "sampling_variance_dp", "usable_strata", "usable_weight")


def adjusted_weighting(
    weighting: str,
    n: int,
    domain_size: int,
    epsilon: Number,
    split: Sequence[Number] | None = None,
) -> str:
    """The weighting an adjusted release with these public values uses: ``weighting``, or for
    ``"auto"`` the rule of :func:`dpate_core.mechanisms.adjusted.resolve_weighting` (subclassification when
    ``N / (2 |X|) >= AUTO_RATIO * s_n``, ``s_n`` the count noise's scale, and the ratio bias's
    predicted remainder is small)
    with the count scale and the sums' epsilon computed exactly as the
    release computes it. Public values only: ``N`` is published in the site's report, the rest is
    in the spec."""
    if weighting != "auto":  # declared: resolve_weighting checks the name and returns it, the
        # split never enters (it may be the propensity bands' or a binary outcome's): no scales
        return resolve_weighting(weighting, int(n), max(int(domain_size), 1), math.nan, math.nan)
    parts = _release_parts(epsilon, DEFAULT_SPLIT if split is None else split)
    return resolve_weighting(
        weighting, int(n), max(int(domain_size), 1), count_scale(parts), sum_epsilon(parts)
    )


def study_weighting(
    weighting: str, domain_size: int, sites: Sequence[StudySite]
) -> tuple[str, str]:
    """The weighting every site of a study uses, and why (public values only): ``weighting``
    itself when the spec declares one; for ``"auto"``, subclassification when the rule of
    :func:`adjusted_weighting` picks it at every site from the record count ``n`` the spec
    declares for it, its epsilon and split and ``|X|``, else fixed effects (whose estimand is
    defined at every site size), also when some site declares no ``n``. One estimand for the
    whole study: a pooled estimate never blends the two (docs/explanation/adjusted.md, Estimand)."""
    if weighting not in ("auto", "subclassification", "fixed_effects"):
        raise ValueError(
            f"weighting ({weighting!r}) must be one of auto, subclassification, fixed_effects "
            f"(docs/explanation/adjusted.md)"
        )
    if weighting != "auto":
        return weighting, f"declared in the spec (adjusted_weighting = {weighting!r})"
    undeclared = [i for i, s in enumerate(sites) if s.n is None]
    if undeclared or not sites:
        return "fixed_effects", (
            "adjusted_weighting = 'auto' and not every site declares its record count n in the "
            "spec: fixed effects at every site, whose estimand is defined at any site size "
            "(declare n for every site to let the public rule consider subclassification)"
        )
    picks = [
        adjusted_weighting("auto", int(s.n or 0), domain_size, s.epsilon, s.split) for s in sites
    ]
    if all(p == "subclassification" for p in picks):
        return "subclassification", (
            "adjusted_weighting = 'auto': every site has at least "
            f"{AUTO_RATIO} count-noise scales of records per arm per stratum (N / (2 |X|) >= "
            f"{AUTO_RATIO} * s_n, s_n = sqrt(2) 2 / eps_h the count noise's scale, with the n "
            "the spec declares) and a small predicted "
            "ratio bias, so subclassification at every site"
        )
    small = [i for i, p in enumerate(picks) if p != "subclassification"]
    return "fixed_effects", (
        f"adjusted_weighting = 'auto': {len(small)} of {len(sites)} site(s) hold too few "
        f"records per arm per stratum for subclassification at their budget (N / (2 |X|) < "
        f"{AUTO_RATIO} * s_n, s_n = sqrt(2) 2 / eps_h the count noise's scale, or a large "
        "predicted ratio bias), so fixed effects at every "
        "site"
    )


#: ``weighted_sum = "auto"`` releases the fixed-effects queries when every site's declared ``n x
#: epsilon`` is at least this (every design measured from 1,000 on the bench Synth, 24 and 384
#: strata: 24-53% narrower, covering 0.953-0.969; docs/explanation/adjusted.md, "The queries by
#: default"); ``weighted_sum = true`` below it carries a caution
QUERIES_FROM = 1000
#: ... or when its cells are thinner than this many count-noise scales: ``n / (2 |X|) <
#: QUERIES_SPARSE * s_n``, ``s_n`` the histogram's count-noise scale at the histogram-alone split
#: (the histogram's products of two noises, ``|X| v_n^2``, are then most of its noise; IHDP's 128
#: and Lalonde's 192 strata at 240-374 records: 3-26% narrower combined, while the coarse strata
#: at 3.1 and more records per cell came out 1-5% wider)
QUERIES_SPARSE = Fraction(1, 2)


def study_queries(
    weighted_sum: bool | str, mode: str, domain_size: int, sites: Sequence[StudySite]
) -> tuple[bool, str]:
    """Whether every site of a study releases the fixed-effects queries (``weighted_sum``), and
    why, from public values only: ``true`` / ``false`` as declared; ``"auto"``: only for fixed
    effects (``mode``, the study's weighting) and a continuous outcome, no site declaring a
    split of its own (then its number of parts decides: four are the queries'), and every site
    declaring ``n`` with ``n x epsilon >= QUERIES_FROM`` or cells thinner than ``QUERIES_SPARSE``
    count-noise scales (docs/explanation/adjusted.md, "The queries by default")."""
    if isinstance(weighted_sum, bool):
        return weighted_sum, ""
    if mode != "fixed_effects":
        return False, ""  # subclassification reads no fixed-effects sums
    declared = [s for s in sites if s.declared]
    if declared:
        on = all(len(s.split) == len(DEFAULT_SPLIT_QUERIES) for s in declared)
        return on, (
            f'weighted_sum = "auto": {"with" if on else "without"} the fixed-effects queries, as '
            f"the declared budget_split's {len(declared[0].split)} parts lay out"
        )
    if not sites or any(s.n is None for s in sites):
        return False, (
            'weighted_sum = "auto": without the fixed-effects queries, since not every site '
            "declares its record count n (declare n for every site to let the public rule "
            "consider them)"
        )
    scales = [count_scale(_release_parts(s.epsilon, DEFAULT_SPLIT)) for s in sites]
    large = [int(s.n or 0) * Fraction(s.epsilon) >= QUERIES_FROM for s in sites]
    sparse = [
        int(s.n or 0) / (2 * max(int(domain_size), 1)) < float(QUERIES_SPARSE) * scale
        for s, scale in zip(sites, scales, strict=True)
    ]
    rule = (
        f"n x epsilon >= {QUERIES_FROM}, or cells thinner than {QUERIES_SPARSE} count-noise "
        f"scale (n / (2 |X|) < {QUERIES_SPARSE} s_n)"
    )
    if all(a or b for a, b in zip(large, sparse, strict=True)):
        return True, (
            f'weighted_sum = "auto": with the fixed-effects queries, every site having {rule} '
            "(docs/explanation/adjusted.md, 'The queries by default')"
        )
    left = sum(1 for a, b in zip(large, sparse, strict=True) if not (a or b))
    return False, (
        f'weighted_sum = "auto": without the fixed-effects queries, {left} of {len(sites)} '
        f"site(s) having neither {rule} (docs/explanation/adjusted.md, 'The queries by "
        "default')"
    )


def _release_parts(epsilon: Number, shares: Sequence[Number]) -> tuple[PrivacyParams, ...]:
    """The budget parts of a release at ``epsilon`` split by ``shares`` (one part: a binary
    outcome), exactly as the release splits them."""
    total = PrivacyParams(exact(epsilon, "epsilon"), Fraction(0))
    return BudgetSplit.of(shares, len(shares)).apply(total)


def plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """:func:`plan_adjusted_from_statistics`: every post-processing bound is exact. ``tau`` is
    clipped to ``[-B, B]`` (subclassification averages the used strata's clipped arm means over
    the size of the strata used, which is itself a noisy count, so ``tau`` has no tighter public
    bound); ``usable_weight`` is the used strata's noisy size (each count clipped to ``[0, N]``)
    over ``N``, at most 2 per stratum; fixed effects: ``usable_weight`` is 1. A resolved release
    uses at least one stratum (with none it is unresolved). The noise variance is a sum of
    non-negative terms."""
    out: list[str] = []
    d = e.diagnostics
    nv, strata, weight = d["noise_variance"], d["usable_strata"], d["usable_weight"]
    if not (strata == math.floor(strata) and 1 <= strata <= domain_size):
        out.append(
            f"diagnostics.usable_strata ({strata}) must be a whole number of strata in "
            f"[1, |X| = {domain_size}]: a resolved release uses at least one stratum"
        )
    if not 0 <= weight <= 2.0 * strata * (1.0 + RTOL):
        out.append(
            f"diagnostics.usable_weight ({weight}) must lie in [0, 2 * usable_strata]: each "
            f"stratum's weight is a clipped noisy count over N"
        )
    if not nv >= 0:
        out.append(f"diagnostics.noise_variance ({nv}) must not be negative")
    if not at_least(e.variance, nv):
        out.append(
            f"variance ({e.variance}) is below the report's own noise variance ({nv}): a "
            f"released variance is the clipped sampling part + noise variance"
        )
    # (no variance >= raw_variance rule: the within-cell variances are clipped to [0, B^2/4])
    out += clipped_tau_problems(e)
    return out + no_arm_sizes_problems(e, "the adjusted release does not publish them")


def noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """DP subclassification (``dpate_core.mechanisms.adjusted``, ``docs/explanation/adjusted.md``):
    the error is a sum of
    Laplace terms over the usable strata's cells (sums and counts, delta method), whose total
    variance is the published ``noise_variance``. Per-cell counts are not published, so the
    model spreads that variance evenly over ``2 k`` Laplace terms, ``k`` the published
    ``usable_strata`` (capped at 32 terms, where the sum is already close to normal): one stratum
    gives the shape of a difference of two Laplaces, many give a normal. The sampling part's noise
    scale depends on unpublished cell counts: the released variance is held."""
    from dpate_core.inference import NoiseDraws

    k = int(min(max(site.diagnostics.get("usable_strata", 1.0), 1.0), 16.0))
    terms = rng.laplace(0.0, 1.0, (reps, 2 * k)).sum(axis=1)
    noise = math.sqrt(site.noise_variance / (2.0 * 2 * k)) * terms
    return NoiseDraws(noise, np.full(reps, site.variance))


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
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
    mode = adjusted_weighting(_weighting(inp.options), d.n, inp.domain_size, d.epsilon, d.split)
    if mode == "fixed_effects":
        return _adjusted_fixed_effects(inp)
    return _adjusted_subclassification(inp)


def _counts(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray]:
    """The assumed arm counts per stratum: ``balanced_counts`` over the assumed occupied
    strata, the same treated share in each, or where the plan states the propensity's spread
    (``propensity_sd``) the share varying between them as it says (``spread_counts``); or the
    ones the inputs carry (:attr:`PredictionInputs.strata_counts`)."""
    from dpate_core.planning import balanced_counts, spread_counts

    if inp.strata_counts is not None:
        return inp.strata_counts
    a = inp.assumptions
    even = balanced_counts(inp.design.n, inp.domain_size, a.arm_share, a.occupied(inp.domain_size))
    return even if a.propensity_sd is None else spread_counts(*even, a.propensity_sd)


def cell_noise_scales(parts: Sequence[PrivacyParams], bound: float) -> tuple[float, float]:
    """The plan's ``(count scale, sums scale)`` for the cells' budget parts: the cells'
    histogram at the first part's ``eps`` (two parts, the squares the second; one, a binary
    outcome's ``(cell, outcome)`` histogram), the scales of equal variance
    (:func:`dpate_core.statistics.histogram_scales`); each count's noise is the sum of two
    independent Laplace ``2 / eps`` (its tail: :func:`count_kept`)."""
    return histogram_scales(COUNT_SENSITIVITY / parts[0].epsilon_float, bound)


def count_kept(n: np.ndarray, m: float, scale_n: float) -> np.ndarray:
    """For true counts ``n`` whose noise is a histogram's (the sum of two independent Laplace
    of scale ``b = scale_n / sqrt(2)``, a cell's two bins: the variance of one Laplace of scale
    ``scale_n``), the probability that the noisy count reaches ``m``: the tail ``P(S >= c) =
    e^(-c/b) (2 + c/b) / 4`` for ``c >= 0`` (the density ``(1 + |x|/b) e^(-|x|/b) / (4 b)``)."""
    c = m - np.asarray(n, dtype=np.float64)
    u = np.abs(c) / (scale_n / math.sqrt(2.0))
    tail = 0.25 * np.exp(-u) * (2.0 + u)
    return np.asarray(np.where(c <= 0, 1.0 - tail, tail), dtype=np.float64)


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
    b = inp.bound
    scale_n, b_s = cell_noise_scales(inp.parts(), b)  # the squares do not enter
    v_n, v_s = 2.0 * scale_n**2, 2.0 * b_s**2
    used = _strata_used(inp)
    if used is None:
        return math.inf, math.inf, 0.0, math.inf
    t, c, p, m = used
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
    stretch, clamped = _noisy_stretch(inp, (p, t, c, w), (m_t, m_c), sd2, sampling, noise)
    sampling, noise = (sampling + clamped) * stretch, noise * stretch
    return sampling, noise, 1.0 - float(np.prod(1.0 - p)), sampling + noise


def _strata_used(
    inp: PredictionInputs,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """Subclassification's strata with both arms in the assumed counts: their arm counts ``t``,
    ``c``, the probability ``p`` that both noisy arm counts reach the release's threshold ``m =
    max(2, THRESHOLD_FACTOR s_n)`` (the stratum is read), and ``m``; None where no stratum holds
    both arms."""
    scale_n, _ = cell_noise_scales(inp.parts(), inp.bound)
    tc, cc = _counts(inp)
    both = (tc > 0) & (cc > 0)
    if not both.any():
        return None
    t, c = tc[both].astype(float), cc[both].astype(float)
    m = max(2.0, THRESHOLD_FACTOR * scale_n)
    return t, c, count_kept(t, m, scale_n) * count_kept(c, m, scale_n), m


def read_share(inp: PredictionInputs) -> float:
    """The expected share of the estimand's records (those of the strata holding both arms)
    that lie in the strata the release reads: ``sum p_x (n_t + n_c) / sum (n_t + n_c)`` over
    those strata at the assumed counts, ``p_x`` the probability that both noisy arm counts reach
    the threshold (:func:`_strata_used`). Fixed effects reads every stratum: 1. The release
    stands for the strata it does not read as if their effects were like those it reads
    (docs/explanation/adjusted.md, "Post-processing (free): subclassification", step 5)."""
    d = inp.design
    if adjusted_weighting(_weighting(inp.options), d.n, inp.domain_size, d.epsilon, d.split) == (
        "fixed_effects"
    ):
        return 1.0
    used = _strata_used(inp)
    if used is None:
        return 0.0
    t, c, p, _ = used
    return float(np.sum(p * (t + c)) / np.sum(t + c))


def _noisy_stretch(
    inp: PredictionInputs,
    strata: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    means: tuple[float, float],
    sd2: float,
    sampling: float,
    noise: float,
) -> tuple[float, float]:
    """Subclassification's stretch for the noise of its within-cell variance estimate
    (``_noisy_variance_stretch``, as the release computes it) at the assumed counts, centred
    arm means and within-cell variance, each stratum weighted by the probability ``p`` that it
    is used, and what the release's clamp of that estimate at 0 adds to its sampling part on
    average (``_weightings.within_variance_noise``): ``(stretch, added)``. The release reads the
    stretch at its sampling part with that addition in it, as the plan does: the stretch is 1
    wherever the squares are well estimated, more where the outcome's spread within a stratum is
    small next to the squares' noise (Synth at eps 40 per site: 1.3); the addition matters where
    the squares are mostly noise (the propensity release's band cells at a few hundred records
    per site, whose squares' vector added about a tenth to its reported variance)."""
    p, t, c, w = strata
    public = _cell_constants(inp)
    within = np.array([sd2])
    arms = ((t, np.full(t.shape, means[0]), within), (c, np.full(c.shape, means[1]), within))
    weights = (float(np.sum(p * w * w / t)), float(np.sum(p * w * w / c)))
    var_within, bias_within = within_variance_noise(public, p, arms, weights)
    added = float(bias_within)
    total = np.array(sampling + added + noise)
    return float(_noisy_variance_stretch(total, var_within, bias_within)), added


def _cell_constants(inp: PredictionInputs) -> PublicConstants:
    """The release's :class:`PublicConstants` at the plan's budget: the cells' histogram at the
    first part, the squares at the second (subclassification: their vector, or with
    :attr:`~dpate_core.planning.PredictionInputs.squares_sums` the used cells' squares as sums,
    :mod:`._squares_sums`; fixed effects: their one query, :mod:`._fe_squares`; a binary
    outcome: one part, its squares the counts times ``B^2/4``)."""
    b = inp.bound
    parts = inp.parts()
    scale_n, b_s = cell_noise_scales(parts, b)
    binary = len(parts) == 1
    scales = [scale_n, b_s]
    if not binary:  # the squares' Laplace scale, sensitivity B^2/2 in outcome units
        scales.append(b * b / (2.0 * parts[1].epsilon_float))
    if inp.squares_sums is not None:  # the used cells' squares as sums (._squares_sums)
        site = squares_sums_site(inp.squares_sums, parts[1], inp.design.n, 2 * inp.domain_size)
        public = public_constants(inp.design.n, b, inp.domain_size, scales[:2])
        return with_sums_scale(public, inp.squares_sums, site.value_scale)
    public = public_constants(inp.design.n, b, inp.domain_size, scales, binary=binary)
    if binary:
        return public
    site = query_site(SQUARES, parts[1], inp.design.n, 2 * inp.domain_size)
    return dataclasses.replace(public, squares_scale=site.value_scale)


def _sandwich_stretch(
    inp: PredictionInputs,
    counts: tuple[np.ndarray, np.ndarray],
    means: tuple[float, float],
    sd2: float,
    values: tuple[float, float],
) -> float:
    """Fixed effects' stretch for the noise of its sandwich (``_noisy_variance_stretch`` of
    :func:`._weightings.sandwich_noise_variance`, clamped at 0, as the release computes it) at
    the assumed counts, centred arm means and within-cell variance; ``values``: the assumed
    sampling variance and the whole variance before the stretch."""
    t, c = counts
    cnt, s, q = (np.empty(2 * t.size) for _ in range(3))
    for arm, (n, m) in enumerate(((c, means[1]), (t, means[0]))):
        cnt[arm::2], s[arm::2], q[arm::2] = n, n * m, n * (sd2 + m * m)
    big_d = float(np.sum(t * c))
    tau = np.asarray(inp.assumptions.effect)
    public = _cell_constants(inp)
    # the squares' query at these counts (._fe_squares; a binary outcome has none)
    var_l = query_variance(public, coefficients(public, cnt)[0])
    sigma2 = sandwich_noise_variance(public, (cnt, s, q), tau, np.asarray(big_d), var_l)
    spread, bias = _clamped_moments(np.asarray(values[0]), sigma2)
    return float(_noisy_variance_stretch(np.asarray(values[1]), spread, bias))


#: the points of the quadrature over the resolved releases' noisy denominators (the plan)
_QUADRATURE = 64
#: how many noisy histograms the plan simulates for the fixed-effects queries' caps and weights
#: (seeded numpy noise: a plan is public and reproducible, never a release)
QUERY_DRAWS = 32
QUERY_SEED = 20261130


def _simulated_queries(
    inp: PredictionInputs,
    parts: Sequence[PrivacyParams],
    counts: tuple[np.ndarray, np.ndarray],
    means: tuple[float, float],
    cell_scales: tuple[float, float],
) -> tuple[Callable[[float], float], float, tuple[float, float]]:
    """The fixed-effects queries' noise at the assumed counts: :data:`QUERY_DRAWS` noisy
    histograms of the cells (each count's noise two Laplace bins ``a + b``, its centred sum's
    ``(B/2)(a - b)``, as the release's two-end histogram), the release's own caps, weights,
    ``V(t)`` with its floor and combined denominator variance (:func:`._fe_queries.query_weights`,
    :func:`._weightings.floored_noise_numerator`) on each, averaged: ``(V(t) without the sampling
    part, Var(D), the queries' scales)``. The caps follow the noisy counts, so the prediction
    reads the assumed occupancy (``occupied_strata``), not only the mean cell."""
    t, c = counts
    k, b = t.size, inp.bound
    n = inp.design.n
    numerator, denominator = query_sites(parts, n, k)
    scales = (numerator.value_scale, denominator.value_scale)
    const = dataclasses.replace(public_constants(n, b, k, cell_scales), query_scales=scales)
    rng = np.random.default_rng(QUERY_SEED)
    bins = rng.laplace(0.0, cell_scales[0] / math.sqrt(2.0), (2, QUERY_DRAWS, 2 * k))
    true_n = np.empty(2 * k)
    true_n[0::2], true_n[1::2] = c, t
    true_s = np.empty(2 * k)
    true_s[0::2], true_s[1::2] = c * means[1], t * means[0]
    cnt = np.clip(true_n + bins[0] + bins[1], -float(n), float(n))
    s = true_s + (b / 2.0) * (bins[0] - bins[1])
    weights = query_weights(const, cnt)
    var_d = float(np.mean(denominator_variance(const, cnt, weights)))

    def noise(x: float) -> float:
        return float(
            np.mean(floored_noise_numerator(const, cnt, s, np.full(QUERY_DRAWS, x), weights))
        )

    return noise, var_d, scales


def _adjusted_fixed_effects(inp: PredictionInputs) -> tuple[float, float, float, float]:
    """``tau = A / D`` with ``A = sum (S_t n_c - S_c n_t)``, ``D = sum n_t n_c`` over every stratum
    (docs/explanation/adjusted.md). With count noise variance ``v_n = 2 (2/eps_n)^2``, sum noise variance
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
    z)^2`` (``z = 1.96``), ``sqrt(v)`` the resolved releases' mean half-width over ``z``: each
    the delta method's at its ``D_hat`` (``Var(A_hat - tau D_hat)`` at the assumed counts over
    ``D_hat^2``), stretched to Fieller's length where the release's switch is on
    (:func:`design_resolution` below :data:`FIELLER_BELOW`: the switch reads the design, not
    these assumptions) and clipped at ``B``, averaged over the normal tail of ``D_hat`` above
    ``RESOLVE_Z`` sds; a ``D_hat`` whose Fieller set is unbounded leaves the release unresolved
    there too, so ``p`` is the share of that tail where the set is bounded."""
    b = inp.bound
    parts = inp.parts()
    scale_n, b_s = cell_noise_scales(parts, b)  # the squares do not enter the noise
    v_n, v_s = 2.0 * scale_n**2, 2.0 * b_s**2
    tc, cc = _counts(inp)
    t, c = tc.astype(float), cc.astype(float)
    big_d = float((t * c).sum())
    var_d = float((v_n * (t * t + c * c)).sum()) + t.size * v_n * v_n
    if big_d <= 0:
        return math.inf, math.inf, 0.0, math.inf
    tau = inp.assumptions.effect
    centre = inp.assumptions.mean(b) - b / 2.0
    m_t, m_c = centre + tau / 2.0, centre - tau / 2.0
    sd2 = inp.assumptions.sd(b) ** 2
    pairs = t * c * (t + c)
    queries = None
    if len(parts) == len(DEFAULT_SPLIT) + 2 and not inp.binary:  # the fixed-effects queries
        queries = _simulated_queries(inp, parts, (t, c), (m_t, m_c), (scale_n, b_s))
        var_d = queries[1]

    def numerator(x: float) -> float:
        """``Var(A_hat - x D_hat)`` at the assumed counts: the noise (true squares, no
        correction; with the queries the release's own estimate averaged over simulated
        histograms, :func:`_simulated_queries`) and the sampling sandwich, whose pairs differ by
        ``tau - x`` on top of the outcome's spread."""
        sampling = float((pairs * (sd2 + (x - tau) ** 2)).sum())
        if queries is not None:
            return queries[0](x) + sampling
        return sampling + float(
            (
                v_n * (t * t * (m_c + tau - x) ** 2 + c * c * (m_t - tau + x) ** 2)
                + v_s * (t * t + c * c)
                + 2.0 * v_s * v_n
                + x * x * v_n * v_n
            ).sum()
        )

    sampling_num = float(pairs.sum()) * sd2
    v_r = numerator(tau)
    scales = None if queries is None else queries[2]
    share = design_resolution(inp.design.n, inp.domain_size, v_n, scales)
    grow = 1.0  # where the release's own switch says so, its sandwich's noise stretches it
    if share >= PLUG_IN_CORRECTED_FROM:
        values = (sampling_num / big_d**2, v_r / big_d**2)
        grow = _sandwich_stretch(inp, (t, c), (m_t, m_c), sd2, values)
    noise = (v_r - sampling_num) * grow
    sampling_num *= grow
    sd_d = math.sqrt(var_d)
    p = resolution_probability(big_d, var_d)
    if p <= 0.0:
        return sampling_num / big_d**2, noise / big_d**2, 0.0, math.inf
    # a released interval divides by the noisy D, which is above RESOLVE_Z sd(D) when resolved:
    # its mean half-width (clipped at B, where a published interval ends) over those D_hat, by
    # quadrature on the normal tail (read from below: 1 - p x would round to 1 for a tiny p),
    # stretched to Fieller's length where the release's own switch says so
    normal = NormalDist()
    u = -np.array([normal.inv_cdf(p * (k + 0.5) / _QUADRATURE) for k in range(_QUADRATURE)])
    d_hat = big_d + sd_d * u
    stretch = np.ones_like(d_hat)
    if share < FIELLER_BELOW:
        stretch = fieller_factor(v_r, numerator(tau + b), numerator(tau - b), b, d_hat)
    # a D_hat whose Fieller set is unbounded leaves the release unresolved, as the release does
    bounded = np.isfinite(stretch)
    p *= float(np.mean(bounded))
    if p <= 0.0:
        return sampling_num / big_d**2, noise / big_d**2, 0.0, math.inf
    half = np.minimum(INTERVAL_Z * np.sqrt(v_r * grow * stretch[bounded]) / d_hat[bounded], b)
    return sampling_num / big_d**2, noise / big_d**2, p, float(np.mean(half) / INTERVAL_Z) ** 2
