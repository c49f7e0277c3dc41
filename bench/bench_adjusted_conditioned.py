"""Fixed effects' interval conditioned on the release resolving, against the delta method's
(docs/explanation/adjusted.md, "The denominator's noise": measured, not in the release). Prints
tables; asserts nothing.

A fixed-effects release resolves when its noisy ``D_hat`` exceeds ``c = RESOLVE_Z sd(D)``; where
the true ``D`` is about one sd, the releases that resolve are those whose noise pushed ``D_hat``
up, and the delta method's intervals under-cover them. The conditioned set (the polyhedral lemma,
Lee, Sun, Sun and Taylor 2016): for a candidate ``t``, ``U(t) = A_hat - t D_hat`` has mean 0 at
``t = tau`` and variance ``V(t)`` (noise and sampling, both quadratic in ``t``: the release's
delta-method numerators, :func:`ratio_quadratics`); ``D_hat = Z + b U(t)`` with ``b =
Cov(U(t), D_hat) / V(t)`` (the noise's covariance: the rule selects on the noise) and ``Z``
independent of ``U(t)``, so given ``Z`` the event ``D_hat > c`` truncates ``U(t)`` at a known
point; its tail probability at the observed ``U(t)`` is uniform whatever ``D`` is, and the ``t``
it keeps at 5% cover ``tau`` in 95% of the resolved releases. Read on a grid over ``[-B, B]``
(ends refined by bisection), published here as its midpoint with the variance of its half-length.

Tables: (1) one Synth data set of 3,333 records in 100 strata (the coverage study's sites) over
site epsilons, and the 1,000-record design of ``test_fixed_effects_barely_resolved_releases_cover``
at eps 1/4: per epsilon the resolved share, coverage and mean width of the delta method's
intervals and of the conditioned sets, and the share of conditioned sets narrower than the range
with their coverage; (2) the realistic designs of ``bench_adjusted_realistic.py`` (IHDP, Lalonde,
Synth with 384 strata) with the conditioned sets in place of the release's variance.

Run: ``python bench/bench_adjusted_conditioned.py [RELEASES] [Z]`` (4,000 releases per epsilon
and 307 repetitions of each realistic design: a few seconds; ``Z`` the resolution threshold
in sds, ``RESOLVE_Z`` by default). Simulation noise (numpy); scipy for the normal tails.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from bench_adjusted_realistic import designs, run_design
from scipy.special import log_ndtr

from dpate_core.mechanisms.adjusted import (
    RESOLVE_Z,
    histogram_vectors,
    plan_adjusted_from_statistics,
    plan_constants,
)
from dpate_core.mechanisms.adjusted._fe_squares import reading
from dpate_core.mechanisms.adjusted._weightings import _fixed_effects_sampling
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics
from dpate_core.synth import synth

Z95 = 1.959963984540054
GRID, BISECTIONS = 129, 20


def ratio_quadratics(c, v) -> dict:
    """``A_hat``, ``D_hat``, ``Var(D_hat)`` and the coefficients ``(a0, a1, a2)`` of the noise
    and sampling numerators of ``Var(A_hat - t D_hat)`` (the release's delta method before its
    division by ``D_hat^2``; the noise unfloored, its floor ``f0 + f2 t^2`` kept apart)."""
    v = histogram_vectors(c, v)  # the cells' counts and sums from their histogram
    cnt = np.clip(np.asarray(v["counts"], dtype=np.float64), -float(c.n), float(c.n))
    s = np.clip(np.asarray(v["sums"], dtype=np.float64), -c.n * c.half_b, c.n * c.half_b)
    part = reading(c, cnt, s, v)  # the squares' query, or their vector
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    s_c, s_t = s[..., 0::2], s[..., 1::2]
    v_n, v_s = c.v_n, c.v_s
    big_d = np.sum(n_t * n_c, axis=-1)
    floor_d = c.n_strata * v_n**2
    var_d = np.maximum(np.sum(v_n * (n_t**2 + n_c**2), axis=-1) - floor_d, floor_d)
    noise = (
        np.sum(v_n * (s_t**2 + s_c**2 - 2 * v_s) + v_s * (n_t**2 + n_c**2 - 2 * v_n), axis=-1)
        + c.n_strata * 2 * v_s * v_n,
        np.sum(2 * v_n * (s_c * n_c - s_t * n_t), axis=-1),
        np.sum(v_n * (n_t**2 + n_c**2), axis=-1) - c.n_strata * v_n**2,
    )
    # the release's sampling numerator at d = 1: the influence sum less the arms' variances
    # times the histogram's D_hat (._fe_squares)
    ones = np.ones_like(big_d)
    at = [_fixed_effects_sampling(c, cnt, s, part, t * ones, ones)[0] for t in (-1.0, 0.0, 1.0)]
    sampling = (at[1], (at[2] - at[0]) / 2, (at[2] + at[0]) / 2 - at[1])
    return {
        "a": np.sum(s_t * n_c - s_c * n_t, axis=-1),
        "d": big_d,
        "var_d": var_d,
        "noise": noise,
        "floor": (c.n_strata * 2 * v_s * v_n, c.n_strata * v_n**2),
        "sampling": sampling,
    }


def _keeps(t, r, z_res):
    """Whether the conditioned pivot keeps ``t`` (``r``: one release's quadratics, each
    ``(releases, 1)``)."""
    (n0, n1, n2), (f0, f2), (s0, s1, s2) = r["noise"], r["floor"], r["sampling"]
    v = np.maximum(n0 + (n1 + n2 * t) * t, f0 + f2 * t * t) + np.maximum(s0 + (s1 + s2 * t) * t, 0)
    sv = np.sqrt(v)
    u = (r["a"] - t * r["d"]) / sv
    cov = -0.5 * n1 - t * r["var_d"]
    x = np.where(cov >= 0, u, -u)
    gap = r["d"] - z_res * np.sqrt(r["var_d"])
    with np.errstate(divide="ignore"):
        k = np.where(cov != 0, gap * sv / np.abs(cov), np.inf)
    log_p = log_ndtr(-x) - log_ndtr(-(x - k))
    return (log_p >= math.log(0.025)) & (log_p <= math.log1p(-0.025))


def conditioned_set(r: dict, bound: float, z_res: float) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` per release (NaN where ``D_hat`` does not pass the threshold); the whole
    range where the grid keeps nothing."""
    n = r["a"].size
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    todo = np.flatnonzero(r["d"] > z_res * np.sqrt(r["var_d"]))
    grid = np.linspace(-bound, bound, GRID)
    step = grid[1] - grid[0]

    def take(idx):
        out = {k: np.asarray(r[k])[idx][:, None] for k in ("a", "d", "var_d")}
        out["noise"] = tuple(a[idx][:, None] for a in r["noise"])
        out["sampling"] = tuple(a[idx][:, None] for a in r["sampling"])
        out["floor"] = r["floor"]
        return out

    def edge(out, inside, rr):
        for _ in range(BISECTIONS):
            mid = 0.5 * (out + inside)
            keep = _keeps(mid[:, None], rr, z_res)[:, 0]
            inside, out = np.where(keep, mid, inside), np.where(keep, out, mid)
        return inside

    for start in range(0, todo.size, 4096):
        idx = todo[start : start + 4096]
        rr = take(idx)
        kept = _keeps(grid[None, :], rr, z_res)
        some = kept.any(axis=1)
        first, last = np.argmax(kept, axis=1), GRID - 1 - np.argmax(kept[:, ::-1], axis=1)
        lo_i = np.where(some, grid[first], -bound)
        hi_i = np.where(some, grid[last], bound)
        lo_i = np.where(some & (first > 0), edge(lo_i - step, lo_i, rr), lo_i)
        hi_i = np.where(some & (last < GRID - 1), edge(hi_i + step, hi_i, rr), hi_i)
        lo[idx], hi[idx] = lo_i, hi_i
    return lo, hi


