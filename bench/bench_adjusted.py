"""Speed and memory of the adjusted release (dpate_core.mechanisms.adjusted). Prints figures; asserts nothing.

At N = 10^7 records and |X| = 10^4 strata (2 * 10^4 cells), each figure next to one
``np.bincount`` over the stratum ids measured in the same run (goal: one release plan + draw within
5x of it):

* the compiled pass (``cell_statistics``: validation, quantisation, per-cell counts and exact
  integer sums), and the whole plan (``plan_adjusted``);
* the secure draw (``draw_once`` with ``rng=None``: three integer Laplace vectors,
  3 * 2 |X| = 6 * 10^4 entries, the exact discrete sampler of dpate_core.noise),
  whose cost grows with the number of cells, not with N;
* the whole release (``dp_adjusted``, secure) and its peak memory above the inputs, as the rise of
  the resident-set high-water mark in a fresh subprocess (as in ``bench_core.py``).

Run: ``python bench/bench_adjusted.py`` (about a minute; ``--quick`` for 1/100 of the size).
``--choose-split`` and ``--compare`` print the simulations behind the default split and the
comparison with the other estimators in ``docs/explanation/adjusted.md`` (seeded; a few minutes each).
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

import numpy as np
from _inputs import site_data
from _timing import line, memory_child_result, parse_or_run_child, peak_rise, print_peak, timed

from dpate_core.mechanisms.adjusted import dp_adjusted, plan_adjusted, plan_adjusted_from_statistics
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import draw_many, draw_once
from dpate_core.statistics import cell_statistics, matching_statistics
from dpate_core.synth import synth

SIM_REPS = 4000


def bench_release(n: int, strata: int, repeats: int) -> None:
    print(f"adjusted release, N = {n:.0e}, |X| = {strata:.0e} (secure noise)")
    w, y, x = site_data(n, strata)
    kw = {"bound": 1.0, "epsilon": 1, "domain_size": strata}
    base, base_med = timed(lambda: np.bincount(x, minlength=strata), repeats)
    stats, stats_med = timed(
        lambda: cell_statistics(w, y, x, domain_size=strata, bound=1.0), repeats
    )
    plan_t, plan_med = timed(lambda: plan_adjusted(w, y, x, **kw), repeats)
    plan = plan_adjusted(w, y, x, **kw)
    entries = sum(spec.loc.size for spec in plan.noise)
    draw, draw_med = timed(lambda: draw_once(plan), max(1, repeats // 2))
    whole, whole_med = timed(lambda: dp_adjusted(w, y, x, **kw), max(1, repeats // 2))
    line("np.bincount(x) baseline (best / median)", f"{base * 1e3:.1f} ms", f"{base_med * 1e3:.1f}")
    line("cell_statistics: the compiled pass", f"{stats * 1e3:.1f} ms",
         f"{stats / base:.1f}x bincount (median {stats_med * 1e3:.1f} ms)")  # fmt: skip
    line("plan_adjusted: pass + plan", f"{plan_t * 1e3:.1f} ms",
         f"{plan_t / base:.1f}x bincount (median {plan_med * 1e3:.1f} ms)")  # fmt: skip
    line(f"draw_once, secure ({entries} exact discrete Laplace entries)", f"{draw * 1e3:.1f} ms",
         f"{draw / entries * 1e6:.1f} us/entry (median {draw_med * 1e3:.1f} ms)")  # fmt: skip
    line("whole release dp_adjusted (plan + secure draw)", f"{whole * 1e3:.1f} ms",
         f"{whole / base:.1f}x bincount (median {whole_med * 1e3:.1f} ms)")  # fmt: skip


def memory_child(n: int, strata: int) -> None:
    """Runs in a fresh process: inputs, warm-up, reset the high-water mark, one release."""
    w, y, x = site_data(n, strata)
    kw = {"bound": 1.0, "epsilon": 1, "domain_size": strata}
    dp_adjusted(w[:1000], y[:1000], x[:1000], **kw)  # numba's cache and OpenDP loaded first
    input_bytes = w.nbytes + y.nbytes + x.nbytes
    m = peak_rise(lambda: dp_adjusted(w, y, x, **kw), input_bytes)
    print(json.dumps({k: m[k] for k in ("input_bytes", "hwm_reset_ok", "peak_rise")}))


def bench_memory(n: int, strata: int) -> None:
    print(f"adjusted release peak memory, N = {n:.0e}, |X| = {strata:.0e} (fresh subprocess)")
    m = memory_child_result(__file__, n, strata)
    print_peak(m, digits=1)
    line("ratio peak rise / inputs", f"{m['peak_rise'] / m['input_bytes']:.3f}x")


def _summary(out, truth: float) -> str:
    """Bias, sd, rmse and coverage of the resolved releases, and the share left unresolved."""
    t = np.asarray(out.tau)
    ok = np.isfinite(t)
    t, v = t[ok], np.broadcast_to(out.variance, ok.shape)[ok]
    bias, sd = t.mean() - truth, t.std()
    cover = np.mean(np.abs(t - truth) <= 1.96 * np.sqrt(v))
    text = f"bias {bias:+.4f} sd {sd:.4f} rmse {np.hypot(bias, sd):.4f} cover {cover:.3f}"
    return text + ("" if ok.all() else f" unresolved {1 - ok.mean():.2f}")


def choose_split() -> None:
    """The simulation behind DEFAULT_SPLIT and THRESHOLD_FACTOR (docs/explanation/adjusted.md)."""
    splits = [("1/5", "3/5", "1/5"), ("3/10", "1/2", "1/5"), ("2/5", "2/5", "1/5"),
              ("2/5", "1/2", "1/10"), ("9/20", "9/20", "1/10"), ("7/20", "11/20", "1/10")]  # fmt: skip
    for n, strata in ((10_000, 100), (50_000, 100), (10_000, 20)):
        for seed in (1, 2, 3):
            d = synth(n, strata, seed=seed)
            st = cell_statistics(d.w, d.y, d.x, domain_size=strata, bound=d.bound)
            truth = matching_statistics(d.w, d.y, d.x, strata, bound=d.bound).tau
            print(f"N = {n}, |X| = {strata}, seed {seed}, a = {d.a:+.2f}, eps = 1")
            for split in splits:
                for factor in (1.0, 2.0):
                    count_scale = 2 / float(Fraction(split[0]))
                    plan = plan_adjusted_from_statistics(
                        st, epsilon=1, split=split, min_count=max(2.0, factor * count_scale)
                    )
                    out = plan.assemble(draw_many(plan, np.random.default_rng(seed), SIM_REPS))
                    line(f"split {split} threshold factor {factor:g}", "", _summary(out, truth))


def compare() -> None:
    """Adjusted vs SmoothDPMatching, GlobalDPMatching and DiM on Synth (docs/explanation/adjusted.md)."""
    settings = ((10_000, 100, 1), (10_000, 100, "1/2"), (100_000, 100, 1), (10_000, 1000, 1),
                (1000, 10, 1))  # fmt: skip
    for n, strata, eps in settings:
        for seed in (1, 3):
            d = synth(n, strata, seed=seed)
            st = matching_statistics(d.w, d.y, d.x, strata, bound=d.bound)
            print(f"N = {n}, |X| = {strata}, eps = {eps}, seed {seed}, a = {d.a:+.2f}")
            plans = {
                "adjusted": plan_adjusted(d.w, d.y, d.x, bound=d.bound, epsilon=eps,
                                          domain_size=strata),
                **{est: plan_matching(est, st, bound=d.bound, epsilon=eps, delta="1e-5",
                                      domain_size=strata)
                   for est in ("smooth_matching", "global_matching")},
                **{f"dim (public arms {pub})": plan_difference_in_means(
                       d.w, d.y, bound=d.bound, epsilon=eps, arm_sizes_public=pub)
                   for pub in (True, False)},
            }  # fmt: skip
            for name, plan in plans.items():
                out = plan.assemble(draw_many(plan, np.random.default_rng(seed), SIM_REPS))
                line(name, "", _summary(out, st.tau))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/100 of the size")
    parser.add_argument("--choose-split", action="store_true", help="the split simulation")
    parser.add_argument("--compare", action="store_true", help="compare with other estimators")
    args = parse_or_run_child(parser, memory_child)
    if args is None:
        return
    if args.choose_split or args.compare:
        if args.choose_split:
            choose_split()
        if args.compare:
            compare()
        return
    n, strata, repeats = (10**5, 10**2, 3) if args.quick else (10**7, 10**4, 7)
    bench_release(n, strata, repeats)
    bench_memory(n, strata)


if __name__ == "__main__":
    main()
