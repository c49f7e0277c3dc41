"""The adjusted estimator on the adjustment sets a clinician writes down: reported against actual
variance, coverage and width of every site and every combiner, in plasmode simulations
(docs/explanation/adjusted.md, "Realistic adjustment sets"). Prints tables; asserts nothing.

Designs (each site's records are its population; eps 1 per site, the default split):

- IHDP (replication 1) with the loader's strata (``x4`` in 4 bands, ``x7``, ``x13``: 16) and with
  ``x9``, ``x10``, ``x11`` added (128 strata), split at random into 2 and 3 sites;
- Lalonde with the loader's strata (age, 39) and with age bands, schooling bands, ``black``,
  ``marr``, ``nodeg`` (192 strata), split into 2 and 3 sites;
- Synth with five covariates (:func:`dpate_core.synth.synth_strata`: 384 strata, mostly sparse),
  3 sites of 3,000 records and 2 sites of 6,000; its outcome is a 30-day event (0 or 1), so it
  is also released in the binary-outcome mode (``outcome.binary``: the cells one histogram).

Each repetition resamples every site's records with replacement (its own size) and releases
once, through the plan's own ``assemble`` (the released post-processing, numpy noise: simulation
only). Target of a site: its weighting's non-private estimand on its own records; of a combiner:
the ``N``-weighted mean of the sites' targets. "reported/actual": mean released variance over
the mean squared error around the target, resolved releases only; "cover": the share of 95%
normal intervals (``tau +- 1.96 sqrt(variance)``, clipped as released) holding the target, of
resolved releases (sites) or of releases with an answer (combiners); "resolved" / "answered":
their share.

Run: ``python bench/bench_adjusted_realistic.py [REPS] [WEIGHTING ...]`` (1000 repetitions: about
a minute; weightings ``fixed_effects`` and ``subclassification`` by default);
``python bench/bench_adjusted_realistic.py plan``: ``dpate plan``'s predicted widths against the
realised ones on the same designs (:func:`plan_against_releases`); ``queries [REPS]``: the
fixed-effects queries against the histogram alone; ``auto [REPS]``: the release the default
options choose (:func:`run_auto`); ``splits REPS a,b,c,d ...``: the queries at
each split on the real designs. Real data through
``DPATE_DATA_DIR`` (skipped when absent).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpate.data.datasets import DataUnavailableError
from dpate_core.mechanisms.adjusted import (
    DEFAULT_SPLIT_QUERIES,
    plan_adjusted_from_statistics,
    plan_weighting,
)
from dpate_core.simulation import aggregate_many
from dpate_core.statistics import cell_statistics
from dpate_core.synth import split_equal, synth_strata

Z95 = 1.959963984540054
COMBINERS = ("mvagg", "inverse_variance", "all", "random_effects")


@dataclass(frozen=True)
class Design:
    """Sites ``(w, y, x)`` sharing ``|X|`` and ``B``."""

    name: str
    sites: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    domain_size: int
    bound: float = 1.0


def estimand(w: np.ndarray, y: np.ndarray, x: np.ndarray, size: int, weighting: str) -> float:
    """The weighting's non-private estimand on these records."""
    g = 2 * x.astype(np.int64) + w.astype(np.int64)
    cnt = np.bincount(g, minlength=2 * size).astype(float)
    tot = np.bincount(g, weights=y, minlength=2 * size)
    n_c, n_t = cnt[0::2], cnt[1::2]
    both = (n_t > 0) & (n_c > 0)
    d = np.where(both, tot[1::2] / np.maximum(n_t, 1) - tot[0::2] / np.maximum(n_c, 1), 0.0)
    if weighting == "fixed_effects":
        return float(np.sum(n_t * n_c * d) / np.sum(n_t * n_c))
    if weighting in ("overlap", "subclassification"):
        return float(np.sum((n_t + n_c) * d) / np.sum(np.where(both, n_t + n_c, 0.0)))
    return float(np.sum((n_t + n_c) * d) / w.size)  # Algorithm 1's


