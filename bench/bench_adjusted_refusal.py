"""Could a fixed-effects release be refused before the draw, from its public design, where the
releases that resolve under-cover? (docs/explanation/adjusted.md, "The denominator's noise".)
Prints figures; asserts nothing.

For each design (Synth's 1,000 and 3,333 records over 100 evenly filled strata across budgets;
the realistic sites of ``bench_adjusted_realistic.py`` at eps 1: IHDP and Lalonde split 2 and 3
ways on their coarse and rich strata, and Synth with 384 strata), fixed effects, fixed data and
seeded releases (numpy noise, simulations only): the realised share of releases that resolve,
the coverage of the resolved releases' 95% intervals (clipped to ``[-B, B]``) of the site's own
fixed-effects estimand, and ``dpate plan``'s predicted share of resolved releases under three
assumptions: its defaults (every stratum filled evenly, treated share 1/2), the site's own
effective number of occupied strata ``N^2 / sum N_x^2`` (what a user would have to state), and
that with the site's treated share. A refusal below a predicted fifth (``SELECTED_RESOLUTION``)
is marked ``R``.

Run: ``python bench/bench_adjusted_refusal.py [RELEASES]`` (3,000 by default: about a minute;
the realistic rows need ``DPATE_DATA_DIR``).
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
from bench_adjusted_realistic import designs, estimand, occupancy

from dpate.experiments.settings import Z95
from dpate_core.mechanisms.adjusted import (
    SELECTED_RESOLUTION,
    AdjustedOptions,
    plan_adjusted_from_statistics,
)
from dpate_core.planning import Assumptions, SiteDesign, predict_site
from dpate_core.statistics import cell_statistics
from dpate_core.synth import synth

FIXED_EFFECTS = AdjustedOptions(weighting="fixed_effects")


def fixed_effects_draws(w, y, x, size: int, bound: float, eps: str, reps: int, seed: int):
    """The site's fixed-effects release plan and ``reps`` seeded draws of its noisy vectors
    (numpy noise: simulation only)."""
    stats = cell_statistics(w, y, x, domain_size=size, bound=bound)
    plan = plan_adjusted_from_statistics(stats, epsilon=eps, weighting="fixed_effects")
    rng = np.random.default_rng(seed)
    noisy = {
        s.name: s.value + s.value_scale * rng.laplace(0.0, 1.0, (reps, np.size(s.value)))
        for s in plan.noise
    }
    return plan, noisy


def site_row(name: str, w, y, x, size: int, bound: float, eps: str, reps: int, seed: int) -> None:
    plan, noisy = fixed_effects_draws(w, y, x, size, bound, eps, reps, seed)
    out = plan.assemble(noisy)
    target = estimand(w, y, x, size, "fixed_effects")
    ok = np.isfinite(out.tau)
    half = np.minimum(Z95 * np.sqrt(out.variance[ok]), bound)
    cover = float(np.mean(np.abs(out.tau[ok] - target) <= half)) if ok.any() else float("nan")
    occ = occupancy(w, y, x, size)
    design = SiteDesign("s", int(w.size), Fraction(eps), Fraction(0), plan.shares.shares)
    shares = []
    for a in (
        Assumptions(),
        Assumptions(occupied_strata=occ["occupied_strata"]),
        Assumptions(occupied_strata=occ["occupied_strata"], arm_share=occ["arm_share"]),
    ):
        p = predict_site(
            "adjusted", design, domain_size=size, bound=bound, options=FIXED_EFFECTS,
            assumptions=a,
        ).resolved_probability  # fmt: skip
        shares.append(f"{p:5.2f}{'R' if p < SELECTED_RESOLUTION else ' '}")
    print(f"{name:26s} {w.size:6d} {size:5d} {occ['occupied_strata']:6.1f} {eps:>5s} "
          f"{ok.mean():8.3f} {cover:6.3f}   " + "  ".join(shares), flush=True)  # fmt: skip


def main(reps: int = 3000) -> None:
    print("design                          N   |X|  K_eff   eps resolved  cover   "
          "predicted: default, K_eff, K_eff+share (R: refused below 0.2)")  # fmt: skip
    for n, eps_grid in ((1000, ("1/4", "9/20", "7/10", "9/10")),
                        (3333, ("9/50", "11/50", "13/50", "3/10", "7/20"))):  # fmt: skip
        d = synth(n, 100, a=0.0, b=0.2, seed=7)
        for eps in eps_grid:
            site_row(f"Synth {n} / 100", d.w.astype(np.int64), d.y, d.x, 100, 1.0, eps, reps, 4)
    for d in designs():
        for j, (w, y, x) in enumerate(d.sites):
            site_row(f"{d.name}: {j + 1}", w, y, x, d.domain_size, d.bound, "1", reps, 3)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
