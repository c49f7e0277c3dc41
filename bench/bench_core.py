"""Speed and memory of dpate_core. Prints figures; asserts nothing.

Each figure is printed next to a baseline measured in the same run, so that the ratios carry over
between machines:

* the whole ``smooth_dp_matching`` release (secure OpenDP noise, ``rng=None``) at N = 10^7 records
  and |X| = 10^4 strata, against one ``np.bincount`` over the stratum ids (target: <= 10x);
* its peak memory above the inputs, against the size of the input arrays (target: <= 3x), measured
  as the rise of the resident-set high-water mark (``VmHWM`` in ``/proc/self/status``, reset
  through ``/proc/self/clear_refs``) in a fresh subprocess: numba's allocations are invisible to
  tracemalloc, which is printed alongside for the numpy-visible part;
* ``matching_smooth_sensitivity`` (target: <= 50 ms) and ``matching_variance_smooth_sensitivity``
  (<= 1 s) at |X| = 10^5 strata and N = 10^7, on typical counts and on an adversarial input whose
  Pareto front (correction 9) is as long as N allows;
* ``mvagg`` at J = 10^6 sites (<= 1 s) against one ``np.argsort`` of J floats, and the brute force
  of Algorithm 3 at J = 20 against ``mvagg`` at J = 20.

Run: ``python bench/bench_core.py`` (about a minute; ``--quick`` for a smaller smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
from _inputs import site_data
from _timing import line, memory_child_result, parse_or_run_child, peak_rise, print_peak, timed

from dpate_core.aggregation import mvagg, mvagg_brute_force
from dpate_core.mechanisms.matching import (
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
    smooth_dp_matching,
)

EPSILON, DELTA = 1, "1e-5"
# the release's beta for each part: eps/3, delta/3 (the even split)
BETA = smooth_beta(1 / 3, 1e-5 / 3)


def release(w, y, x, strata):
    return smooth_dp_matching(
        w, y, x, bound=1.0, epsilon=EPSILON, delta=DELTA, domain_size=strata, rng=None
    )


# ---------------------------------------------------------------------------------------------


def bench_release(n: int, strata: int, repeats: int) -> None:
    print(f"smooth_dp_matching, N = {n:.0e}, |X| = {strata:.0e} (secure noise)")
    w, y, x = site_data(n, strata)
    base, base_med = timed(lambda: np.bincount(x, minlength=strata), repeats)
    rel, rel_med = timed(lambda: release(w, y, x, strata), repeats)
    line("np.bincount(x) baseline (best / median)", f"{base * 1e3:.1f} ms", f"{base_med * 1e3:.1f}")
    line("whole release (best / median)", f"{rel * 1e3:.1f} ms", f"{rel_med * 1e3:.1f}")
    line("ratio release / bincount (best; target <= 10)", f"{rel / base:.1f}x",
         f"median {rel_med / base_med:.1f}x")  # fmt: skip


def memory_child(n: int, strata: int) -> None:
    """Runs in a fresh process: inputs, warm-up, reset the high-water mark, one release."""
    w, y, x = site_data(n, strata)
    release(w[:1000], y[:1000], x[:1000], strata)  # load numba's cache and OpenDP first
    input_bytes = w.nbytes + y.nbytes + x.nbytes
    print(json.dumps(peak_rise(lambda: release(w, y, x, strata), input_bytes, traced=True)))


def bench_memory(n: int, strata: int) -> None:
    print(f"smooth_dp_matching peak memory, N = {n:.0e}, |X| = {strata:.0e} (fresh subprocess)")
    m = memory_child_result(__file__, n, strata)
    mb = 1 / 2**20
    inputs = m["input_bytes"]
    print_peak(m, digits=0)
    line("  of which numpy-visible (tracemalloc peak)", f"{m['traced_peak'] * mb:.0f} MiB")
    line("ratio peak rise / inputs (target <= 3)", f"{m['peak_rise'] / inputs:.2f}x")
    line("ratio inputs + peak rise / inputs", f"{(inputs + m['peak_rise']) / inputs:.2f}x")


def typical_counts(n: int, strata: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    size = rng.multinomial(n, np.full(strata, 1.0 / strata))
    treated = rng.binomial(size, rng.uniform(0.1, 0.9, strata))
    return treated, size - treated


def adversarial_counts(n: int, strata: int):
    """As many strata on the (high M, low m) Pareto front as N allows (correction 9: only
    front strata are evaluated): stratum i has T = C = i for i = 1..K, no stratum dominates
    another; the other strata hold (1, 1) each (duplicates, off the front) and the remainder goes to
    the largest front stratum's treated arm."""
    others = strata
    k = int((np.sqrt(1 + 4 * (n - 2 * others)) - 1) / 2)
    while k * (k + 1) + 2 * (strata - k) > n:
        k -= 1
    k = min(k, strata)
    i = np.arange(1, k + 1)
    treated = np.ones(strata, np.int64)
    control = np.ones(strata, np.int64)
    treated[:k], control[:k] = i, i
    treated[k - 1] += n - int(treated.sum() + control.sum())
    return treated, control, k