def resampled_cells(
    w: np.ndarray, y: np.ndarray, x: np.ndarray, size: int, bound: float, reps: int, rng
) -> dict[str, np.ndarray]:
    """Per repetition, the cell counts, centred sums and centred squares of a bootstrap sample
    of the records (``(reps, 2 |X|)`` each; float sums: simulation only)."""
    n = w.size
    g = 2 * x.astype(np.int64) + w.astype(np.int64)
    z = y - bound / 2.0
    cells = 2 * size
    idx = rng.integers(0, n, (reps, n))
    flat = (g[idx] + cells * np.arange(reps)[:, None]).ravel()
    zi = z[idx].ravel()
    length = reps * cells
    return {
        "counts": np.bincount(flat, minlength=length).reshape(reps, cells).astype(float),
        "sums": np.bincount(flat, weights=zi, minlength=length).reshape(reps, cells),
        "squares": np.bincount(flat, weights=zi * zi, minlength=length).reshape(reps, cells),
    }


def with_histogram(true: dict[str, np.ndarray], bound: float) -> dict[str, np.ndarray]:
    """A binary outcome's resampled cells with their ``(cell, outcome)`` histogram (events, then
    non-events), what its release queries: each centred value is ``+-B/2``."""
    counts = true["counts"]
    events = np.rint((counts + true["sums"] / (bound / 2.0)) / 2.0)
    return {**true, "histogram": np.concatenate([events, counts - events], axis=1)}


def with_end_histogram(true: dict[str, np.ndarray], bound: float) -> dict[str, np.ndarray]:
    """The resampled cells with their two-end histogram (upper ends ``sum Y/B``, then lower ends
    ``sum (1 - Y/B)``, in records' mass), what the release queries for an outcome in ``[0, B]``
    (``dpate_core.statistics.end_histogram``)."""
    counts = true["counts"]
    upper = (counts + true["sums"] / (bound / 2.0)) / 2.0
    return {**true, "histogram": np.concatenate([upper, counts - upper], axis=1)}


def is_binary(d: Design) -> bool:
    """Every outcome of the design is 0 or ``B``: a user would declare it (``outcome.binary``)."""
    return all(bool(np.all((y == 0.0) | (y == d.bound))) for _, y, _ in d.sites)


def with_stage(plan, noisy: dict, true: dict, rng) -> dict:
    """The fixed-effects release's second stage on the resampled cells (the squares' query, and
    with ``weighted_sum = true`` the numerator's and the denominator's): coefficients from the
    noisy histogram, values from each repetition's own exact cells (``query_values``,
    ``_fe_squares.query_value``), Laplace noise at the sites' scales (numpy: simulation)."""
    from dpate_core.mechanisms.adjusted import histogram_vectors, plan_constants
    from dpate_core.mechanisms.adjusted._fe_queries import NUMERATOR, query_values
    from dpate_core.mechanisms.adjusted._fe_squares import query_value

    c = plan_constants(plan)
    counts = np.asarray(histogram_vectors(c, noisy)["counts"])
    cnt = np.clip(counts, -c.n, c.n)
    out = dict(noisy)
    for stage in plan.stages:
        names = {spec.name for spec in stage.sites}
        loc = query_value(c, cnt, true["squares"])
        if NUMERATOR in names:
            loc.update(query_values(c, cnt, true["counts"], true["sums"]))
        for spec in stage.sites:
            out[spec.name] = (
                loc[spec.name] + rng.laplace(0, spec.scale, loc[spec.name].shape)
            ) * spec.unit
    return out