def conditioned(z_res: float):
    """A post-processing for ``run_design``: the conditioned set's midpoint and the variance of
    its half-length (NaN where unresolved)."""

    def post(plan, noisy):
        c = plan_constants(plan)
        lo, hi = conditioned_set(ratio_quadratics(c, noisy), c.bound, z_res)
        return 0.5 * (lo + hi), (0.5 * (hi - lo) / Z95) ** 2

    return post


def fe_estimand(w, y, x, k) -> float:
    g = 2 * x + w
    cnt = np.bincount(g, minlength=2 * k).astype(float)
    tot = np.bincount(g, weights=y, minlength=2 * k)
    n_c, n_t = cnt[0::2], cnt[1::2]
    both = (n_t > 0) & (n_c > 0)
    d = np.where(both, tot[1::2] / np.maximum(n_t, 1) - tot[0::2] / np.maximum(n_c, 1), 0.0)
    return float(np.sum(n_t * n_c * d) / np.sum(n_t * n_c))


def synth_row(label, w, y, x, k, eps, reps, z_res, bound=1.0) -> None:
    stats = cell_statistics(w, y, x, domain_size=k, bound=bound)
    plan = plan_adjusted_from_statistics(stats, epsilon=eps, weighting="fixed_effects")
    truth = fe_estimand(w, y, x, k)
    noisy = draw_many(plan, np.random.default_rng(4), reps)
    out = plan.assemble(noisy)
    r = ratio_quadratics(plan_constants(plan), noisy)
    ok = r["d"] > z_res * np.sqrt(r["var_d"])
    lo, hi = conditioned_set(r, bound, z_res)
    lo, hi = lo[ok], hi[ok]
    half = np.minimum(Z95 * np.sqrt(out.variance), bound)
    d_lo, d_hi = np.maximum(out.tau - half, -bound), np.minimum(out.tau + half, bound)
    delta = ""
    if z_res == RESOLVE_Z:  # the release's own intervals (its threshold)
        ok_d = np.isfinite(out.tau)
        cov_d = np.mean((d_lo[ok_d] <= truth) & (truth <= d_hi[ok_d]))
        delta = f"{cov_d:6.3f} {np.mean((d_hi - d_lo)[ok_d]):6.3f}"
    covered = (lo <= truth) & (truth <= hi)
    narrow = hi - lo < 2 * bound * 0.999
    narrow_cov = f"{np.mean(covered[narrow]):6.3f}" if narrow.any() else "     -"
    print(f"  {label:24s} {ok.mean():8.3f} {delta:>13s} {np.mean(covered):6.3f} "
          f"{np.mean(hi - lo):6.3f} {np.mean(lo + hi) / 2 - truth:+7.3f} {narrow.mean():6.2f} "
          f"{narrow_cov}")  # fmt: skip


def main(reps: int = 4000, z_res: float = RESOLVE_Z) -> None:
    print(f"Synth, fixed effects, threshold {z_res:g} sds, {reps} releases per row")
    print(f"  {'design, eps':24s} {'resolved':>8s} {'delta: cov, width':>13s} {'cov':>6s} "
          f"{'width':>6s} {'bias':>7s} {'narrow':>6s} {'cov':>6s}")  # fmt: skip
    d = synth(1000, 100, a=0.0, b=0.2, seed=7)
    synth_row("1,000 / 100, eps 1/4", d.w.astype(np.int64), d.y, d.x, 100, "1/4", reps, z_res)
    d = synth(3333, 100, seed=11)
    for eps in ("1/16", "1/8", "0.18", "0.35", "1/2", "1"):
        synth_row(f"3,333 / 100, eps {eps}", d.w.astype(np.int64), d.y, d.x, 100, eps, reps, z_res)
    for design in designs():
        run_design(design, "fixed_effects", max(reps // 13, 100), post=conditioned(z_res))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 4000, float(args[1]) if len(args) > 1 else RESOLVE_Z)
