"""Coverage of the 95% intervals (docs/explanation/results.md, "Coverage";
docs/explanation/inference.md): every site and
combiner, normal and parametric-bootstrap intervals, against the population's non-private
estimand (``coverage.csv``, ``coverage.md``)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpate.experiments.data import Dataset, DataSource, Split, sites_of
from dpate.experiments.settings import (
    AGGREGATOR_LABELS,
    COMPARED_AGGREGATORS,
    ESTIMATOR_LABELS,
    Z95,
    ExperimentSettings,
    frac,
    generator,
    seed_key,
)
from dpate.experiments.sweep import prepare, site_plans
from dpate.experiments.tables import markdown_table
from dpate_core.mechanisms.adjusted import plan_adjusted_from_statistics
from dpate_core.release import draw_many
from dpate_core.simulation import aggregate_many, site_epsilons
from dpate_core.statistics import difference_in_means, matching_statistics

__all__ = [
    "COVERAGE_ALPHAS",
    "COVERAGE_COLUMNS",
    "COVERAGE_CONFIGS",
    "COVERAGE_EPSILONS",
    "coverage_markdown",
    "coverage_study",
]

COVERAGE_EPSILONS: tuple[Fraction, ...] = (Fraction(1, 2), Fraction(1), Fraction(5))
COVERAGE_ALPHAS: tuple[Fraction, ...] = (Fraction(1, 8), Fraction(1), Fraction(8))
#: (data set, estimator, proportions): the randomized trial with its paper estimator, the
#: observational Synth with SmoothDPMatching, and the adjusted estimator on both
COVERAGE_CONFIGS: tuple[tuple[str, str, str], ...] = (
    ("IST", "dim", "1:1:1"),
    ("IST", "dim", "18:1:1"),
    ("IST", "adjusted", "1:1:1"),
    ("Synth", "smooth_matching", "1:1:1"),
    ("Synth", "smooth_matching", "18:1:1"),
    ("Synth", "adjusted", "1:1:1"),
)
COVERAGE_COLUMNS = (
    "dataset",
    "estimator",
    "J",
    "proportions",
    "epsilon_1",
    "alpha",
    "unit",
    "method",
    "coverage",
    "intervals",
    "median_width",
    "normal_width_same",
    "mean_sites_used",
)
"""Columns of ``coverage.csv``: the point (``dataset, estimator, J, proportions, epsilon_1,
alpha``), the ``unit`` (``site 1`` .. ``site J`` or a combiner), the interval ``method``
(``normal``: ``tau +- 1.96 sqrt(variance)``; ``bootstrap``: :mod:`dpate_core.inference`'s
parametric bootstrap from the published fields), the share of ``intervals`` that cover the
non-private estimand, their ``median_width`` (for ``bootstrap`` rows ``normal_width_same`` is the
median width of the normal interval on the same releases, both clipped to ``[-B, B]``) and,
for combiners, the mean number of sites used."""


def _coverage_plans(split: Split, estimator: str, epsilons, delta, prepared):
    if estimator == "adjusted":
        return [
            plan_adjusted_from_statistics(st, epsilon=e, delta=delta)
            for st, e in zip(prepared[0], epsilons, strict=True)
        ]
    return site_plans(split, estimator, epsilons, delta, prepared)


def _public(plan, out, r: int) -> dict[str, Any]:
    """Release ``r`` of a simulated site as its published fields (for the bootstrap)."""
    published: dict[str, Any] = plan.estimate_of(out, r).public_fields()
    return published


def _coverage_population(ds: str, estimator: str, settings: ExperimentSettings, source: DataSource):
    """``(draw(i) -> Split, estimand)``: the i-th data draw of a coverage configuration.

    IST (plasmode): the data set is the population; a draw is a bootstrap sample of its size,
    split at random into the sites; the estimand is the population's non-private estimate
    (the difference in means for DiM, Algorithm 1's without covariates for the adjusted one).
    Synth: a fresh draw of the generator (``a`` and ``b`` redrawn), split at random; the
    estimand is the true effect 0.5, which every stratum's effect equals."""
    if ds == "IST":
        pop = source.load("IST")
        if estimator == "dim":
            estimand = difference_in_means(pop.w, pop.y).tau
        else:
            zeros = np.zeros(pop.w.size, np.int64)
            estimand = matching_statistics(pop.w, pop.y, zeros, 1, bound=pop.bound).tau

        def draw(i: int, prop: tuple[int, ...]) -> Split:
            rng = generator(settings, "coverage-data", ds, i)
            idx = np.sort(rng.integers(0, pop.w.size, pop.w.size))
            sample = Dataset(ds, pop.w[idx], pop.y[idx], pop.bound)
            parts = source.split(idx.size, prop, seed_key(settings.seed, "coverage-split", ds, i))
            return Split(ds, ":".join(map(str, prop)), sites_of(sample, parts), pop.bound)

        return draw, float(estimand)

    def draw_synth(i: int, prop: tuple[int, ...]) -> Split:
        seed = seed_key(settings.seed, "coverage-synth", i)
        w, y, x = source.synth(n=settings.synth_n, domain_size=settings.synth_domain, a=None,
                               seed=seed)  # fmt: skip
        data = Dataset("Synth", w, y, 1.0, x, settings.synth_domain)
        parts = source.split(w.size, prop, seed_key(settings.seed, "coverage-split", ds, i))
        return Split(ds, ":".join(map(str, prop)), sites_of(data, parts), 1.0,
                     settings.synth_domain, 0.5)  # fmt: skip

    return draw_synth, 0.5


def coverage_study(settings: ExperimentSettings, source: DataSource) -> list[dict[str, Any]]:
    """95% coverage of the non-private estimand, for every site and every combiner (MVAgg's
    selection included), normal and parametric-bootstrap intervals, over ``eps_1`` in
    :data:`COVERAGE_EPSILONS` and ``alpha`` in :data:`COVERAGE_ALPHAS` (J = 3).

    Each point draws ``settings.coverage_data`` data sets (:func:`_coverage_population`: IST
    resampled, Synth redrawn), and on each ``coverage_reps / coverage_data`` releases of every
    site through the plans (``draw_many`` and ``assemble``); the combiners run on the ``(reps, J)``
    arrays. The target of every site and combiner is the population's non-private estimand (an
    MVAgg or AggLargest that keeps a subset still targets it: its coverage shows what selection
    costs). The bootstrap (:mod:`dpate_core.inference`, ``coverage_boot_draws`` draws) runs on
    the first release of the first ``settings.coverage_boot`` data draws of each point.
    """
    from dpate_core.inference import combined_bootstrap_interval, site_bootstrap_interval
    from dpate_core.synth import parse_proportions

    rows: list[dict[str, Any]] = []
    n_reps, n_data, n_boot = settings.coverage_sizes()
    per_data = max(1, n_reps // n_data)
    grid = [(e, a) for e in COVERAGE_EPSILONS for a in COVERAGE_ALPHAS]
    for ds, estimator, prop in COVERAGE_CONFIGS:
        draw, estimand = _coverage_population(ds, estimator, settings, source)
        acc = {g: {"tau": [], "var": [], "boot": []} for g in grid}
        sizes = None
        for i in range(n_data):
            split = draw(i, parse_proportions(prop))
            sizes = np.array([s.n for s in split.sites], dtype=np.float64)
            stats = prepare(split, estimator)[0]
            for eps_1, alpha in grid:
                epsilons = site_epsilons(eps_1, alpha, split.n_sites)
                plans = _coverage_plans(split, estimator, epsilons, settings.delta, stats)
                rng = generator(settings, "coverage", ds, estimator, prop, eps_1, alpha, i)
                outs = [p.assemble(draw_many(p, rng, per_data)) for p in plans]
                a = acc[(eps_1, alpha)]
                a["tau"].append(np.stack([np.broadcast_to(o.tau, (per_data,)) for o in outs], 1))
                a["var"].append(
                    np.stack([np.broadcast_to(o.variance, (per_data,)) for o in outs], 1)
                )
                if i < n_boot:
                    a["boot"].append([_public(p, o, 0) for p, o in zip(plans, outs, strict=True)])
        for eps_1, alpha in grid:
            a = acc[(eps_1, alpha)]
            key = (ds, estimator, prop, eps_1, alpha)
            rows += _coverage_rows(
                settings, key, np.concatenate(a["tau"]), np.concatenate(a["var"]), sizes,
                estimand, a["boot"], site_bootstrap_interval, combined_bootstrap_interval,
            )  # fmt: skip
    return rows


def _coverage_rows(settings, key, tau, var, n, estimand, boot, site_boot, comb_boot):
    """The coverage rows of one configuration: the normal interval of every site and combiner,
    then (with ``boot``) their bootstrap intervals (:func:`_bootstrap_rows`)."""
    ds, estimator, prop, eps_1, alpha = key
    j_sites = tau.shape[1]
    base = {
        "dataset": ds,
        "estimator": estimator,
        "J": j_sites,
        "proportions": prop,
        "epsilon_1": frac(eps_1),
        "alpha": frac(alpha),
    }
    rows = []

    def median(values) -> float:
        """The median of the intervals that exist (NaN: none, e.g. every release unresolved)."""
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

    def add(unit, method, covered, width, used=float("nan"), same=None):
        rows.append(
            {
                **base,
                "unit": unit,
                "method": method,
                "coverage": float(np.mean(covered)),
                "intervals": int(np.size(covered)),
                "median_width": median(width),
                "normal_width_same": float("nan") if same is None else median(same),
                "mean_sites_used": used,
            }
        )

    half = Z95 * np.sqrt(np.maximum(var, 0.0))
    for j in range(j_sites):
        add(f"site {j + 1}", "normal", np.abs(tau[:, j] - estimand) <= half[:, j], 2 * half[:, j])
    for agg in COMPARED_AGGREGATORS:
        res = aggregate_many(agg, tau, n, var)
        h = Z95 * np.sqrt(res.variance)
        add(AGGREGATOR_LABELS[agg], "normal", np.abs(res.estimate - estimand) <= h, 2 * h,
            float(res.used.sum(axis=1).mean()))  # fmt: skip
    if boot:
        _bootstrap_rows(settings, key, j_sites, estimand, boot, site_boot, comb_boot, add)
    return rows


def _bootstrap_rows(settings, key, j_sites, estimand, boot, site_boot, comb_boot, add):
    """The bootstrap rows of :func:`_coverage_rows` (one per site, then one per combiner), each
    with the median width of the normal interval on the same releases, passed to ``add``."""
    draws = settings.coverage_boot_draws
    from dpate_core.inference import combined_normal_interval, site_normal_interval

    site_cov = [[] for _ in range(j_sites)]
    site_width = [[] for _ in range(j_sites)]
    site_same = [[] for _ in range(j_sites)]
    comb_cov = {agg: [] for agg in COMPARED_AGGREGATORS}
    comb_width = {agg: [] for agg in COMPARED_AGGREGATORS}
    comb_same = {agg: [] for agg in COMPARED_AGGREGATORS}
    for b, sites in enumerate(boot):
        seed = seed_key(settings.seed, "coverage-boot", *key, b)
        for j, site in enumerate(sites):
            if not site.get("resolved", True):  # no estimate, no interval: not covering
                site_cov[j].append(False)
                site_width[j].append(float("nan"))
                site_same[j].append(float("nan"))
                continue
            iv = site_boot(site, draws=draws, seed=seed + j)
            site_cov[j].append(iv.lo <= estimand <= iv.hi)
            site_width[j].append(iv.width)
            site_same[j].append(site_normal_interval(site).width)
        for agg in COMPARED_AGGREGATORS:
            try:
                iv = comb_boot(sites, agg, draws=draws, seed=seed + 100)
                same = combined_normal_interval(sites, agg).width
            except ValueError:  # no usable site in this release: counted as not covering
                comb_cov[agg].append(False)
                comb_width[agg].append(float("nan"))
                comb_same[agg].append(float("nan"))
                continue
            comb_cov[agg].append(iv.lo <= estimand <= iv.hi)
            comb_width[agg].append(iv.width)
            comb_same[agg].append(same)
    for j in range(j_sites):
        add(f"site {j + 1}", "bootstrap", np.array(site_cov[j]), np.array(site_width[j]),
            same=site_same[j])  # fmt: skip
    for agg in COMPARED_AGGREGATORS:
        add(AGGREGATOR_LABELS[agg], "bootstrap", np.array(comb_cov[agg]),
            np.array(comb_width[agg]), same=comb_same[agg])  # fmt: skip


def coverage_markdown(rows: list[dict[str, Any]]) -> str:
    """The coverage table: per configuration and unit, the mean and the lowest coverage over the
    (eps_1, alpha) grid for normal and bootstrap intervals, and the bootstrap's median width over
    the normal interval's on the same releases (sites pooled, combiners one by one)."""
    import pandas as pd

    if not rows:
        return "# Coverage\n\n(not run)\n"
    f = pd.DataFrame(rows)
    f["unit_kind"] = np.where(f["unit"].str.startswith("site "), "sites", f["unit"])
    lines = [
        "# Coverage of the 95% intervals",
        "",
        "Target of every site and combiner: the population's non-private estimand (IST: "
        "the whole data set's estimate, each data draw a bootstrap sample of it; Synth: the "
        "true effect 0.5, each data draw fresh). Grid: eps_1 in {1/2, 1, 5}, "
        "alpha in {1/8, 1, 8}, J = 3. `normal`: mean (lowest) coverage over the grid; "
        "`bootstrap`: the same for the parametric bootstrap of `dpate_core.inference` "
        f"({int(f[f['method'] == 'bootstrap']['intervals'].max() or 0)} releases per point and "
        "site); `width`: median bootstrap width over the normal interval's on the same releases "
        "(both clipped to [-B, B]).",
        "",
    ]
    body: list[tuple[object, ...]] = []
    keys = ["dataset", "estimator", "proportions", "unit_kind"]
    order = {label: i for i, label in enumerate(["sites", *AGGREGATOR_LABELS.values()])}
    groups = sorted(
        f.groupby(keys, sort=False), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], order[kv[0][3]])
    )
    for (ds, est, prop, unit), g in groups:
        cells = []
        for method in ("normal", "bootstrap"):
            m = g[g["method"] == method]
            if m.empty:
                cells.append("")
                continue
            per_point = m.groupby(["epsilon_1", "alpha"]).apply(
                lambda d: np.average(d["coverage"], weights=d["intervals"]), include_groups=False
            )
            cells.append(f"{per_point.mean():.3f} ({per_point.min():.3f})")
        boot_rows = g[g["method"] == "bootstrap"]
        nw = boot_rows["normal_width_same"].median()
        bw = boot_rows["median_width"].median()
        width = f"{bw / nw:.2f}" if nw > 0 and np.isfinite(bw) else ""
        used = g[g["method"] == "normal"]["mean_sites_used"].mean()
        used_s = "" if not np.isfinite(used) else f"{used:.2f}"
        body.append((ds, ESTIMATOR_LABELS.get(est, est), prop, unit, *cells, width, used_s))
    columns = ("data", "estimator", "split", "unit", "normal", "bootstrap", "width", "sites used")
    return "\n".join(lines + markdown_table(columns, body)) + "\n"
