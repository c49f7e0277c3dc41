"""The difference in means' budget split: MSE and 95% coverage of one site's interval by the
first part's share (the arm sums, or with private arm sizes the arms' (arm, end) histogram),
the rest to the arm sums of squares (docs/explanation/results.md, "Budget split presets").

Fresh trials of ``N`` records, half treated, outcome ``clip(0.4 + 0.2 w + N(0, sd), 0, 1)``
(``B`` 1), at each epsilon and share: 5 releases of each (numpy noise at the plan's scales, a
simulation, not a release), the MSE against the population effect and the coverage of the
normal interval with the released variance. Prints one table per arm-size setting; the MSE as a
ratio to the even split's, measured on the same trials and noise seeds.

    python bench/bench_dim_split.py [TRIALS]
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np

from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.release import draw_many

Z95 = 1.959963984540054
SHARES = ("1/2", "7/10", "4/5", "9/10")
SIZES = (200, 1000, 5000)
EPS = ("1/2", "1", "2")
SDS = (0.1, 0.25)


def truth(sd: float) -> float:
    """The population effect of :func:`row`'s trials (the clipping moves it from 0.2)."""
    e = np.random.default_rng(0).normal(0.0, sd, 2_000_000)
    return float(np.mean(np.clip(0.6 + e, 0.0, 1.0)) - np.mean(np.clip(0.4 + e, 0.0, 1.0)))


def row(
    n: int, eps: str, sd: float, public: bool, trials: int, seed: int
) -> list[tuple[float, float]]:
    """``(MSE, coverage)`` per share of :data:`SHARES` against the population effect, over
    ``trials`` fresh trials x 5 releases each (the same trials and noise seeds for every share)."""
    target = truth(sd)
    w = np.r_[np.ones(n // 2, np.int64), np.zeros(n - n // 2, np.int64)]
    sq, hit = np.zeros(len(SHARES)), np.zeros(len(SHARES))
    for t in range(trials):
        rng = np.random.default_rng([seed, t])
        y = np.clip(0.4 + 0.2 * w + rng.normal(0.0, sd, n), 0.0, 1.0)
        for i, share in enumerate(SHARES):
            rest = str(1 - Fraction(share))
            plan = plan_difference_in_means(
                w, y, bound=1.0, epsilon=eps, split=[share, rest], arm_sizes_public=public
            )
            res = plan.assemble(draw_many(plan, np.random.default_rng([seed, t, 1]), 5))
            err = np.asarray(res.tau) - target
            sq[i] += float(np.sum(err**2))
            hit[i] += float(np.sum(np.abs(err) <= Z95 * np.sqrt(np.asarray(res.variance))))
    return [(sq[i] / (5 * trials), hit[i] / (5 * trials)) for i in range(len(SHARES))]


def main(trials: int = 400) -> None:
    for public in (True, False):
        print(f"\n{'public' if public else 'private'} arm sizes: MSE over the even split's "
              f"(coverage of the population effect), {trials} trials x 5 releases per cell")  # fmt: skip
        print("| N | eps | sd | " + " | ".join(f"sums {s}" for s in SHARES) + " |")
        print("|---|---|---|" + "---|" * len(SHARES))
        for n in SIZES:
            for eps in EPS:
                for sd in SDS:
                    r = row(n, eps, sd, public, trials, n + len(eps) + int(100 * sd))
                    base = r[0][0]
                    cells = " | ".join(f"{m / base:.2f} ({c:.3f})" for m, c in r)
                    print(f"| {n:,} | {eps} | {sd} | {cells} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