def run_design(
    d: Design, weighting: str, reps: int, eps: str = "1", seed: int = 7, post=None,
    binary: bool = False, queries: bool = False, split: tuple[str, ...] = DEFAULT_SPLIT_QUERIES,
) -> None:  # fmt: skip
    """One design's table; ``post(plan, noisy) -> (tau, variance)``: another post-processing of
    the same noisy vectors in place of the release's (``bench_adjusted_conditioned.py``).
    ``binary``: the release in its binary-outcome mode (the design's outcomes 0 or ``B``).
    ``queries``: with the fixed-effects queries (``weighted_sum = true``: fixed effects), at
    ``split``. Fixed effects' squares are one query in a second stage (:func:`with_stage`)."""
    rng = np.random.default_rng(seed)
    parts = split if queries else None
    j_sites = len(d.sites)
    taus = np.full((reps, j_sites), np.nan)
    var = np.full((reps, j_sites), np.nan)
    targets, sizes, modes = [], [], []
    read: list[str] = []
    for j, (w, y, x) in enumerate(d.sites):
        stats = cell_statistics(w, y, x, domain_size=d.domain_size, bound=d.bound)
        plan = plan_adjusted_from_statistics(stats, epsilon=eps, weighting=weighting,
                                             binary=binary, split=parts)  # fmt: skip
        modes.append(plan_weighting(plan))  # the weighting
        target_kind = "fixed_effects" if modes[-1] == "fixed_effects" else weighting
        targets.append(estimand(w, y, x, d.domain_size, target_kind))
        sizes.append(w.size)
        true = resampled_cells(w, y, x, d.domain_size, d.bound, reps, rng)
        true = with_histogram(true, d.bound) if binary else with_end_histogram(true, d.bound)
        noisy = {
            spec.name: true[spec.name] + spec.value_scale * rng.laplace(0, 1, true[spec.name].shape)
            for spec in plan.noise
        }
        if plan.stages:
            noisy = with_stage(plan, noisy, true, rng)
        if modes[-1] == "subclassification":
            read.append(read_shares(plan, stats, noisy, (w.size, d.domain_size), eps, binary))
        if post is None:
            out = plan.assemble(noisy)
            taus[:, j], var[:, j] = out.tau, out.variance
        else:
            taus[:, j], var[:, j] = post(plan, noisy)
    sizes_a = np.asarray(sizes, float)
    rows = []
    for j in range(j_sites):
        ok = np.isfinite(taus[:, j])
        rows.append(
            (f"site {j + 1} (N {sizes[j]})", taus[ok, j], var[ok, j], targets[j], ok.mean())
        )
    pooled_target = float(np.sum(sizes_a * np.asarray(targets)) / sizes_a.sum())
    for agg in COMBINERS:
        res = aggregate_many(agg, taus, sizes_a, var)
        ok = np.isfinite(res.estimate)
        rows.append((agg, res.estimate[ok], res.variance[ok], pooled_target, ok.mean()))
    mode = (
        " (outcome.binary)"
        if binary
        else f" (weighted_sum = true, {', '.join(split)})"
        if queries
        else ""
    )
    print(f"\n{d.name}{mode}, |X| = {d.domain_size}, weighting {weighting} ({', '.join(modes)}), "
          f"{reps} repetitions")  # fmt: skip
    print(f"  {'unit':22s} {'target':>8s} {'resolved':>8s} {'bias':>8s} {'actual sd':>9s} "
          f"{'rep/act':>7s} {'cover':>6s} {'width':>7s}")  # fmt: skip
    for unit, t, v, target, share in rows:
        if t.size < 2:
            print(f"  {unit:22s} {target:8.4f} {share:8.2f}   (too few resolved)")
            continue
        mse = float(np.mean((t - target) ** 2))
        half = Z95 * np.sqrt(v)
        lo, hi = np.clip(t - half, -d.bound, d.bound), np.clip(t + half, -d.bound, d.bound)
        cover = float(np.mean((lo <= target) & (target <= hi)))
        print(f"  {unit:22s} {target:8.4f} {share:8.2f} {np.mean(t) - target:+8.4f} "
              f"{np.sqrt(mse):9.4f} {np.mean(v) / mse:7.2f} {cover:6.3f} "
              f"{np.median(hi - lo):7.4f}")  # fmt: skip
    if read:
        print("  share of the estimand's records in the strata read (realised; predicted at the "
              "records' counts, at even fill): " + "; ".join(read))  # fmt: skip


