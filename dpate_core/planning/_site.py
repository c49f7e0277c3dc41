"""One site's predicted variances and normal-interval half-width (:func:`predict_site`), and the
study's combined prediction from them (the spec's combiner run on the predicted variances)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from dpate_core.aggregation import AggregateResult, aggregate
from dpate_core.compile_cache import interpreted
from dpate_core.mechanisms import StudySite, estimator_of
from dpate_core.planning._inputs import Assumptions, PredictionInputs, SiteDesign, SitePrediction

__all__ = [
    "MAX_PATTERNS_SITES",
    "SitePredictions",
    "combined_prediction",
    "predict_site",
    "predicted_uninformative",
]

#: ``predict(estimator, designs)``: the site predictions of an estimator, every other input fixed
SitePredictions = Callable[[str, Sequence[SiteDesign]], list[SitePrediction]]

_Z = {0.95: NormalDist().inv_cdf(0.975)}


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    return _Z.get(level) or NormalDist().inv_cdf(0.5 + level / 2.0)


def predict_site(
    estimator: str,
    design: SiteDesign,
    *,
    domain_size: int,
    bound: float,
    options: Any = None,
    assumptions: Assumptions = Assumptions(),
    level: float = 0.95,
    covariate_sizes: tuple[int, ...] = (),
    bounded_covariates: int = 0,
    binary: bool = False,
) -> SitePrediction:
    """One site's predicted variances and normal-interval half-width (public inputs only).
    ``options``: the estimator's spec options (None: its defaults), a study's choice already
    made (:meth:`~dpate_core.mechanisms.Estimator.study_choice`; left open, it is made for this
    site as a study of one). ``covariate_sizes``, ``bounded_covariates``: the spec's covariate
    structure (:class:`~dpate_core.planning.PredictionInputs`). ``binary``: the study's outcome
    is binary (``outcome.binary``); an estimator with a binary-outcome mode releases in it (its
    parts), another as for any outcome."""
    est = estimator_of(estimator)
    if not est.pure and design.delta <= 0:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} needs delta > 0 (e.g. '1e-5')"
        )
    binary = bool(binary and est.binary_outcome)
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    domain = max(int(domain_size), 1)
    choice = est.study_choice(  # the design's split is its own: a choice keeps its parts
        options, domain, [StudySite(design.n, design.epsilon, tuple(design.split), True)]
    )
    options = choice.options
    parts = est.n_parts(options, binary)
    if len(design.split) != parts:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} splits its budget into {parts} "
            f"parts, but the split has {len(design.split)} shares: give exactly {parts}"
        )
    inp = PredictionInputs(
        design,
        domain,
        float(bound),
        assumptions.for_site(design.site_id),
        options,
        tuple(int(c) for c in covariate_sizes),
        int(bounded_covariates),
        binary=binary,
    )
    with interpreted():  # a few assumed counts: the kernels' Python is faster than numba's set-up
        sampling, noise, reported = est.predict(inp)
        p_resolved, v_resolved = (1.0, reported) if est.resolution is None else est.resolution(inp)
        releases = () if est.resolutions is None else tuple(zip(*est.resolutions(inp), strict=True))
        read_share = 1.0 if est.read_share is None else est.read_share(inp)
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
        weighting=choice.variant,
        resolved_probability=p_resolved,
        resolved_variance=v_resolved,
        releases=tuple((float(p), float(v), float(b)) for p, v, b in releases),
        read_share=read_share,
    )


def _combine(aggregator: str, preds: Sequence[SitePrediction]) -> AggregateResult:
    return aggregate(
        aggregator,
        np.zeros(len(preds)),
        [p.n for p in preds],
        [p.reported_variance for p in preds],
    )


#: above this many sites whose release may not resolve, the combined prediction reads the
#: expected variances instead of every pattern of resolved sites
MAX_PATTERNS_SITES = 12


def predicted_uninformative(p: SitePrediction, bound: float, z: float) -> bool:
    """The site's interval, when its release resolves, is predicted to meet an information rule
    of the release (:data:`~dpate_core.inference.INFORMATION_RULES`: wider than ``B``): it says
    nothing even then. (A site that is wide only because it often does not resolve informs the
    releases where it does.)"""
    from dpate_core.inference import INFORMATION_RULES, uninformative_rules

    v = p.reported_variance if p.resolved_variance is None else p.resolved_variance
    half = z * math.sqrt(v) if math.isfinite(v) else math.inf
    rules = uninformative_rules(-half, half, bound)
    return any(r in INFORMATION_RULES for r in rules)


def combined_prediction(
    aggregator: str, preds: Sequence[SitePrediction], bound: float, z: float
) -> tuple[float, tuple[int, ...]]:
    """The combined interval's predicted variance (the one whose normal half-width is the
    expected half-width) and the sites the combiner is predicted to use.

    A site whose release may not resolve (an estimator's ``resolution``) is combined only when it
    resolves, so the expectation runs over which sites resolve (every pattern, with its
    probability; none resolved counts as the whole range, half-width ``B``). The combiner reads
    each resolved site's variance. A combiner that chooses a subset (MVAgg, AggLargest) is
    predicted on the sites not predicted uninformative (:func:`predicted_uninformative`), so its
    predicted subset never holds such a site; when every site is, the width is the combination
    of all of them (what a release would combine) and the predicted subset is empty.
    Raises :class:`~dpate_core.aggregation.NoUsableSiteError` when no site can be used at all."""
    from itertools import product

    from dpate_core.aggregation import aggregator_of

    chooses = aggregator_of(aggregator).selects
    keep = [
        j for j, p in enumerate(preds) if not (chooses and predicted_uninformative(p, bound, z))
    ]
    informative = bool(keep)
    keep = keep or list(range(len(preds)))
    sites = [preds[j] for j in keep]
    variances = [
        p.reported_variance if p.resolved_variance is None else p.resolved_variance for p in sites
    ]
    probs = [min(max(p.resolved_probability, 0.0), 1.0) for p in sites]
    uncertain = [i for i, q in enumerate(probs) if q < 1.0]
    full = aggregate(aggregator, np.zeros(len(sites)), [p.n for p in sites], variances)
    used = tuple(keep[i] for i in full.used) if informative else ()
    if any(p.releases for p in sites):
        return _drawn_combination(aggregator, sites, bound, z), used
    if not uncertain:
        return float(full.variance), used
    if len(uncertain) > MAX_PATTERNS_SITES:
        return float(_combine(aggregator, sites).variance), used
    half = 0.0
    for pattern in product((False, True), repeat=len(uncertain)):
        on = dict(zip(uncertain, pattern, strict=True))
        prob = float(np.prod([probs[i] if on[i] else 1.0 - probs[i] for i in uncertain]))
        if prob <= 0.0:
            continue
        live = [i for i in range(len(sites)) if on.get(i, True) and math.isfinite(variances[i])]
        if not live:
            half += prob * bound
            continue
        res = aggregate(
            aggregator,
            np.zeros(len(live)),
            [sites[i].n for i in live],
            [variances[i] for i in live],
        )
        half += prob * z * math.sqrt(res.variance)
    return (half / z) ** 2, used


#: how many joint draws of the sites' releases :func:`_drawn_combination` averages over, and
#: its seed (the same plan every time)
COMBINATION_DRAWS = 4000
_COMBINATION_SEED = 11


def _drawn_combination(
    aggregator: str, sites: Sequence[SitePrediction], bound: float, z: float
) -> float:
    """The combined variance whose normal half-width is the expected half-width over joint
    draws of the sites' releases: each site's release drawn from its equally likely ones
    (:attr:`SitePrediction.releases`, else its one predicted release), resolved with its
    probability; the combiner (vectorised over the draws) on the resolved sites' variances and
    shared sds (a common bias's cross terms), none resolved counting as the whole range. A
    combiner that weights by the reported variances gains from their spread between releases,
    which the expected variances hide: combining each site's mean variance over-predicts the
    combined width (1.1-1.4x on IHDP and Lalonde, docs/research/propensity.md, "Planning").
    Seeded numpy draws: a prediction, no release."""
    from dpate_core.simulation import aggregate_many

    rng = np.random.default_rng(_COMBINATION_SEED)
    draws = COMBINATION_DRAWS
    variance, shared = np.empty((draws, len(sites))), np.zeros((draws, len(sites)))
    for j, p in enumerate(sites):
        v = p.reported_variance if p.resolved_variance is None else p.resolved_variance
        rel = np.asarray(p.releases or ((p.resolved_probability, v, 0.0),), dtype=np.float64)
        pick = rel[rng.integers(0, rel.shape[0], draws)]
        resolved = (rng.random(draws) < pick[:, 0]) & np.isfinite(pick[:, 1])
        variance[:, j] = np.where(resolved, pick[:, 1], np.nan)
        shared[:, j] = pick[:, 2]
    n = np.broadcast_to(np.array([p.n for p in sites], dtype=np.float64), variance.shape)
    combined = aggregate_many(aggregator, np.zeros_like(variance), n, variance, shared).variance
    half = np.where(np.isfinite(combined), z * np.sqrt(np.abs(combined)), bound)
    return float(np.mean(half) / z) ** 2
