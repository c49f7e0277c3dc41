"""Coverage of the published 95% intervals, normal and parametric bootstrap (docs/explanation/inference.md,
"Coverage measured"). Prints one table row per design; asserts nothing.

Releases come from the project's own plans (``draw_many`` and ``assemble``, seeded numpy noise:
simulations only), so each is what a site publishes, ``tau`` clipped to ``[-B, B]``; the intervals
are ``dpate_core.inference``'s from those published fields (2,000 bootstrap draws each). Fresh data
per data draw: Synth (``a = 0``, ``|X| = 20``, ``delta = 1e-5``, true effect 0.5) for the matching
and adjusted estimators, uniform outcomes with a true effect 0.1 for the difference in means.

Run: ``python bench/bench_inference_coverage.py [SCALE]`` (SCALE 1: the table's 5,000 releases per
site design and 2,500 per combiner design, about 10 minutes on a quiet core; 0.1 for a quick look).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpate_core.inference import (
    combined_bootstrap_interval,
    combined_normal_interval,
    site_bootstrap_interval,
    site_normal_interval,
)
from dpate_core.mechanisms.adjusted import plan_adjusted
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import MechanismPlan, SiteEstimate, draw_many
from dpate_core.statistics import matching_statistics
from dpate_core.synth import split_proportions, synth

DRAWS = 2000


def releases(plan: MechanismPlan, rng: np.random.Generator, reps: int) -> list[SiteEstimate]:
    out = plan.assemble(draw_many(plan, rng, reps))
    return [plan.estimate_of(out, r) for r in range(reps)]


def _dim_plan(rng: np.random.Generator, n: int, treated: int, eps: str) -> MechanismPlan:
    w = rng.permutation(np.repeat([0, 1], [n - treated, treated]))
    y = np.where(w == 1, 0.2 + 0.8 * rng.random(n), rng.random(n))  # true effect 0.1
    return plan_difference_in_means(w, y, bound=1.0, epsilon=eps, arm_sizes_public=True)


def _smooth_plan(d: Any, idx: Any, eps: Any, split: Any = None) -> MechanismPlan:
    stats = matching_statistics(d.w[idx], d.y[idx], d.x[idx], 20, bound=1.0)
    return plan_matching("smooth_matching", stats, bound=1.0, epsilon=eps, delta="1e-5",
                         domain_size=20, split=split)  # fmt: skip


def site_design(make: Callable[[np.random.Generator], MechanismPlan], truth: float,
                n_data: int, per: int, seed: int) -> tuple[float, float, float, float, int]:  # fmt: skip
    """``(normal coverage, bootstrap coverage, bootstrap / normal width, share clipped, n)``."""
    rng = np.random.default_rng(seed)
    normal, boot, wn, wb, clipped = [], [], [], [], 0
    for _ in range(n_data):
        for s in releases(make(rng), rng, per):
            a, b = site_normal_interval(s), site_bootstrap_interval(s, draws=DRAWS)
            normal.append(a.lo <= truth <= a.hi)
            boot.append(b.lo <= truth <= b.hi)
            wn.append(a.width)
            wb.append(b.width)
            clipped += abs(s.tau) == s.bound
    n = len(normal)
    return np.mean(normal), np.mean(boot), np.mean(wb) / np.mean(wn), clipped / n, n


def combined_design(sizes: tuple[int, ...], split: Any, method: str, n_data: int, per: int,
                    seed: int) -> tuple[float, float, float, float, int]:  # fmt: skip
    """Three SmoothDPMatching sites splitting one Synth draw of 6,000 records in the proportions
    ``sizes``, eps 1 each."""
    rng = np.random.default_rng(seed)
    normal, boot, wn, wb, clipped, sites_seen = [], [], [], [], 0, 0
    for _ in range(n_data):
        d = synth(6000, 20, a=0.0, seed=rng)
        parts = split_proportions(6000, sizes, rng)
        per_site = [releases(_smooth_plan(d, idx, 1, split), rng, per) for idx in parts]
        for r in range(per):
            sites = [s[r] for s in per_site]
            clipped += sum(abs(s.tau) == s.bound for s in sites)
            sites_seen += len(sites)
            a = combined_normal_interval(sites, method)
            b = combined_bootstrap_interval(sites, method, draws=DRAWS)
            normal.append(a.lo <= 0.5 <= a.hi)
            boot.append(b.lo <= 0.5 <= b.hi)
            wn.append(a.width)
            wb.append(b.width)
    n = len(normal)
    return np.mean(normal), np.mean(boot), np.mean(wb) / np.mean(wn), clipped / sites_seen, n


def designs(scale: float) -> Iterator[tuple[str, Callable[[], tuple[float, ...]]]]:
    site_data = max(1, round(250 * scale))  # x 20 releases: 5,000
    comb_data = max(1, round(125 * scale))  # x 20 releases: 2,500

    def synth_site(
        n: int, eps: Any, make_plan: Callable[..., MechanismPlan], size: int = 20
    ) -> Callable[[np.random.Generator], MechanismPlan]:
        def make(rng: np.random.Generator) -> MechanismPlan:
            return make_plan(synth(n, size, a=0.0, seed=rng), eps, size)

        return make

    def smooth(d: Any, eps: Any, size: int) -> MechanismPlan:
        return _smooth_plan(d, np.arange(d.w.size), eps)

    def adjusted(d: Any, eps: Any, size: int) -> MechanismPlan:
        return plan_adjusted(d.w, d.y, d.x, bound=1.0, epsilon=eps, domain_size=size)

    yield (
        "DiM site, N = 60 (10 treated), eps 1/2",
        lambda: site_design(lambda rng: _dim_plan(rng, 60, 10, "1/2"), 0.1, site_data, 20, 11),
    )
    yield (
        "DiM site, N = 400 (1:1), eps 1",
        lambda: site_design(lambda rng: _dim_plan(rng, 400, 200, "1"), 0.1, site_data, 20, 12),
    )
    yield (
        "SmoothDPMatching site, N = 3,000, eps 1",
        lambda: site_design(synth_site(3000, 1, smooth), 0.5, site_data, 20, 13),
    )
    yield (
        "SmoothDPMatching site, N = 3,000, eps 1/2",
        lambda: site_design(synth_site(3000, "1/2", smooth), 0.5, site_data, 20, 14),
    )
    low = ("7/10", "1/20", "1/4")
    yield (
        "MVAgg, 1:1:1 of 6,000, split (0.7, 0.05, 0.25)",
        lambda: combined_design((1, 1, 1), low, "mvagg", comb_data, 20, 15),
    )
    yield (
        "MVAgg, 3:2:1 of 6,000, split (0.7, 0.05, 0.25)",
        lambda: combined_design((3, 2, 1), low, "mvagg", comb_data, 20, 16),
    )
    for method, label in (("mvagg", "MVAgg"), ("all", "AggAll"),
                          ("inverse_variance", "inverse variance"),
                          ("random_effects", "DerSimonian-Laird")):  # fmt: skip
        yield (
            f"{label}, 1:1:1 of 6,000, even split",
            lambda m=method: combined_design((1, 1, 1), None, m, comb_data, 20, 17),
        )
    yield (
        "adjusted site, N = 1,000, |X| = 2, eps 1/2",
        lambda: site_design(synth_site(1000, "1/2", adjusted, 2), 0.5, site_data, 20, 18),
    )
    yield (
        "adjusted site, N = 2,000, |X| = 10, eps 1/2",
        lambda: site_design(synth_site(2000, "1/2", adjusted, 10), 0.5, site_data, 20, 19),
    )
    yield (
        "adjusted site, N = 3,000, |X| = 20, eps 1",
        lambda: site_design(synth_site(3000, 1, adjusted, 20), 0.5, site_data, 20, 20),
    )


def main(scale: float = 1.0) -> None:
    print("| what | releases | normal | bootstrap | bootstrap width / normal width | "
          "sites' tau clipped |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label, run in designs(scale):
        normal, boot, ratio, clipped, n = run()
        print(
            f"| {label} | {n:,} | {normal:.3f} | {boot:.3f} | {ratio:.2f} | {clipped:.1%} |",
            flush=True,
        )


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:2]))