def read_shares(plan, stats, noisy, shape: tuple[int, int], eps: str, binary: bool) -> str:
    """Subclassification's realised share of the estimand's records (strata holding both arms)
    in the strata it read (its own rule on each draw's noisy counts), against ``dpate plan``'s
    :func:`~dpate_core.mechanisms.adjusted.read_share` at the records' own counts and at the
    plan's default even fill."""
    from dpate_core.mechanisms.adjusted import (
        AdjustedOptions,
        histogram_vectors,
        plan_constants,
        read_share,
        used_strata,
    )
    from dpate_core.planning import Assumptions, PredictionInputs, SiteDesign

    n, size = shape
    c = plan_constants(plan)
    counts = np.asarray(stats.counts, dtype=float)
    cc, tc = counts[0::2], counts[1::2]
    mass = np.where((tc > 0) & (cc > 0), tc + cc, 0.0)
    used = used_strata(c, np.clip(histogram_vectors(c, noisy)["counts"], 0.0, c.n))
    realised = float(np.mean(used @ mass) / mass.sum())
    design = SiteDesign.of("site", n, eps, 0, plan.shares.shares, len(plan.shares.shares))
    options = AdjustedOptions(weighting="subclassification")
    at = [
        read_share(
            PredictionInputs(
                design, size, c.bound, Assumptions(), options, strata_counts=sc, binary=binary
            )
        )
        for sc in ((tc, cc), None)
    ]
    return f"{realised:.2f} ({at[0]:.2f}, {at[1]:.2f})"


def _split(name: str, w, y, x, size: int, j_sites: int, seed: int) -> Design:
    parts = split_equal(w.size, j_sites, seed)
    return Design(f"{name}, {j_sites} sites", tuple((w[i], y[i], x[i]) for i in parts), size)


def designs() -> list[Design]:
    out: list[Design] = []
    try:
        from bench_regression_adjustment import ihdp_data, lalonde_data, strata_ids

        from dpate.data.datasets import load_ihdp, load_lalonde

        ih = load_ihdp(1)
        la = load_lalonde()
        rich_i, _ = ihdp_data()
        rich_l = lalonde_data()
        xi, ki = strata_ids(rich_i.covs)
        xl, kl = strata_ids(rich_l.covs)
        for j_sites in (2, 3):
            out.append(_split("IHDP", ih.w, ih.y, ih.x, ih.domain_size, j_sites, 11))
            out.append(_split("IHDP rich", ih.w, ih.y, xi, ki, j_sites, 11))
            out.append(_split("Lalonde", la.w, la.y, la.x, la.domain_size, j_sites, 11))
            out.append(_split("Lalonde rich", la.w, la.y, xl, kl, j_sites, 11))
    except DataUnavailableError as err:
        print(f"(real data skipped: {err})")
    for j_sites, n in ((3, 3000), (2, 6000)):
        sites = []
        for j in range(j_sites):
            s = synth_strata(n, seed=100 + j)
            sites.append((s.w, s.y, s.x))
        out.append(Design(f"Synth strata, {j_sites} x {n}", tuple(sites), 384))
    return out


def main(reps: int = 1000, weightings: Sequence[str] = ("fixed_effects", "subclassification")):
    """Every design under each weighting; a design whose outcomes are 0 or ``B`` (the Synth's
    30-day event) also in the binary-outcome mode, as a user declaring it would release."""
    for d in designs():
        for weighting in weightings:
            run_design(d, weighting, reps)
            if is_binary(d):
                run_design(d, weighting, reps, binary=True)