def bench_sensitivity(n: int, strata: int, repeats: int) -> None:
    print(f"smooth sensitivities, N = {n:.0e}, |X| = {strata:.0e}, beta = {BETA:.5f} (eps 1/3)")
    rng = np.random.default_rng(5)
    ids = rng.integers(0, strata, n)
    base, _ = timed(lambda: np.bincount(ids, minlength=strata), repeats)
    line("np.bincount over N ids (baseline)", f"{base * 1e3:.1f} ms")
    t_typ, c_typ = typical_counts(n, strata)
    t_adv, c_adv, front = adversarial_counts(n, strata)
    assert int(t_adv.sum() + c_adv.sum()) == n and c_adv.min() >= 0
    for name, fn, target in (
        ("matching_smooth_sensitivity", matching_smooth_sensitivity, 0.05),
        ("matching_variance_smooth_sensitivity", matching_variance_smooth_sensitivity, 1.0),
    ):
        for label, t, c in (("typical", t_typ, c_typ), (f"front of {front}", t_adv, c_adv)):
            best, _ = timed(lambda t=t, c=c, fn=fn: fn(t, c, n, 1.0, BETA, strata), repeats)
            line(f"{name} ({label})", f"{best * 1e3:.1f} ms",
                 f"target {target * 1e3:.0f} ms; {best / base:.2f}x bincount")  # fmt: skip


def bench_mvagg(sites: int, brute_sites: int, repeats: int) -> None:
    print(f"MVAgg, J = {sites:.0e}; brute force at J = {brute_sites}")
    rng = np.random.default_rng(7)
    tau = rng.normal(0.3, 1.0, sites)
    n = rng.integers(50, 10_000, sites).astype(float)
    var = rng.gamma(2.0, 1.0, sites) / n
    base, _ = timed(lambda: np.argsort(n * var, kind="stable"), repeats)
    fast, fast_med = timed(lambda: mvagg(tau, n, var), repeats)
    line("np.argsort(N_j var_j) baseline", f"{base * 1e3:.0f} ms")
    line("mvagg (best / median; target <= 1 s)", f"{fast * 1e3:.0f} ms",
         f"{fast_med * 1e3:.0f}; {fast / base:.1f}x argsort")  # fmt: skip
    small = slice(0, brute_sites)
    small_fast, _ = timed(lambda: mvagg(tau[small], n[small], var[small]), repeats)
    t0 = time.perf_counter()
    brute = mvagg_brute_force(tau[small], n[small], var[small])
    t_brute = time.perf_counter() - t0
    same = brute.used == mvagg(tau[small], n[small], var[small]).used
    line(f"mvagg at J = {brute_sites}", f"{small_fast * 1e6:.0f} us")
    line(f"brute force at J = {brute_sites} (2^J - 1 subsets, one run)", f"{t_brute:.1f} s",
         f"{t_brute / small_fast:.0f}x mvagg; same set: {same}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parse_or_run_child(parser, memory_child)
    if args is None:
        return
    scale = 100 if args.quick else 1
    n, repeats = 10**7 // scale, 5
    print(
        f"dpate_core benchmarks  {time.strftime('%Y-%m-%d %H:%M')}  python {platform.python_version()}"
        f"  numpy {np.__version__}  {os.cpu_count()} cpus  load {os.getloadavg()[0]:.1f}"
    )
    bench_release(n, 10**4, repeats)
    if Path("/proc/self/clear_refs").exists():
        bench_memory(n, 10**4)
    bench_sensitivity(n, 10**5 // scale, repeats)
    bench_mvagg(10**6 // scale, 20 if not args.quick else 12, repeats)


if __name__ == "__main__":
    main()
