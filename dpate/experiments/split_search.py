"""The search behind SmoothDPMatching's ``budget_split = "default"``
(:data:`dpate_core.mechanisms.matching.SMOOTH_MATCHING_SEARCHED`; docs/explanation/results.md,
"Budget split presets").

Not run by ``dpate experiments``; ``python -c "from dpate.experiments.split_search import *;
from dpate.experiments.settings import ExperimentSettings;
print(split_search_markdown(search_budget_split(ExperimentSettings())))"`` reproduces the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpate.experiments.settings import Z95, ExperimentSettings, generator, seed_key
from dpate.experiments.tables import markdown_table
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import MechanismPlan, draw_many
from dpate_core.simulation import aggregate_many
from dpate_core.statistics import MatchingStatistics, matching_statistics

__all__ = ["SPLIT_CANDIDATES", "search_budget_split", "split_search_markdown"]

#: the splits (ATE, sampling variance, ln S) compared by :func:`search_budget_split`
SPLIT_CANDIDATES: tuple[tuple[str, str, str], ...] = (
    ("1/3", "1/3", "1/3"),
    ("1/2", "1/4", "1/4"),
    ("11/20", "3/20", "3/10"),
    ("3/5", "1/10", "3/10"),
    ("7/10", "1/20", "1/4"),
    ("1/2", "1/10", "2/5"),
    ("2/5", "1/5", "2/5"),
)

#: one site's data draws: (imbalance a, seed number, matching statistics)
_OneSite = tuple[float, int, MatchingStatistics]
#: three sites' data draws: (proportions, draw number, each site's matching statistics)
_ThreeSites = tuple[tuple[int, ...], int, list[MatchingStatistics]]


def _one_site_data(
    settings: ExperimentSettings, imbalances: Sequence[float], seeds: int
) -> list[_OneSite]:
    """``seeds`` Synth draws per imbalance ``a`` (one site each)."""
    from dpate_core.synth import synth

    domain = settings.synth_domain
    data = []
    for a in imbalances:
        for s in range(seeds):
            d = synth(settings.synth_n, domain, a=a, seed=seed_key(settings.seed, "split", a, s))
            data.append((a, s, matching_statistics(d.w, d.y, d.x, domain, bound=1.0)))
    return data


def _three_site_data(
    settings: ExperimentSettings, multi_site: Sequence[tuple[int, ...]], multi_draws: int
) -> list[_ThreeSites]:
    """``multi_draws`` Synth draws (``a ~ U[-1, 1]``) per proportion, split into its sites."""
    from dpate_core.synth import split_proportions, synth

    domain = settings.synth_domain
    multi = []
    for prop in multi_site:
        for i in range(multi_draws):
            d = synth(settings.synth_n, domain, seed=seed_key(settings.seed, "split-multi", i))
            parts = split_proportions(d.n, prop, seed_key(settings.seed, "split-multi", prop, i))
            stats = [matching_statistics(d.w[p], d.y[p], d.x[p], domain, bound=1.0) for p in parts]
            multi.append((prop, i, stats))
    return multi


def _plan(
    settings: ExperimentSettings,
    epsilon: Fraction,
    stats: MatchingStatistics,
    shares: Sequence[str],
) -> MechanismPlan:
    return plan_matching(
        "smooth_matching",
        stats,
        bound=1.0,
        epsilon=epsilon,
        delta=settings.delta,
        domain_size=settings.synth_domain,
        split=list(shares),
    )


def _one_site_row(
    settings: ExperimentSettings,
    epsilon: Fraction,
    data: Sequence[_OneSite],
    shares: Sequence[str],
    reps: int,
) -> dict[str, Any]:
    """One candidate on one site: MSE against the true 0.5, normal-interval coverage and width."""
    err, cov, width = [], [], []
    for a, s, stats in data:
        pl = _plan(settings, epsilon, stats, shares)
        out = pl.assemble(draw_many(pl, generator(settings, "split", a, s), reps))
        half = Z95 * np.sqrt(out.variance)
        err.append(out.tau - 0.5)
        cov.append(np.abs(out.tau - 0.5) <= half)
        width.append(2 * half)
    e = np.concatenate(err)
    return {
        "split": ":".join(shares),
        "mse": float(np.mean(e**2)),
        "coverage": float(np.mean(np.concatenate(cov))),
        "median_width": float(np.median(np.concatenate(width))),
        "releases": int(e.size),
    }


def _mvagg_numbers(
    settings: ExperimentSettings,
    epsilon: Fraction,
    multi: Sequence[_ThreeSites],
    shares: Sequence[str],
    multi_reps: int,
) -> dict[str, float]:
    """One candidate at every site of three, combined by MVAgg: its MSE and coverage."""
    m_err, m_cov = [], []
    for prop, i, stats in multi:
        rng = generator(settings, "split-multi", prop, i)
        outs = [
            (pl := _plan(settings, epsilon, st, shares)).assemble(draw_many(pl, rng, multi_reps))
            for st in stats
        ]
        tau = np.stack([o.tau for o in outs], axis=1)
        var = np.stack([o.variance for o in outs], axis=1)
        res = aggregate_many("mvagg", tau, np.array([st.n for st in stats], float), var)
        m_err.append(res.estimate - 0.5)
        m_cov.append(np.abs(res.estimate - 0.5) <= Z95 * np.sqrt(res.variance))
    return {
        "mvagg_mse": float(np.mean(np.concatenate(m_err) ** 2)) if m_err else float("nan"),
        "mvagg_coverage": float(np.mean(np.concatenate(m_cov))) if m_cov else float("nan"),
    }


def search_budget_split(
    settings: ExperimentSettings,
    candidates: Sequence[Sequence[str]] = SPLIT_CANDIDATES,
    imbalances: Sequence[float] = (0.02, -0.48, -0.83),
    seeds: int = 3,
    reps: int = 2000,
    epsilon: Fraction = Fraction(1),
    multi_site: Sequence[tuple[int, ...]] = ((1, 1, 1), (18, 1, 1)),
    multi_draws: int = 40,
    multi_reps: int = 50,
) -> list[dict[str, Any]]:
    """The search behind SmoothDPMatching's ``budget_split = "default"``
    (:data:`dpate_core.mechanisms.matching.SMOOTH_MATCHING_SEARCHED`; docs/explanation/results.md,
    "Budget split
    presets"), on Synth (``settings.synth_n``, ``settings.synth_domain``, the given ``epsilon``):

    - one site: ``seeds`` data draws per imbalance ``a``, ``reps`` releases of each candidate;
      the MSE of ``tau_dp`` against the true effect 0.5 (and over the even split's), the coverage
      of the normal interval and its median width;
    - MVAgg over three sites (each proportion of ``multi_site``, ``multi_draws`` fresh data draws
      with ``a ~ U[-1, 1]``, ``multi_reps`` releases each, every site at ``epsilon``): its MSE over
      the even split's and the coverage of its interval, where a split that starves the variance
      part lets MVAgg drop sites on noise and undercover.
    """
    data = _one_site_data(settings, imbalances, seeds)
    multi = _three_site_data(settings, multi_site, multi_draws)
    rows = [
        {
            **_one_site_row(settings, epsilon, data, shares, reps),
            **_mvagg_numbers(settings, epsilon, multi, shares, multi_reps),
        }
        for shares in candidates
    ]
    even, even_mv = rows[0]["mse"], rows[0]["mvagg_mse"]
    for r in rows:
        r["mse_vs_even"] = r["mse"] / even
        r["mvagg_mse_vs_even"] = r["mvagg_mse"] / even_mv
    return rows


def split_search_markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`search_budget_split`, one line per candidate split."""
    columns = ("split (ATE : variance : ln S)", "site MSE", "/ even", "coverage", "median width",
               "MVAgg MSE / even", "MVAgg coverage")  # fmt: skip
    body = [(r["split"], f"{r['mse']:.3g}", f"{r['mse_vs_even']:.3f}", f"{r['coverage']:.3f}",
             f"{r['median_width']:.3g}", f"{r['mvagg_mse_vs_even']:.3f}",
             f"{r['mvagg_coverage']:.3f}") for r in rows]  # fmt: skip
    return "\n".join(markdown_table(columns, body)) + "\n"