def default_choice(d: Design, eps: str = "1"):
    """The study's one choice for a spec with the default options whose every site declares its
    ``n`` (its record count here) and no split: ``adjusted_weighting`` and ``weighted_sum`` both
    ``"auto"``."""
    from fractions import Fraction

    from dpate_core.mechanisms._estimator import StudySite
    from dpate_core.mechanisms.adjusted import ADJUSTED, AdjustedOptions

    split = ADJUSTED.default_split(AdjustedOptions()).shares
    sites = [StudySite(w.size, Fraction(eps), split) for w, _, _ in d.sites]
    return ADJUSTED.study_choice(AdjustedOptions(), d.domain_size, sites)


def run_auto(d: Design, reps: int, eps: str = "1") -> None:
    """The release the defaults give (:func:`default_choice`): the choice's reason, then that
    release's table."""
    choice = default_choice(d, eps)
    print(f"\n{d.name}: the study's choice: {choice.reason}")
    run_design(d, choice.variant or "auto", reps, eps, queries=choice.options.weighted_sum)


def occupancy(w: np.ndarray, y: np.ndarray, x: np.ndarray, size: int) -> dict[str, float]:
    """What a user would give ``dpate plan`` about these records: the treated share, the
    outcome's mean and its sd within an arm and stratum (pooled), the effective number of occupied strata
    ``N^2 / sum_x N_x^2`` and the effect (fixed effects, non-private)."""
    g = 2 * x.astype(np.int64) + w.astype(np.int64)
    cnt = np.bincount(g, minlength=2 * size).astype(float)
    tot = np.bincount(g, weights=y, minlength=2 * size)
    sq = np.bincount(g, weights=y * y, minlength=2 * size)
    within = np.sum(sq - tot**2 / np.maximum(cnt, 1.0)) / max(w.size - np.sum(cnt > 0), 1)
    strata = cnt[0::2] + cnt[1::2]
    return {
        "arm_share": float(w.mean()),
        "outcome_mean": float(y.mean()),
        "outcome_sd": float(np.sqrt(max(within, 0.0))),
        "occupied_strata": float(w.size**2 / np.sum(strata**2)),
        "effect": estimand(w, y, x, size, "fixed_effects"),
    }


def _published_width(v: np.ndarray, bound: float) -> np.ndarray:
    """Each release's normal interval width as published: clipped to ``[-B, B]`` (at most
    ``2B``), an unresolved release or no answer counted as ``2B``."""
    half = Z95 * np.sqrt(np.where(np.isfinite(v), v, np.inf))
    return 2.0 * np.minimum(half, bound)


