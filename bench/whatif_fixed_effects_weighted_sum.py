"""The adjusted estimator's fixed-effects sums as weighted-sum queries (``weighted_sum = true``):
the what-if that led to them, the release against the histogram alone, and ``dpate plan``'s
prediction of both.

The fixed-effects estimate is ``A / D``, ``A = sum_x (s_tx n_cx - s_cx n_tx)``, ``D = sum_x n_tx
n_cx``, read from the cells' noisy histogram. Given the histogram's noisy counts, ``A`` is linear
in the cells' centred sums with coefficients ``n_hat_c`` (treated cells) and ``-n_hat_t``
(controls), and ``sum_x n_tx n_hat_cx`` is linear in the treated counts: each can be released as
one scalar query whose noise is set by its coefficients' cap (times ``B`` for the sums), whatever
the number of strata, where the histogram's reading carries one noise term per cell (and the
products of two noises, ``|X| (2 v_s v_n + v_n^2)``, which dominate on sparse strata).

Default (stop 46's what-if, not the release): the histogram at the budget left after the
queries, the queries uncapped at continuous Laplace noise, each pair of readings combined by
their noise variances (the denominator's as if independent); prints the noise error of ``tau``
against the same data's noise-free fixed-effects estimate and the share of releases the
resolution rule resolves.

    cd bench && python whatif_fixed_effects_weighted_sum.py [--sizes 1000 3000 10000] [--sets 8]

``--release``: the release itself (``plan_adjusted_from_statistics`` with the four-part split,
capped coefficients since stop 47; ``--splits a,b,c,d ...`` compares splits, ``--reps`` the
releases per data set, 25 by default) against the histogram alone, on fresh data sets: resolved
share, coverage of the fixed-effects estimand (0.3 on the 384 strata; on the 24, which leave two
numeric confounders out, its value on 2,000,000 records, :data:`ESTIMAND_24`), mean width, RMSE.
``--plan``: ``dpate plan``'s predicted width over the realised one, with and without the queries
(:func:`plan_rows`). ``--parts``: the reported variance's parts against what each estimates, on
24 strata (:func:`parts_rows`; ``--sizes 10000 --sets 1000``). docs/explanation/adjusted.md,
"The fixed-effects sums as weighted-sum queries", has the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
from fractions import Fraction

import bench_propensity as bp
import numpy as np

from dpate_core.mechanisms.adjusted import (
    DEFAULT_SPLIT_QUERIES,
    RESOLVE_Z,
    histogram_vectors,
    plan_adjusted_from_statistics,
    plan_constants,
)
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics

#: the normal 95% quantile
Z = 1.959963984540054
#: (numerator query's share, denominator query's share) of eps; the histogram and squares the rest
VARIANTS = ((0.0, 0.0), (0.3, 0.0), (0.5, 0.0), (0.3, 0.2))


def releases(d: bp.Data, reps: int, shares: tuple[float, float], rng: np.random.Generator):
    q, r = shares
    cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
    rest = Fraction(1 - q - r).limit_denominator(1000)
    plan = plan_adjusted_from_statistics(cells, epsilon=rest, weighting="fixed_effects")
    c = plan_constants(plan)
    v = histogram_vectors(c, draw_many(plan, rng, reps))
    cnt = np.clip(np.asarray(v["counts"]), -c.n, c.n)
    s = np.asarray(v["sums"])
    n_c, n_t, s_c, s_t = cnt[:, 0::2], cnt[:, 1::2], s[:, 0::2], s[:, 1::2]
    big_a = np.sum(s_t * n_c - s_c * n_t, -1)
    big_d = np.sum(n_t * n_c, -1)
    if q > 0:
        coef = np.empty_like(cnt)
        coef[:, 1::2], coef[:, 0::2] = n_c, -n_t
        top = np.max(np.abs(coef), -1)
        exact = cells.sums * cells.sum_unit
        read = np.sum(coef * exact, -1) + top * rng.laplace(0.0, 1.0 / q, reps)  # sens top B
        a, b = c.v_s * np.sum(coef * coef, -1), 2.0 * (top / q) ** 2
        big_a = big_a + a / (a + b) * (read - np.sum(coef * s, -1))
    if r > 0:
        top_c = np.maximum(np.max(np.abs(n_c), -1), 1.0)
        read = np.sum(cells.counts[1::2] * n_c, -1) + top_c * rng.laplace(0.0, 1.0 / r, reps)
        va = c.v_n * np.sum(n_t**2 + n_c**2, -1) + c.n_strata * c.v_n**2
        vb = c.v_n * np.sum(n_t**2, -1) + 2.0 * (top_c / r) ** 2
        big_d = (big_d * vb + read * va) / (va + vb)
    floor = c.n_strata * c.v_n**2
    var_d = np.maximum(c.v_n * np.sum(n_t**2 + n_c**2, -1) - floor, floor)
    resolved = big_d > RESOLVE_Z * np.sqrt(var_d)
    return np.where(resolved, np.clip(big_a / np.where(resolved, big_d, 1.0), -1, 1), np.nan)


#: the sd of the bench Synth's true propensity logit over its records (``bp.synth5``'s index:
#: ``sqrt(0.4^2 1.25 + 0.5^2 2/3 + 0.6^2 / 4 + 1.2^2 / 12 + 0.8^2 / 20)``)
PROPENSITY_SD = 0.78
#: the fixed-effects estimand on the 24 strata of :func:`coarse` (2,000,000 records, no noise)
ESTIMAND_24 = 0.30998
#: the release's four-part split (the histogram and squares, the numerator and denominator)
QUERIES = DEFAULT_SPLIT_QUERIES


def release_rows(
    sizes: list[int], sets: int, reps: int, splits: tuple[tuple[str, ...], ...] = (QUERIES,)
) -> None:
    """The release with the queries (at each split of ``splits``) against the histogram alone
    (module docstring)."""
    print("| eps 1, one site | strata | release | resolved | coverage | width | RMSE |")
    print("|---|---|---|---|---|---|---|")
    names = {"histogram": None} | {
        "with the queries" if split == QUERIES and len(splits) == 1 else ", ".join(split): split
        for split in splits
    }
    for n in sizes:
        for label, shape, truth in (("24", coarse, ESTIMAND_24), ("384", lambda d: d, 0.3)):
            rd = np.random.default_rng(n + 7)
            rows: dict[str, list[list[float]]] = {name: [] for name in names}
            for _ in range(sets):
                d = shape(bp.synth5(rd, n))
                cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
                seed = int(rd.integers(1 << 30))
                for name, split in names.items():
                    plan = plan_adjusted_from_statistics(
                        cells, epsilon=1, split=split, weighting="fixed_effects"
                    )
                    out = plan.assemble(draw_many(plan, np.random.default_rng(seed), reps))
                    tau, var = np.asarray(out.tau, float), np.asarray(out.variance, float)
                    ok = np.isfinite(tau) & np.isfinite(var)
                    half = Z * np.sqrt(np.where(ok, var, 0.0))
                    for i in np.flatnonzero(ok):
                        rows[name].append([abs(tau[i] - truth) <= half[i], 2 * half[i],
                                           (tau[i] - truth) ** 2])  # fmt: skip
                    rows[name] += [[np.nan] * 3] * int(np.sum(~ok))
            for name, r in rows.items():
                a = np.asarray(r, dtype=np.float64)
                solved = np.isfinite(a[:, 0])
                print(f"| {n:,} | {label} | {name} | {np.mean(solved):.2f} | "
                      f"{np.mean(a[solved, 0]):.3f} | {np.mean(a[solved, 1]):.4f} | "
                      f"{np.sqrt(np.mean(a[solved, 2])):.4f} |", flush=True)  # fmt: skip


def record_sandwich(d: bp.Data) -> tuple[float, float]:
    """The fixed-effects estimate and its sandwich variance from the records themselves, no
    noise: each record's influence ``n_c (y - ybar_c - tau)`` (treated) or ``n_t (ybar_t - y -
    tau)`` (control), ``sum h^2 / D^2``."""
    w, x, k = d.w.astype(np.int64), d.x.astype(np.int64), d.domain
    cells = 2 * x + w
    cnt = np.bincount(cells, minlength=2 * k).astype(float)
    tot = np.bincount(cells, weights=d.y, minlength=2 * k)
    n_c, n_t = cnt[0::2], cnt[1::2]
    big_d = float(np.sum(n_t * n_c))
    tau = float(np.sum(tot[1::2] * n_c - tot[0::2] * n_t)) / big_d
    m_t, m_c = (
        np.where(n > 0, t / np.maximum(n, 1.0), 0.0)
        for n, t in ((n_t, tot[1::2]), (n_c, tot[0::2]))
    )
    h = np.where(w == 1, n_c[x] * (d.y - m_c[x] - tau), n_t[x] * (m_t[x] - d.y - tau))
    return tau, float(np.sum(h * h)) / big_d**2


def parts_rows(sizes: list[int], sets: int, reps: int) -> None:
    """The reported variance's parts against what they estimate, on 24 strata (``coarse``), with
    and without the queries: coverage; the spread of the noise-free estimate over the data sets
    against the records' sandwich; the released sandwich's mean and sd over the releases; the
    noise part reported against the realised spread of the release around the same data's
    noise-free estimate (docs/explanation/adjusted.md, "The fixed-effects sandwich's own noise")."""
    for n in sizes:
        rd = np.random.default_rng(n + 11)
        rows: dict[str, list[list[float]]] = {"histogram": [], "with the queries": []}
        exact = []
        for _ in range(sets):
            d = coarse(bp.synth5(rd, n))
            t0, v0 = record_sandwich(d)
            exact.append((t0, v0))
            cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
            seed = int(rd.integers(1 << 30))
            for name, split in (("histogram", None), ("with the queries", QUERIES)):
                plan = plan_adjusted_from_statistics(
                    cells, epsilon=1, split=split, weighting="fixed_effects"
                )
                out = plan.assemble(draw_many(plan, np.random.default_rng(seed), reps))
                sampling = np.asarray(out.diagnostics["sampling_variance_dp"], float)
                noise = np.asarray(out.diagnostics["noise_variance"], float)
                for i in range(reps):
                    rows[name].append([out.tau[i], out.variance[i], sampling[i], noise[i], t0])
        e = np.asarray(exact)
        print(f"\n{n:,} records, 24 strata, {sets} data sets x {reps} releases: the noise-free "
              f"estimate's spread {np.var(e[:, 0]):.3g}, the records' sandwich "
              f"{np.mean(e[:, 1]):.3g}")  # fmt: skip
        for name, r in rows.items():
            a = np.asarray(r, dtype=np.float64)
            tau, var, sampling, noise, t0 = a.T
            cover = np.mean(np.abs(tau - ESTIMAND_24) <= Z * np.sqrt(var))
            print(f"  {name}: coverage {cover:.3f}, mean width {np.mean(2 * Z * np.sqrt(var)):.4f}, "
                  f"reported/MSE {np.mean(var) / np.mean((tau - ESTIMAND_24) ** 2):.2f}; released "
                  f"sandwich {np.mean(sampling):.3g} (sd {np.std(sampling):.3g}); noise part "
                  f"{np.mean(noise):.3g} against realised {np.mean((tau - t0) ** 2):.3g}",
                  flush=True)  # fmt: skip


def plan_rows(sizes: list[int], sets: int, reps: int) -> None:
    """``dpate plan``'s predicted width of one site's fixed-effects release over the realised
    mean width, with and without the queries: the planner stating the treated share, the
    outcome's mean and within-cell sd and the effect (the data's fixed-effects estimand), and the
    strata three ways: the default (every stratum evenly filled, the same treated share in
    each), the true propensity's logit sd stated (:data:`PROPENSITY_SD`, ``--propensity-sd``:
    the treated share then varies between strata), and with it the effective number of strata
    ``N^2 / sum N_x^2`` (``--occupied-strata``)."""
    from dpate_core.mechanisms.adjusted import AdjustedOptions
    from dpate_core.mechanisms.adjusted._public import predict
    from dpate_core.planning import Assumptions, PredictionInputs, SiteDesign

    print("| eps 1, one site | strata | release | realised width | predicted / realised: "
          "default | propensity sd stated | and occupancy (its value) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        for label, shape, truth in (("24", coarse, ESTIMAND_24), ("384", lambda d: d, 0.3)):
            rd = np.random.default_rng(n + 11)
            for name, split in (("histogram", ("9/10", "1/10")), ("with the queries", QUERIES)):
                ratios: list[list[float]] = []
                widths = []
                for _ in range(sets):
                    d = shape(bp.synth5(rd, n))
                    cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
                    plan = plan_adjusted_from_statistics(
                        cells, epsilon=1, split=split, weighting="fixed_effects"
                    )
                    out = plan.assemble(draw_many(plan, rd, reps))
                    width = bp._realised_width(np.asarray(out.variance, float))
                    widths.append(width)
                    y, w = d.y, d.w
                    g = 2 * d.x + w
                    tot = np.bincount(g, weights=y, minlength=2 * d.domain)
                    cnt = np.maximum(np.bincount(g, minlength=2 * d.domain), 1)
                    within = np.sum(np.bincount(g, weights=y * y, minlength=2 * d.domain)
                                    - tot**2 / cnt)  # fmt: skip
                    strata = np.bincount(d.x, minlength=d.domain).astype(float)
                    row = []
                    occupied = float(strata.sum() ** 2 / np.sum(strata**2))
                    for stated in (
                        {},
                        {"propensity_sd": PROPENSITY_SD},
                        {"propensity_sd": PROPENSITY_SD, "occupied_strata": occupied},
                    ):
                        assumed = Assumptions(
                            arm_share=float(w.mean()), outcome_sd=float(np.sqrt(within / n)),
                            outcome_mean=float(y.mean()), effect=truth, **stated,
                        )  # fmt: skip
                        design = SiteDesign.of("s", n, 1, 0, split, len(split))
                        inp = PredictionInputs(
                            design, d.domain, 1.0, assumed, AdjustedOptions("fixed_effects")
                        )
                        row.append(2.0 * Z * float(np.sqrt(predict(inp)[2])) / width)
                    row.append(occupied)
                    ratios.append(row)
                r = np.asarray(ratios)
                print(f"| {n:,} | {label} | {name} | {np.mean(widths):.4f} | "
                      + " | ".join(f"{r[:, j].min():.2f}-{r[:, j].max():.2f}" for j in range(3))
                      + f" ({np.mean(r[:, 3]):.0f}) |", flush=True)  # fmt: skip


def coarse(d: bp.Data) -> bp.Data:
    """The bench Synth's three categorical covariates only: 24 strata."""
    c1, c2, c3 = (d.z[:, j].astype(int) for j in range(3))
    return dataclasses.replace(d, x=(c1 * 3 + c2) * 2 + c3, domain=24)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10_000])
    ap.add_argument("--sets", type=int, default=8)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--release", action="store_true", help="the release with the queries")
    ap.add_argument("--splits", nargs="+", default=[",".join(QUERIES)],
                    help="--release: the queries' splits to compare, each a,b,c,d")  # fmt: skip
    ap.add_argument("--plan", action="store_true", help="dpate plan's predicted widths")
    ap.add_argument("--parts", action="store_true", help="the reported variance's parts, 24 strata")
    args = ap.parse_args()
    if args.parts:
        parts_rows(args.sizes, args.sets, 4 if args.reps == 100 else args.reps)
        return
    if args.plan:
        plan_rows(args.sizes, args.sets, 100)
        return
    if args.release:
        splits = tuple(tuple(split.split(",")) for split in args.splits)
        release_rows(args.sizes, args.sets, 25 if args.reps == 100 else args.reps, splits)
        return
    print("| eps 1, one site | strata | numerator, denominator query share | noise RMSE of tau "
          "| resolved |")  # fmt: skip
    print("|---|---|---|---|---|")
    for n in args.sizes:
        for label, shape in (("384", lambda d: d), ("24", coarse)):
            errors: dict[tuple[float, float], list[float]] = {v: [] for v in VARIANTS}
            solved: dict[tuple[float, float], list[float]] = {v: [] for v in VARIANTS}
            rd = np.random.default_rng(n)
            for _ in range(args.sets):
                d = shape(bp.synth5(rd, n))
                cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
                exact = plan_adjusted_from_statistics(cells, epsilon=10**9,
                                                      weighting="fixed_effects")  # fmt: skip
                t0 = float(np.asarray(exact.assemble(draw_many(exact, rd, 1)).tau)[0])
                seed = int(rd.integers(1 << 30))
                for v in VARIANTS:
                    tau = releases(d, args.reps, v, np.random.default_rng(seed))
                    ok = np.isfinite(tau)
                    errors[v] += list((tau[ok] - t0) ** 2)
                    solved[v].append(float(np.mean(ok)))
            for v in VARIANTS:
                rmse = np.sqrt(np.mean(errors[v])) if errors[v] else float("nan")
                print(f"| {n:,} | {label} | {v[0]}, {v[1]} | {rmse:.4f} | "
                      f"{np.mean(solved[v]):.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
