"""Speed of the experiment engine. Prints figures; asserts nothing.

One panel of the paper's Figure 9 (Synth, N = 10,000, |X| = 100, J = 3 sites 1:1:1,
SmoothDPMatching, seven alphas, 100 repetitions, all five combiners), computed two ways:

* baseline: the obvious loop, one release per site per repetition through the public release
  function (``smooth_dp_matching(..., rng=generator)``: matching statistics and both smooth
  sensitivities recomputed every time) and the scalar combiners of ``dpate_core.aggregation``;
* ours: ``matching_statistics`` once per site, one plan per site and alpha, all repetitions drawn
  at once (``simulate_sites``: the plan's ``draw_many`` and ``assemble``) and the ``(reps, J)``
  combiners of ``dpate_core.simulation``.

Both compute the same mechanism; the figure is the ratio. Then the whole ``dpate experiments``
run (``--quick`` and full) with its per-stage timings.

Run: ``python bench/bench_experiments.py`` (about 2 minutes; ``--quick``: 20 repetitions and no
full run).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpate.experiments.run import run_experiments
from dpate.experiments.settings import ALPHAS, ExperimentSettings
from dpate_core.aggregation import COMBINERS
from dpate_core.mechanisms.matching import plan_matching, smooth_dp_matching
from dpate_core.simulation import aggregate_many, simulate_sites, site_epsilons
from dpate_core.statistics import matching_statistics
from dpate_core.synth import split_proportions, synth

DELTA = Fraction(1, 100_000)


def _panel_inputs():
    data = synth(10_000, 100, seed=1)
    parts = split_proportions(data.n, (1, 1, 1), 2)
    return [(data.w[i], data.y[i], data.x[i]) for i in parts]


def baseline(sites, reps: int) -> float:
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for alpha in ALPHAS:
        eps = site_epsilons(1, alpha, len(sites))
        for _ in range(reps):
            ests = [
                smooth_dp_matching(
                    w, y, x, bound=1.0, epsilon=e, delta=DELTA, domain_size=100, rng=rng
                )
                for (w, y, x), e in zip(sites, eps, strict=True)
            ]
            tau = [e.tau for e in ests]
            n = [e.n for e in ests]
            var = [e.variance for e in ests]
            for fn in COMBINERS.values():
                fn(tau, n, var)
    return time.perf_counter() - t


def vectorised(sites, reps: int) -> float:
    t = time.perf_counter()
    stats = [matching_statistics(w, y, x, 100, bound=1.0) for w, y, x in sites]
    for alpha in ALPHAS:
        eps = site_epsilons(1, alpha, len(sites))
        plans = [
            plan_matching("smooth_matching", s, bound=1.0, epsilon=e, delta=DELTA, domain_size=100)
            for s, e in zip(stats, eps, strict=True)
        ]
        tau, n, var = simulate_sites(plans, np.random.default_rng(0), reps)
        for name in COMBINERS:
            aggregate_many(name, tau, n, var)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    reps = 20 if args.quick else 100
    sites = _panel_inputs()
    vectorised(sites, 2)  # warm-up: numba kernels, OpenDP import
    baseline(sites, 1)
    b = min(baseline(sites, reps) for _ in range(1 if args.quick else 2))
    v = min(vectorised(sites, reps) for _ in range(3))
    print(f"one panel (Synth J=3 1:1:1 SmoothDPMatching, 7 alphas x {reps} reps, 5 combiners)")
    print(f"  baseline loop (release per site per repetition): {b:8.3f} s")
    print(f"  vectorised (plans once, draw_many, (reps, J)):   {v:8.3f} s")
    print(f"  speed-up: {b / v:.0f}x")
    runs = [("quick", ExperimentSettings.quick())]
    if not args.quick:
        runs.append(("full", ExperimentSettings()))
    for label, settings in runs:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            res = run_experiments(settings, Path(tmp))
            wall = time.perf_counter() - t
        stages = ", ".join(f"{k} {v:.1f}" for k, v in res["timings"].items())
        print(f"dpate experiments {label}: {wall:.1f} s wall, {len(res['rows'])} points; {stages}")


if __name__ == "__main__":
    main()
