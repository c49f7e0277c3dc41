"""Where the adjusted release's reported variance exceeds the actual one, on the coverage study's
Synth sites (docs/explanation/adjusted.md, "Where the reported variance is conservative"). Prints figures;
asserts nothing.

For every site epsilon of the coverage grid (eps_1 in {1/2, 1, 5} x alpha in {1/8, 1, 8}, J = 3,
1:1:1 of N = 10^4, |X| = 100; "auto" weighting), over the coverage study's own data draws
(Synth redrawn, target 0.5) and seeded releases (numpy noise, simulations only): the weighting,
the share of unresolved releases (no estimate published), the bias, the actual variance of
the released tau around 0.5 on resolved releases, and the mean (median) reported variance over it, split
into its parts (noise, sampling, unestimated), the noise part over the resolved releases' own spread
at fixed data, and the coverage of tau +- 1.96 sqrt(variance) of the resolved releases.

Run: ``python bench/bench_adjusted_variance.py [DATA_DRAWS] [RELEASES] [WEIGHTING]`` (12 x 1000:
about 40 s; ``WEIGHTING`` ``auto`` by default, or ``fixed_effects`` / ``subclassification`` forced).
"""

from __future__ import annotations

import sys

import numpy as np

from dpate.experiments.coverage import COVERAGE_ALPHAS, COVERAGE_EPSILONS, _coverage_population
from dpate.experiments.data import default_source
from dpate.experiments.settings import Z95, ExperimentSettings, generator
from dpate.experiments.sweep import prepare
from dpate_core.mechanisms.adjusted import plan_adjusted_from_statistics, plan_weighting
from dpate_core.release import draw_many
from dpate_core.simulation import site_epsilons
from dpate_core.synth import parse_proportions


def main(n_data: int = 12, per: int = 1000, weighting: str = "auto") -> None:
    settings = ExperimentSettings()
    draw, target = _coverage_population("Synth", "adjusted", settings, default_source())
    grid = {e for e1 in COVERAGE_EPSILONS for a in COVERAGE_ALPHAS for e in site_epsilons(e1, a, 3)}
    parts: dict = {e: {k: [] for k in ("tau", "var", "noise", "unest", "mode")} for e in grid}
    for i in range(n_data):
        stats = prepare(draw(i, parse_proportions("1:1:1")), "adjusted")[0][0]
        for e in sorted(grid):
            for j, st in enumerate(stats):
                plan = plan_adjusted_from_statistics(st, epsilon=e, weighting=weighting)
                out = plan.assemble(draw_many(plan, generator(settings, "bav", e, j, i), per))
                p = parts[e]
                p["tau"].append(out.tau)
                p["var"].append(out.variance)
                p["noise"].append(out.diagnostics["noise_variance"])
                p["unest"].append(out.diagnostics["unestimated_variance"])
                p["mode"] = plan_weighting(plan)
    print(f"{n_data} data draws x 3 sites x {per} releases per site epsilon")
    print("eps_j  weighting  unresolved  bias  actual_var  reported/actual (median)  "
          "noise/own_spread  sampling/actual  unestimated/actual  coverage")  # fmt: skip
    for e in sorted(grid):
        p = parts[e]
        tau, var, noise, unest = (np.stack(p[k]) for k in ("tau", "var", "noise", "unest"))
        ok = np.isfinite(tau)  # resolved releases (an unresolved one publishes no estimate)
        actual = np.mean((tau[ok] - target) ** 2)
        spread = np.mean(np.nanvar(tau, axis=1))
        sampling = var - noise - unest
        covered = np.mean(np.abs(tau[ok] - target) <= Z95 * np.sqrt(var[ok]))
        print(f"{float(e):7.4f}  {p['mode'][:14]:14s} {1 - ok.mean():5.2f}  "
              f"{np.mean(tau[ok]) - target:+.4f}  {actual:.2e}  {np.mean(var[ok]) / actual:5.2f} "
              f"({np.median(var[ok]) / actual:4.2f})  "
              f"{np.mean(noise[ok]) / spread:5.2f}  {np.mean(sampling[ok]) / actual:5.2f}  "
              f"{np.mean(unest[ok]) / actual:5.2f}  {covered:.3f}")  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*(int(a) for a in args[:2]), *args[2:3])
