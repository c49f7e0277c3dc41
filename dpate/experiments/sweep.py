"""One panel of the paper's figures: every alpha and combiner on one configuration's random
splits (:func:`run_split`), one row of ``experiments.csv`` per point (:data:`TABLE_COLUMNS`).

Every point runs the mechanisms that are released, through their plans
(:func:`~dpate_core.mechanisms.difference_in_means.plan_difference_in_means`,
:func:`~dpate_core.mechanisms.matching.plan_matching`,
:func:`~dpate_core.mechanisms.adjusted.plan_adjusted_from_statistics`,
:func:`~dpate_core.mechanisms.propensity.plan_propensity_from_strata`): the statistics and the smooth
sensitivities are computed once per site and budget, then
:func:`dpate_core.simulation.simulate_sites` draws all repetitions at once with the plan's
``draw_many`` and the mechanism's own assembly, and the ``(reps, J)`` combiners of
:mod:`dpate_core.simulation` aggregate them (the same computation as :mod:`dpate_core.aggregation`,
held equal by tests). The sites' estimates are taken before the clip to ``[-B, B]`` every release
adds (``published=False``): the paper's figures and claims are about its estimators, which do not
clip (docs/explanation/results.md, "What is run"). An unresolved adjusted or propensity release is NaN either
way: its repetition has no answer where no site resolved (``no_answer_share``). The propensity
release models the strata as one categorical covariate with ``|X|`` levels (the experiments'
data sets carry their strata, not the covariates behind them).

Common random numbers: at one (data set, split, estimator) every alpha starts from the same
generator state, and all five combiners aggregate the same draws, so differences between curves
and between alphas are not sampling noise of the simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpate.experiments.data import Split
from dpate.experiments.sensitivity import paper_literal_smooth_sensitivity
from dpate.experiments.settings import COMPARED_AGGREGATORS, ExperimentSettings, frac, generator
from dpate_core.mechanisms.adjusted import plan_adjusted_from_statistics
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import matching_smooth_sensitivity, plan_matching, smooth_beta
from dpate_core.mechanisms.propensity import plan_propensity_from_strata
from dpate_core.release import MechanismPlan, noise_free
from dpate_core.simulation import aggregate_many, simulate_sites, site_epsilons
from dpate_core.statistics import cell_statistics, difference_in_means, matching_statistics

__all__ = ["TABLE_COLUMNS", "prepare", "run_split", "site_plans", "tau_noise_sd"]

TABLE_COLUMNS = (
    "dataset",
    "J",
    "proportions",
    "estimator",
    "aggregator",
    "alpha",
    "mae_mean",
    "mae_std",
    "reps",
    "no_answer_share",
    "splits",
    "epsilons",
    "site_sizes",
    "reference",
    "reference_value",
    "mean_sites_used",
    "noise_sd_site1",
    "sens_ratio_vs_paper",
    "seed",
)
"""Columns of ``experiments.csv``: the point (``dataset, J, proportions, estimator, aggregator,
alpha``), ``mae_mean`` and ``mae_std`` of ``|tau_dp - reference|`` over the repetitions with an
answer among ``reps`` spread over ``splits`` random splits, ``no_answer_share`` (the share of
repetitions with no combined estimate: no site resolved, or none usable), the sites' exact
budgets (``epsilons``) and sizes, the ``reference``
(its kind and mean value), ``mean_sites_used`` by the combiner, ``noise_sd_site1`` (sd of site 1's
DP noise on its ATE), ``sens_ratio_vs_paper`` (how the corrections move the ATE noise against the paper's
mechanism: the largest ratio over the sites of corrected over literal smooth sensitivity for
SmoothDPMatching, 2 for GlobalDPMatching's 2B, 1 for the difference in means) and ``seed``."""

#: per site, what the estimator's plans are built from (see :func:`prepare`): None for the
#: difference in means, the matching statistics, or (cell statistics, matching statistics) for
#: the adjusted and propensity estimators
SiteStatistics = Any


def site_plans(
    split: Split,
    estimator: str,
    epsilons: Sequence[Fraction],
    delta: Fraction,
    stats: SiteStatistics,
) -> list[MechanismPlan]:
    """Each site's release plan at its budget ``epsilons[j]`` (and ``delta``)."""
    if estimator == "adjusted":
        return [
            plan_adjusted_from_statistics(st, epsilon=e, delta=delta)
            for st, e in zip(stats[0], epsilons, strict=True)
        ]
    if estimator == "propensity":
        return [
            plan_propensity_from_strata(st, (), epsilon=e, delta=delta)
            for st, e in zip(stats[0], epsilons, strict=True)
        ]
    if estimator == "dim":
        return [
            plan_difference_in_means(s.w, s.y, bound=split.bound, epsilon=e, delta=delta)
            for s, e in zip(split.sites, epsilons, strict=True)
        ]
    return [
        plan_matching(
            estimator,
            st,
            bound=split.bound,
            epsilon=e,
            delta=delta,
            domain_size=split.domain_size,
        )
        for st, e in zip(stats, epsilons, strict=True)
    ]


def tau_noise_sd(plan: MechanismPlan) -> float:
    """The standard deviation of the DP noise on the site's ATE (Laplace(b) has sd sqrt(2) b);
    for the difference in means, ``xi_t / N_t - xi_c / N_c``; for the adjusted estimator, the
    square root of its noise-variance formula at the un-noised statistics."""
    specs = {s.name: s for s in plan.noise}
    if "tau" in specs:
        return math.sqrt(2.0) * specs["tau"].scale
    if plan.estimator == "adjusted":
        exact = plan.assemble(noise_free(plan))
        return math.sqrt(float(exact.diagnostics["noise_variance"]))
    b = specs["sum_treated"].value_scale
    n_t, n_c = plan.n_treated, plan.n_control
    if n_t is None or n_c is None:
        raise ValueError(
            f"the {plan.estimator} plan has no arm sizes: the noise sd of xi_t / N_t - xi_c / N_c "
            "needs N_t and N_c (public arm sizes)"
        )
    return math.sqrt(2.0) * b * math.sqrt(1 / n_t**2 + 1 / n_c**2)


def _paper_ratio(
    split: Split, stats: SiteStatistics, epsilons: Sequence[Fraction], delta: Fraction
) -> float:
    """The largest, over the sites, of the corrected smooth sensitivity over the paper's literal
    one, each at the beta its release uses (``eps_j / 3``, ``delta / 3``): how much correction 1 moves
    SmoothDPMatching's noise at this point (its noise is proportional to S)."""
    ratios = []
    for st, eps in zip(stats, epsilons, strict=True):
        beta = smooth_beta(float(eps / 3), float(delta / 3))
        ours = matching_smooth_sensitivity(
            st.treated_counts, st.control_counts, st.n, split.bound, beta, split.domain_size
        )
        paper = paper_literal_smooth_sensitivity(
            st.treated_counts, st.control_counts, st.n, split.bound, beta
        )
        ratios.append(ours / paper)
    return max(ratios)


def prepare(split: Split, estimator: str) -> tuple[SiteStatistics, float, str]:
    """Once per split: the site statistics the plans are built from, the reference the errors are
    measured against, and the reference's kind."""
    stats: SiteStatistics
    site_refs: list[float]
    if estimator == "dim":
        stats = None
        site_refs = [difference_in_means(s.w, s.y).tau for s in split.sites]
    elif estimator in ("adjusted", "propensity"):
        # the adjusted estimator's estimand is Algorithm 1's: its reference is the matching tau
        # (the propensity bands' estimand is coarser; the same reference, or the truth)
        # without covariates (a randomized trial's data set) every record is in one stratum
        xs = [s.x if s.x is not None else np.zeros(s.n, np.int64) for s in split.sites]
        size = split.domain_size or 1
        cells = [
            cell_statistics(s.w, s.y, x, domain_size=size, bound=split.bound)
            for s, x in zip(split.sites, xs, strict=True)
        ]
        matching = [
            matching_statistics(s.w, s.y, x, size, bound=split.bound)
            for s, x in zip(split.sites, xs, strict=True)
        ]
        stats = (cells, matching)
        site_refs = [st.tau for st in matching]
    else:
        stats = []
        for s in split.sites:
            if s.x is None or split.domain_size is None:
                raise ValueError(
                    f"{estimator} on {split.dataset} needs each site's strata x and the split's "
                    "domain_size: give the Dataset its x and domain_size"
                )
            stats.append(matching_statistics(s.w, s.y, s.x, split.domain_size, bound=split.bound))
        site_refs = [st.tau for st in stats]
    sizes = np.array([s.n for s in split.sites], dtype=np.float64)
    if split.truth is not None:
        return stats, float(split.truth), "true ATE"
    pooled = float(sizes @ np.array(site_refs) / sizes.sum())
    return stats, pooled, "N-weighted mean of the sites' non-private estimates"


def _per_combiner() -> dict[str, list[np.ndarray]]:
    return {a: [] for a in COMPARED_AGGREGATORS}


@dataclass
class _AlphaDraws:
    """One alpha's draws over the splits: per combiner the absolute errors and the sites used,
    and per split site 1's noise sd, the sensitivity ratio (SmoothDPMatching) and the reference."""

    errors: dict[str, list[np.ndarray]] = field(default_factory=lambda: _per_combiner())
    used: dict[str, list[np.ndarray]] = field(default_factory=lambda: _per_combiner())
    scales: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    refs: list[float] = field(default_factory=list)


def _draw_alpha(
    splits: Sequence[Split],
    prepared: Sequence[tuple[SiteStatistics, float, str]],
    draws: Sequence[int],
    estimator: str,
    epsilons: Sequence[Fraction],
    settings: ExperimentSettings,
) -> _AlphaDraws:
    """``draws[i]`` releases of every site of split ``i`` at ``epsilons``, by every combiner."""
    acc = _AlphaDraws()
    for i, (sp, (stats, reference, _), reps) in enumerate(
        zip(splits, prepared, draws, strict=True)
    ):
        plans = site_plans(sp, estimator, epsilons, settings.delta, stats)
        # common random numbers: the same generator state for every alpha of this split
        rng = generator(settings, sp.dataset, sp.proportions, estimator, i)
        tau, n, var = simulate_sites(plans, rng, reps, published=False)  # the paper's estimators
        for agg in COMPARED_AGGREGATORS:
            res = aggregate_many(agg, tau, n, var)
            acc.errors[agg].append(np.abs(res.estimate - reference))
            acc.used[agg].append(res.used.sum(axis=1))
        # a two-stage release (propensity) has no closed form: site 1's realised noise spread
        acc.scales.append(
            float(np.nanstd(tau[:, 0])) if plans[0].stages else tau_noise_sd(plans[0])
        )
        acc.refs.append(reference)
        if estimator == "smooth_matching":
            acc.ratios.append(_paper_ratio(sp, stats, epsilons, settings.delta))
    return acc


def _alpha_rows(
    first: Split,
    estimator: str,
    alpha: Fraction,
    epsilons: Sequence[Fraction],
    acc: _AlphaDraws,
    reference_kind: str,
    n_splits: int,
    settings: ExperimentSettings,
) -> list[dict[str, Any]]:
    """The table rows (:data:`TABLE_COLUMNS`) of one alpha, one per combiner."""
    ratio = (
        float(np.max(acc.ratios))
        if acc.ratios
        else (2.0 if estimator == "global_matching" else 1.0)
    )
    rows = []
    for agg in COMPARED_AGGREGATORS:
        all_err = np.concatenate(acc.errors[agg])
        answered = np.isfinite(all_err)
        err = all_err[answered] if answered.any() else np.array([np.nan])
        rows.append(
            {
                "dataset": first.dataset,
                "J": first.n_sites,
                "proportions": first.proportions,
                "estimator": estimator,
                "aggregator": agg,
                "alpha": frac(alpha),
                "mae_mean": float(err.mean()),
                "mae_std": float(err.std()),
                "reps": int(all_err.size),
                "no_answer_share": float(1.0 - answered.mean()),
                "splits": n_splits,
                "epsilons": ";".join(frac(e) for e in epsilons),
                "site_sizes": ";".join(str(s.n) for s in first.sites),
                "reference": reference_kind,
                "reference_value": float(np.mean(acc.refs)),
                "mean_sites_used": float(np.concatenate(acc.used[agg]).mean()),
                "noise_sd_site1": float(np.mean(acc.scales)),
                "sens_ratio_vs_paper": ratio,
                "seed": settings.seed,
            }
        )
    return rows


def run_split(
    split: Split | Sequence[Split],
    estimator: str,
    epsilon_1: Fraction,
    settings: ExperimentSettings,
) -> list[dict[str, Any]]:
    """All points of one panel: for every alpha, ``settings.reps`` releases of every site, each
    aggregated by every combiner, and the mean and standard deviation of the absolute error.

    ``split`` may be several random splits of one configuration (same data set and proportions,
    different seeds): the repetitions are then shared out evenly among them, so the spread covers
    which records land at which site as well as the noise. Statistics, references and plans are
    computed once per split (and alpha); the draws are vectorised.
    """
    splits = [split] if isinstance(split, Split) else list(split)
    first = splits[0]
    if settings.reps < len(splits):
        raise ValueError(f"reps ({settings.reps}) must be at least the number of splits")
    draws = [
        settings.reps // len(splits) + (i < settings.reps % len(splits)) for i in range(len(splits))
    ]
    prepared = [prepare(sp, estimator) for sp in splits]
    rows = []
    for alpha in settings.alphas:
        epsilons = site_epsilons(epsilon_1, alpha, first.n_sites)
        acc = _draw_alpha(splits, prepared, draws, estimator, epsilons, settings)
        rows += _alpha_rows(
            first, estimator, alpha, epsilons, acc, prepared[0][2], len(splits), settings
        )
    return rows