def plan_against_releases(
    d: Design, eps: str = "1", reps: int = 2000, seed: int = 3, binary: bool = False,
    queries: bool = False, spread: float | None = None,
) -> None:  # fmt: skip
    """Predicted (``dpate plan``'s predictors, the assumptions from :func:`occupancy` pooled over
    the sites) against realised mean widths of the sites' and combiners' normal intervals (fixed
    data, ``reps`` releases; each interval clipped to ``[-B, B]`` as published, an unresolved
    release, or no answer, counted as ``2B``). ``binary``: the binary-outcome mode. ``queries``:
    the fixed-effects queries (``weighted_sum = true``); ``spread``: the propensity logit's sd
    the planner states (``--propensity-sd``)."""

    from fractions import Fraction

    from dpate_core.mechanisms.adjusted import AdjustedOptions
    from dpate_core.planning import Assumptions, SiteDesign, plan_study

    rng = np.random.default_rng(seed)
    w_all = np.concatenate([s[0] for s in d.sites])
    y_all = np.concatenate([s[1] for s in d.sites])
    x_all = np.concatenate([s[2] for s in d.sites])
    occ = occupancy(w_all, y_all, x_all, d.domain_size)
    taus, variances, designs = [], [], []
    for j, (w, y, x) in enumerate(d.sites):
        stats = cell_statistics(w, y, x, domain_size=d.domain_size, bound=d.bound)
        plan = plan_adjusted_from_statistics(
            stats, epsilon=eps, binary=binary, split=DEFAULT_SPLIT_QUERIES if queries else None
        )
        true = {s.name: s.value for s in plan.noise}
        noisy = {
            s.name: true[s.name] + s.value_scale * rng.laplace(0, 1, (reps, np.size(s.value)))
            for s in plan.noise
        }
        if plan.stages:
            exact = {"counts": stats.counts.astype(float), "sums": stats.sums * stats.sum_unit,
                     "squares": stats.squares * stats.square_unit}  # fmt: skip
            noisy = with_stage(plan, noisy, exact, rng)
        out = plan.assemble(noisy)
        taus.append(out.tau)
        variances.append(out.variance)
        designs.append(SiteDesign(f"site {j + 1}", w.size, Fraction(eps), Fraction(0),
                                  plan.shares.shares))  # fmt: skip
    tau, var = np.stack(taus, 1), np.stack(variances, 1)
    sizes = np.array([dd.n for dd in designs], float)
    mode = " (outcome.binary)" if binary else " (weighted_sum = true)" if queries else ""
    assumed = Assumptions(**occ, propensity_sd=spread)
    options = AdjustedOptions("fixed_effects", weighted_sum=True) if queries else None
    print(f"\n{d.name}{mode}, |X| = {d.domain_size}, eps {eps}: assumed propensity sd "
          f"{spread}, " + ", ".join(
        f"{k} {v:.3g}" for k, v in occ.items()))  # fmt: skip
    for agg in ("mvagg", "inverse_variance"):
        plan = plan_study("adjusted", agg, designs, domain_size=d.domain_size, bound=d.bound,
                          assumptions=assumed, recommend=False, binary=binary,
                          options=options)  # fmt: skip
        res = aggregate_many(agg, tau, sizes, var)
        comb = _published_width(res.variance, d.bound)
        if agg == "mvagg":
            for j, p in enumerate(plan.sites):
                real = np.mean(_published_width(var[:, j], d.bound))
                print(f"  {p.site_id:10s} {p.weighting:18s} predicted {p.width:.4f} realised "
                      f"{real:.4f} ratio {p.width / real:.2f}")  # fmt: skip
        print(f"  {agg:29s} predicted {plan.combined_width:.4f} realised {np.mean(comb):.4f} "
              f"ratio {plan.combined_width / np.mean(comb):.2f} (uses {', '.join(plan.used)})")  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["plan"]:
        for design in designs():
            plan_against_releases(design)
            if is_binary(design):
                plan_against_releases(design, binary=True)
    elif args[:1] == ["queries"]:  # the fixed-effects queries against the histogram alone
        spread = float(args[2]) if len(args) > 2 else None
        for design in designs():
            if not is_binary(design):
                run_design(design, "fixed_effects", int(args[1]) if len(args) > 1 else 1000)
                run_design(design, "fixed_effects", int(args[1]) if len(args) > 1 else 1000,
                           queries=True)  # fmt: skip
                plan_against_releases(design, spread=spread)
                plan_against_releases(design, queries=True, spread=spread)
    elif args[:1] == ["auto"]:  # the defaults a spec declaring each site's n gets
        for design in designs():
            if not is_binary(design):
                run_auto(design, int(args[1]) if len(args) > 1 else 1000)
    elif args[:1] == ["splits"]:  # the queries at each split: splits REPS a,b,c,d ...
        for design in designs():
            if not is_binary(design) and not design.name.startswith("Synth"):
                for split in args[2:]:
                    run_design(design, "fixed_effects", int(args[1]), queries=True,
                               split=tuple(split.split(",")))  # fmt: skip
    else:
        main(int(args[0]) if args else 1000, args[1:] or ("fixed_effects", "subclassification"))
