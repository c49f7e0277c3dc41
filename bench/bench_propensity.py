"""The DP propensity estimator (``"propensity"``) against ``adjusted``, the non-private
propensity-stratified and AIPW estimates and the PyPI package ``dpate`` 0.0.1: bias, RMSE, coverage
and width of the inverse-variance combination over 2 and 3 sites at eps = 1 per site; and its
release time at N = 10^7 with 20 covariates against one ``np.bincount`` pass.
Simulation only (numpy noise); prints tables, asserts nothing. Results: docs/explanation/results.md
("Propensity bands") and docs/reference/benchmarks.md.

Data: Synth with 5 covariates (3 categorical, 2 numeric; 384 strata once the numeric ones are
binned for ``adjusted``), a fresh data set per repetition (the truth is the common effect 0.3);
IHDP replication 1 (25 covariates: x1..x6 numeric with public bounds [-4, 4], the rest binary;
the truth the sample's mean of ``mu1 - mu0``) and Lalonde ``nswdemo`` (8 covariates: age, years of
schooling, 1974 and 1975 earnings numeric with public bounds, four binary; a randomized
experiment, the reference is the whole experiment's difference in means), fixed data, split at
random into equal sites, fresh noise per repetition. ``adjusted`` runs on the product strata of
the binned covariates (bench_regression_adjustment's IHDP and Lalonde strata: 128 and 192).

The peer: set ``DPATE_PEER_PYTHON`` to a Python with ``dpate==0.0.1`` and ``scikit-learn<1.8``
installed (a separate environment, never a dependency: docs/explanation/results.md says how); its
``dp_prop_blocking`` and ``dp_ipw_sequential`` publish no variance, so only bias and RMSE (the
sites pooled by size).

Run: ``python bench/bench_propensity.py`` (a few minutes; ``--quick`` for fewer repetitions,
``--timing`` for the release time only, ``--plan`` for ``dpate plan``'s predicted widths against
the realised ones, ``--variance`` for the reported variance's terms against the realised error,
``--width`` for the width over the non-private propensity-stratified interval's, with coverage,
across sizes, ``K``, model shares and a Gaussian model stage as a what-if, ``--auto`` for the same
under the shipped ``"auto"`` choice of ``K`` and model share (``--eps E`` at ``E`` per site,
``--sizes``, ``--others``, ``--sites`` and ``--counts`` for the cells, ``--real`` for IHDP and
Lalonde as well, ``--every`` for every combiner's coverage under the rule, ``--strong`` with
four times the confounding, ``--binary`` with a binary outcome, ``--binary-mode`` with it and
the releases in their binary-outcome mode),
``--coverage`` for variance variants' coverage per site and per combiner, with ``--bootstrap``
the parametric bootstrap of the model draw's part instead, about half an hour; ``--gap`` for
the error against the released ``tau_crude - tau``; ``--captured`` for the model draw's error
against the confounding, on Synth and on Synth with its confounding aligned).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpate.data.datasets import DataUnavailableError, data_dir, load_ihdp, load_lalonde
from dpate_core.mechanisms import StudySite, estimator_of
from dpate_core.mechanisms.adjusted import (
    assemble_subclassification,
    histogram_vectors,
    plan_adjusted_from_statistics,
    plan_constants,
)
from dpate_core.mechanisms.propensity import (
    BANDS,
    Categorical,
    Column,
    Covariates,
    Numeric,
    model_share_split,
    plan_parts,
    plan_propensity,
)
from dpate_core.mechanisms.propensity import _release as propensity_release
from dpate_core.release import MechanismPlan, draw_many
from dpate_core.simulation import aggregate_many
from dpate_core.statistics import cell_statistics

Array = npt.NDArray[np.float64]
Z95 = 1.959963984540054
EPS = 1


@dataclass(frozen=True)
class Data:
    w: np.ndarray
    y: Array
    z: np.ndarray  # (N, p): level codes or values
    columns: tuple[Column, ...]
    x: np.ndarray  # product strata of the binned covariates (adjusted)
    domain: int

    def take(self, idx: np.ndarray) -> Data:
        return Data(self.w[idx], self.y[idx], self.z[idx], self.columns, self.x[idx], self.domain)


# ------------------------------------------------------------------------------------------
# Data


#: Synth's outcome model, ``base = intercept + sum_j g_j x_j`` over ``(c1, c2, c3, u1, u2)``
_OUTCOME = {
    "mild": (0.15, (0.05, 0.04, 0.05, 0.15, 0.1)),  # c2 and u2 against the propensity: cancelling
    "aligned": (0.35, (0.05, -0.04, 0.05, 0.15, -0.1)),  # every effect of the propensity's sign
    "strong": (0.3, (0.05, -0.04, 0.05, 0.15, -0.1)),  # aligned, the propensity twice as steep
    "extreme": (0.3, (0.05, -0.04, 0.05, 0.15, -0.1)),  # aligned, three times as steep
}


def synth5(
    rng: np.random.Generator, n: int, effect: float = 0.3, confounding: str = "mild",
    binary: bool = False,
) -> Data:  # fmt: skip
    """Synth with 5 covariates (module docstring). ``confounding``: ``"mild"`` (the crude difference exceeds
    the effect by about 0.025, the covariates' contributions partly cancelling), ``"aligned"`` (the
    same magnitudes, every outcome effect of its propensity effect's sign: the contributions add up),
    ``"strong"`` (aligned with the propensity's coefficients doubled: about 0.09) or ``"extreme"``
    (tripled: about 0.11). The outcome is ``base + effect w`` plus normal noise of sd 0.1, clipped to
    ``[0, 1]`` (its sd within an arm about 0.14 of its range), or with ``binary`` 1 with that
    probability (every probability lies in ``[0, 1]`` unclipped: a risk difference of ``effect``; sd
    within an arm about 0.45 of the range)."""
    c1, c2, c3 = rng.integers(0, 4, n), rng.integers(0, 3, n), rng.integers(0, 2, n)
    u1, u2 = rng.uniform(0, 1, n), rng.beta(2, 2, n)
    scale = {"strong": 2.0, "extreme": 3.0}.get(confounding, 1.0)
    lin = scale * (-0.8 + 0.4 * c1 - 0.5 * c2 + 0.6 * c3 + 1.2 * u1 - 0.8 * u2)
    w = (rng.uniform(size=n) < 1 / (1 + np.exp(-lin))).astype(np.int8)
    b0, (g1, g2, g3, g4, g5) = _OUTCOME[confounding]
    base = b0 + g1 * c1 + g2 * c2 + g3 * c3 + g4 * u1 + g5 * u2
    if binary:
        y = (rng.uniform(size=n) < base + effect * w).astype(np.float64)
    else:
        y = np.clip(base + effect * w + rng.normal(0, 0.1, n), 0, 1)
    b1, b2 = np.minimum((u1 * 4).astype(int), 3), np.minimum((u2 * 4).astype(int), 3)
    x = (((c1 * 3 + c2) * 2 + c3) * 4 + b1) * 4 + b2
    cols = (Categorical(4), Categorical(3), Categorical(2), Numeric(0, 1), Numeric(0, 1))
    return Data(w, y, np.column_stack([c1, c2, c3, u1, u2]), cols, x, 384)


def synth5_aligned(
    rng: np.random.Generator, n: int, effect: float = 0.3, binary: bool = False
) -> Data:
    """:func:`synth5` with ``confounding="aligned"``."""
    return synth5(rng, n, effect, "aligned", binary)


def synth5_strong(
    rng: np.random.Generator, n: int, effect: float = 0.3, binary: bool = False
) -> Data:
    """:func:`synth5` with ``confounding="strong"``."""
    return synth5(rng, n, effect, "strong", binary)


def synth5_extreme(
    rng: np.random.Generator, n: int, effect: float = 0.3, binary: bool = False
) -> Data:
    """:func:`synth5` with ``confounding="extreme"``."""
    return synth5(rng, n, effect, "extreme", binary)


def ihdp() -> tuple[Data, float]:
    from bench_regression_adjustment import ihdp_data

    d = load_ihdp(1)
    raw = pd.read_csv(data_dir() / "ihdp" / "ihdp_npci_1.csv", header=None)
    binned, _ = ihdp_data()
    x = np.zeros(d.w.size, np.int64)
    size = 1
    for c in binned.covs:
        x, size = x * c.levels + c.values, size * c.levels
    zs, cols = [], []
    for k in range(1, 26):
        v = raw[4 + k].to_numpy()
        if k <= 6:
            zs.append(v.astype(np.float64))
            cols.append(Numeric(-4.0, 4.0))
        else:
            zs.append((v - v.min()).astype(np.int64))
            cols.append(Categorical(2))
    truth = float((raw[4] - raw[3]).mean() / 20.0)
    return Data(d.w, d.y, np.column_stack(zs), tuple(cols), x, size), truth


def lalonde() -> tuple[Data, float]:
    from bench_regression_adjustment import lalonde_data

    d = load_lalonde()
    raw = pd.read_csv(data_dir() / "lalonde" / "nswdemo.csv")
    binned = lalonde_data()
    x = np.zeros(d.w.size, np.int64)
    size = 1
    for c in binned.covs:
        x, size = x * c.levels + c.values, size * c.levels
    names = ("age", "educ", "re74", "re75", "black", "hisp", "marr", "nodeg")
    bounds = {"age": (17.0, 55.0), "educ": (0.0, 18.0), "re74": (0.0, 40000.0),
              "re75": (0.0, 40000.0)}  # fmt: skip
    zs = [raw[c].fillna(0.0).to_numpy().astype(np.float64) for c in names]  # re74: 277 missing
    cols = tuple(Numeric(*bounds[c]) if c in bounds else Categorical(2) for c in names)
    truth = float(d.y[d.w == 1].mean() - d.y[d.w == 0].mean())
    return Data(d.w, d.y, np.column_stack(zs), cols, x, size), truth


# ------------------------------------------------------------------------------------------
# Non-private propensity stratification and AIPW


def real_data() -> Iterator[tuple[str, Data, float]]:
    """IHDP and Lalonde with their truths, each skipped (and said) when not fetched."""
    for name, load in (("IHDP", ihdp), ("Lalonde", lalonde)):
        try:
            data, truth = load()
        except DataUnavailableError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        yield name, data, truth


def design_matrix(d: Data) -> Array:
    out = [np.ones(d.w.size)]
    for j, col in enumerate(d.columns):
        if isinstance(col, Categorical):
            codes = d.z[:, j].astype(np.int64)
            out += [(codes == level).astype(np.float64) for level in range(1, col.levels)]
        else:
            mid, half = (col.lo + col.hi) / 2, (col.hi - col.lo) / 2
            out.append(np.clip((d.z[:, j] - mid) / half, -1, 1))
    return np.column_stack(out)


def logistic(xm: Array, w: np.ndarray, ridge: float = 1e-3) -> Array:
    beta = np.zeros(xm.shape[1])
    for _ in range(30):
        p = 1 / (1 + np.exp(-(xm @ beta)))
        grad = xm.T @ (w - p) - ridge * beta
        hess = (xm * (p * (1 - p))[:, None]).T @ xm + ridge * np.eye(xm.shape[1])
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.max(np.abs(step)) < 1e-8:
            break
    return np.asarray(1 / (1 + np.exp(-(xm @ beta))))


def np_stratified(d: Data, bands: int = 5) -> tuple[float, float]:
    e = logistic(design_matrix(d), d.w)
    band = np.searchsorted(np.quantile(e, np.arange(1, bands) / bands), e)
    tau, var, used = 0.0, 0.0, 0
    for b in range(bands):
        t, c = (band == b) & (d.w == 1), (band == b) & (d.w == 0)
        if t.sum() >= 2 and c.sum() >= 2:
            nb = t.sum() + c.sum()
            used += nb
            tau += nb * (d.y[t].mean() - d.y[c].mean())
            var += nb**2 * (d.y[t].var(ddof=1) / t.sum() + d.y[c].var(ddof=1) / c.sum())
    return tau / used, var / used**2


def np_aipw(d: Data) -> tuple[float, float]:
    xm = design_matrix(d)
    e = np.clip(logistic(xm, d.w), 0.01, 0.99)
    mu = []
    for a in (0, 1):
        s = d.w == a
        beta, *_ = np.linalg.lstsq(xm[s], d.y[s], rcond=None)
        mu.append(xm @ beta)
    psi = mu[1] - mu[0] + d.w * (d.y - mu[1]) / e - (1 - d.w) * (d.y - mu[0]) / (1 - e)
    return float(psi.mean()), float(psi.var(ddof=1) / psi.size)


# ------------------------------------------------------------------------------------------
# DP releases, many draws


def ours(d: Data, rng: np.random.Generator, reps: int) -> tuple[Array, Array, Array]:
    """``reps`` releases: estimates, variances and the shared sds the combiners read."""
    plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=EPS)
    out = plan.assemble(draw_many(plan, rng, reps))
    return np.asarray(out.tau), np.asarray(out.variance), _shared(out.diagnostics)


def _shared(diagnostics: Any) -> Array:
    """A release's published shared sd per draw (0 where none; the combiners' input)."""
    return np.nan_to_num(np.asarray(diagnostics["shared_sd"], dtype=np.float64))


def adjusted(d: Data, rng: np.random.Generator, reps: int) -> tuple[Array, Array, Array]:
    cells = cell_statistics(d.w, d.y, d.x, domain_size=d.domain, bound=1.0)
    plan = plan_adjusted_from_statistics(cells, epsilon=EPS)
    out = plan.assemble(draw_many(plan, rng, reps))
    return np.asarray(out.tau), np.asarray(out.variance), np.zeros(reps)


@dataclass
class Tally:
    errors: list[float]
    covered: list[bool]
    widths: list[float]
    answered: int = 0
    total: int = 0

    def add(self, est: Array, var: Array, truth: float) -> None:
        ok = np.isfinite(est) & np.isfinite(var)
        self.total += est.size
        self.answered += int(ok.sum())
        sd = np.sqrt(var[ok])
        self.errors += list(est[ok] - truth)
        self.covered += list(np.abs(est[ok] - truth) <= Z95 * sd)
        self.widths += list(2 * Z95 * sd)

    def row(self, name: str) -> str:
        e = np.asarray(self.errors)
        if e.size == 0:
            return f"| {name} | no answer | | | | |"
        cov = f"{np.mean(self.covered):.3f}" if self.widths and np.isfinite(self.widths).all() \
            else "n/a"  # fmt: skip
        width = f"{np.mean(self.widths):.4f}" if cov != "n/a" else "n/a"
        return (
            f"| {name} | {e.mean():+.4f} | {np.sqrt(np.mean(e**2)):.4f} | {cov} | {width} | "
            f"{self.answered}/{self.total} |"
        )


def pooled(tau: np.ndarray, var: np.ndarray, shared: Any = None) -> tuple[Array, Array]:
    """Inverse-variance combination of ``(reps, J)`` site releases (unresolved sites out; the
    sites' shared sds, when given, as the server adds them)."""
    r = aggregate_many("inverse_variance", tau, np.ones_like(tau), var, shared)
    return np.asarray(r.estimate), np.asarray(r.variance)


def peer(groups: Sequence[Sequence[Data]], reps: int) -> list[dict[str, Array]] | None:
    """The peer package's estimates, per group of sites, per repetition (the sites pooled by
    size), from one run of its environment; None without ``DPATE_PEER_PYTHON``."""
    python = os.environ.get("DPATE_PEER_PYTHON")
    if not python:
        return None
    driver = Path(__file__).with_name("peer_dpate.py")
    with tempfile.TemporaryDirectory() as tmp:
        manifest: dict[str, object] = {"reps": reps, "eps": EPS, "groups": []}
        for g, sites in enumerate(groups):
            files = []
            for j, s in enumerate(sites):
                f = Path(tmp) / f"g{g}site{j}.npz"
                np.savez(f, w=s.w, y=s.y, x=design_matrix(s)[:, 1:])
                files.append(str(f))
            manifest["groups"].append(files)  # type: ignore[attr-defined]
        path = Path(tmp) / "manifest.json"
        path.write_text(json.dumps(manifest))
        # the peer's own "dpate" package, not this project's: no PYTHONPATH, run outside the tree
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run(
            [python, str(driver), str(path)],
            check=True, capture_output=True, text=True, env=env, cwd=tmp,
        )  # fmt: skip
    results = []
    for sites, res in zip(groups, json.loads(out.stdout), strict=True):
        n = np.array([s.w.size for s in sites], dtype=np.float64)
        results.append({k: np.asarray(v) @ (n / n.sum()) for k, v in res.items()})
    return results


def run_fixed(name: str, data: Data, truth: float, reps: int) -> None:
    for sites_n in (2, 3):
        rng = np.random.default_rng(7 + sites_n)
        parts = np.array_split(rng.permutation(data.w.size), sites_n)
        sites = [data.take(p) for p in parts]
        tallies = {k: Tally([], [], []) for k in ("propensity", "adjusted", "np_strat", "np_aipw")}
        taus: dict[str, list[Array]] = {"propensity": [], "adjusted": []}
        vars_: dict[str, list[Array]] = {"propensity": [], "adjusted": []}
        shared: dict[str, list[Array]] = {"propensity": [], "adjusted": []}
        for s in sites:
            for key, fn in (("propensity", ours), ("adjusted", adjusted)):
                t, v, b = fn(s, rng, reps)
                taus[key].append(t)
                vars_[key].append(v)
                shared[key].append(b)
        for key in ("propensity", "adjusted"):
            est, var = pooled(np.column_stack(taus[key]), np.column_stack(vars_[key]),
                              np.column_stack(shared[key]))  # fmt: skip
            tallies[key].add(est, var, truth)
        for key, fn in (("np_strat", np_stratified), ("np_aipw", np_aipw)):
            tv = np.array([fn(s) for s in sites])
            est, var = pooled(tv[None, :, 0], tv[None, :, 1])
            tallies[key].add(est, var, truth)
        print(f"\n{name}, {sites_n} sites of about {data.w.size // sites_n}, eps {EPS} per site, "
              f"truth {truth:.4f}, {reps} noise draws")  # fmt: skip
        print("| estimator | bias | RMSE | coverage | width | answered |")
        print("|---|---|---|---|---|---|")
        for key, t in tallies.items():
            print(t.row(key))
        peer_res = peer([sites], reps)
        for key, est in (peer_res[0] if peer_res else {}).items():
            t = Tally(list(est - truth), [], [], est.size, est.size)
            print(t.row(f"peer dpate 0.0.1 {key}"))


def run_synth(reps: int) -> None:
    truth = 0.3
    for sites_n in (2, 3):
        rng = np.random.default_rng(100 + sites_n)
        tallies = {k: Tally([], [], []) for k in ("propensity", "adjusted", "np_strat", "np_aipw")}
        peer_rows: dict[str, list[float]] = {}
        per_site = 2000
        peer_groups = []
        for rep in range(reps):
            sites = [synth5(rng, per_site) for _ in range(sites_n)]
            if rep < 100:
                peer_groups.append(sites)
            for key, fn in (("propensity", ours), ("adjusted", adjusted)):
                tv = np.array([[float(a[0]) for a in fn(s, rng, 1)] for s in sites])
                est, var = pooled(tv[None, :, 0], tv[None, :, 1], tv[None, :, 2])
                tallies[key].add(est, var, truth)
            for key, np_fn in (("np_strat", np_stratified), ("np_aipw", np_aipw)):
                tv = np.array([np_fn(s) for s in sites])
                est, var = pooled(tv[None, :, 0], tv[None, :, 1])
                tallies[key].add(est, var, truth)
        for res in peer(peer_groups, 1) or []:
            for key, est in res.items():
                peer_rows.setdefault(key, []).append(float(est[0]))
        print(f"\nSynth, 5 covariates (384 strata binned), {sites_n} sites of {per_site}, eps "
              f"{EPS} per site, truth {truth}, {reps} data sets")  # fmt: skip
        print("| estimator | bias | RMSE | coverage | width | answered |")
        print("|---|---|---|---|---|---|")
        for key, t in tallies.items():
            print(t.row(key))
        for key, vals in peer_rows.items():
            t = Tally(list(np.asarray(vals) - truth), [], [], len(vals), len(vals))
            print(t.row(f"peer dpate 0.0.1 {key}"))


# ------------------------------------------------------------------------------------------
# Timing


def timing(n: int = 10**7, p: int = 20, reps: int = 5) -> None:
    """The release's computation (both stages' statistics, the model, the simulated draw, the
    estimate) at ``N`` records and ``p`` covariates (10 binary, 5 with 5 levels, 5 numeric),
    against one ``np.bincount`` pass over ``N`` int64 codes timed just before it: from the
    columnar covariates (int8 codes, float32 values: :class:`Covariates`) and from one float32
    ``(N, p)`` matrix (its split into columns included). ``reps`` interleaved repetitions; the
    median ratios (the machine may be shared: the ratio, not the time, is the figure)."""
    rng = np.random.default_rng(0)
    cats = [2] * 10 + [5] * 5
    codes = np.stack([rng.integers(0, k, n, dtype=np.int8) for k in cats])  # (15, N)
    values = rng.uniform(0, 1, (p - len(cats), n)).astype(np.float32)  # (5, N)
    z = np.column_stack([codes.T.astype(np.float32), values.T])  # codes exact
    cov = Covariates(codes, values)
    cols = tuple(Categorical(k) for k in cats) + (Numeric(0, 1),) * (p - len(cats))
    w = (rng.uniform(size=n) < 0.4).astype(np.int8)
    y = rng.uniform(size=n)
    base_codes = codes[0].astype(np.int64)
    for data in (
        np.asfortranarray(z[:1000]),
        Covariates(codes[:, :1000].copy(), values[:, :1000].copy()),
    ):
        warm = plan_propensity(w[:1000], y[:1000], data, cols, bound=1.0, epsilon=EPS)
        warm.assemble(draw_many(warm, np.random.default_rng(1), 1))  # compiled passes loaded

    def release(data: Covariates | np.ndarray, weighted: bool = False) -> tuple[float, ...]:
        split = model_share_split("1/4", weighted=True) if weighted else None
        c0, t0 = time.process_time(), time.perf_counter()
        np.bincount(base_codes, minlength=2)
        c1, t1 = time.process_time(), time.perf_counter()
        plan = plan_propensity(w, y, data, cols, bound=1.0, epsilon=EPS, split=split)
        t2 = time.perf_counter()
        out = plan.assemble(draw_many(plan, np.random.default_rng(1), 1))
        c3, t3 = time.process_time(), time.perf_counter()
        if not weighted:
            taus.add(float(out.tau[0]))
        return t1 - t0, t2 - t1, t3 - t2, (c3 - c1) / (c1 - c0)

    taus: set[float] = set()
    rows: dict[str, list[tuple[float, ...]]] = {"columns": [], "matrix": [], "weighted": []}
    for _ in range(reps):
        rows["columns"].append(release(cov))
        rows["matrix"].append(release(z))
        rows["weighted"].append(release(cov, weighted=True))  # the third stage: no more passes
    print(f"N = {n:.0e}, {p} covariates, {reps} interleaved repetitions, medians "
          f"(the same tau from both inputs: {len(taus) == 1})")  # fmt: skip
    names = {"weighted": "columns, with the weighted sum (weighted_sum = true)"}
    for name, r in rows.items():
        name = names.get(name, name)
        t = np.array(r)
        one, two = np.median(t[:, 1] / t[:, 0]), np.median(t[:, 2] / t[:, 0])
        total = (t[:, 1] + t[:, 2]) / t[:, 0]
        print(f"  from the {name}: one np.bincount pass {np.median(t[:, 0]):.3f} s; stage 1 "
              f"(split, model statistics) {one:.1f}x; stage 2 (model, index, band cells, "
              f"estimate) {two:.1f}x; release {np.median(total):.1f}x one bincount (range "
              f"{np.min(total):.1f}-{np.max(total):.1f}x); CPU time (all threads) "
              f"{np.median(t[:, 3]):.1f}x the bincount's")  # fmt: skip


def _realised_width(variance: Array) -> float:
    """The mean width of the released 95% intervals (an unresolved release: the whole range)."""
    v = np.asarray(variance)
    return float(np.mean(np.where(np.isnan(v), 2.0, 2.0 * Z95 * np.sqrt(v))))


def plan_accuracy(reps: int = 400, weighted: bool = False) -> None:
    """``dpate plan``'s predicted widths for ``propensity`` over the realised ones
    (docs/explanation/results.md, "dpate plan for propensity"): IHDP and Lalonde split 2 and 3
    ways, the bench Synth at one site of several sizes, and with a binary outcome at one site
    and at 2 and 3 sites of 2,000; eps 1, the planner stating the treated share, the outcome's
    mean and within-arm sd, the effect and the confounding (crude difference less the effect); and the
    bands' occupancy (effective number of filled bands, ``N^2 / sum N_b^2``) the plan predicts
    against its mean over the releases. The releases use the study's ``"auto"`` choice of ``K``
    and the model share, as the plan does. ``weighted``: the releases and the plan with the
    weighted sum (``weighted_sum = true``), on the bench Synth's continuous outcome only."""
    from dpate_core.mechanisms.propensity import PROPENSITY, PropensityOptions, band_occupancy
    from dpate_core.planning import Assumptions, PredictionInputs, SiteDesign, plan_study
    from dpate_core.statistics import histogram_cells
    from dpate_core.synth import split_equal

    def releases(plans: Sequence[MechanismPlan], rng: np.random.Generator) -> tuple[Array, ...]:
        """``simulate_study``'s releases, with each release's realised band occupancy."""
        tau, var, shared, occupancy = [], [], [], []
        for plan in plans:
            draws = draw_many(plan, rng, reps)
            out = plan.assemble(draws)
            tau.append(np.asarray(out.tau, dtype=np.float64))
            var.append(np.asarray(out.variance, dtype=np.float64))
            shared.append(_shared(out.diagnostics))
            locs = plan.stages[0].locs({"model": draws["model"]})
            counts = (locs["counts"] if "counts" in locs  # a binary outcome: its histogram's
                      else histogram_cells(locs["histogram"], plan.bound)["counts"])  # fmt: skip
            band = counts[:, 0::2] + counts[:, 1::2]
            occupancy.append(np.mean(band.sum(axis=1) ** 2 / np.sum(band**2, axis=1)))
        n = np.array([p.n for p in plans], dtype=np.float64)
        return (np.stack(tau, axis=1), n, np.stack(var, axis=1), np.asarray(occupancy),
                np.stack(shared, axis=1))  # fmt: skip

    def rows(
        name: str, sites: Sequence[Data], truth: float, moments: bool = False, binary: bool = False,
        levels: bool = False,
    ) -> None:  # fmt: skip
        w = np.concatenate([s.w for s in sites])
        y = np.concatenate([s.y for s in sites])
        z = np.concatenate([s.z for s in sites])
        within = (np.var(y[w == 1]) * w.sum() + np.var(y[w == 0]) * (1 - w).sum()) / w.size
        crude = float(y[w == 1].mean() - y[w == 0].mean())
        cols = sites[0].columns
        # each numeric covariate's mean and sd over the records, rescaled by its bounds (as
        # --covariate-mean / --covariate-sd state them), or the plan's default assumption
        numeric = tuple(
            ((float(z[:, j].mean()) - (c.lo + c.hi) / 2) / ((c.hi - c.lo) / 2),
             float(z[:, j].std()) / ((c.hi - c.lo) / 2))
            for j, c in enumerate(cols) if moments and not isinstance(c, Categorical)
        )  # fmt: skip
        # each categorical covariate's level shares over the records (as --level-shares states
        # them from a published table), or equally common levels
        shares = tuple(
            tuple(float(np.mean(z[:, j] == lv)) for lv in range(c.levels))
            for j, c in enumerate(cols) if levels and isinstance(c, Categorical)
        )  # fmt: skip
        assumed = Assumptions(arm_share=float(w.mean()), outcome_sd=float(np.sqrt(within)),
                              outcome_mean=float(y.mean()), effect=truth,
                              confounding=crude - truth, numeric_covariates=numeric,
                              level_shares=shares)  # fmt: skip
        if moments:
            name += " (numeric covariates' mean and sd stated)"
        if levels:
            name += " (level shares stated)"
        if binary:
            name += " (outcome.binary)"
        sizes = tuple(c.levels for c in cols if isinstance(c, Categorical))
        # the study's public choice of K and the model share, as a spec makes it (the plan
        # predicts that release)
        opts = PropensityOptions(weighted_sum=weighted)
        choice = PROPENSITY.study_choice(opts, 1, [StudySite(s.w.size, EPS, ()) for s in sites])
        split = PROPENSITY.default_split(choice.options, binary).shares
        plans = [plan_propensity(s.w, s.y, s.z, cols, bound=1.0, epsilon=EPS, split=split,
                                 bands=choice.options.bands, binary=binary)
                 for s in sites]  # fmt: skip
        tau, n, var, occupancy, shared = releases(plans, np.random.default_rng(8))
        designs = [SiteDesign.of(f"s{j}", s.w.size, EPS, 0, split, len(split))
                   for j, s in enumerate(sites)]  # fmt: skip
        predicted = [
            band_occupancy(
                PredictionInputs(
                    d,
                    int(np.prod(sizes)),
                    1.0,
                    assumed,
                    choice.options,
                    sizes,
                    len(cols) - len(sizes),
                    binary=binary,
                )
            )
            for d in designs
        ]
        for agg in ("mvagg", "inverse_variance"):
            plan = plan_study("propensity", agg, designs, domain_size=int(np.prod(sizes)),
                              bound=1.0, assumptions=assumed, recommend=False,
                              covariate_sizes=sizes, binary=binary, options=choice.options,
                              bounded_covariates=len(cols) - len(sizes))  # fmt: skip
            site = [p.width / _realised_width(var[:, j]) for j, p in enumerate(plan.sites)]
            real = _realised_width(aggregate_many(agg, tau, n, var, shared).variance)
            bands = ", ".join(
                f"{p:.2f} / {r:.2f}" for p, r in zip(predicted, occupancy, strict=True)
            )
            print(f"| {name}, {len(sites)} site(s) of about {sites[0].w.size} | {agg} | "
                  f"{', '.join(f'{r:.2f}' for r in site)} | {plan.combined_width / real:.2f} | "
                  f"{bands} |")  # fmt: skip

    print(f"\n{reps} releases per site")
    print("| data (eps 1 per site) | combiner | sites: predicted / realised | combined | "
          "filled bands: predicted / realised |")  # fmt: skip
    print("|---|---|---|---|---|")
    if weighted:
        for n in (1000, 2000, 5000, 20_000):
            rows("bench Synth, weighted sum", [synth5(np.random.default_rng(n), n)], 0.3)
        for j in (2, 3):
            rng = np.random.default_rng(2000 + j)
            rows("bench Synth, weighted sum", [synth5(rng, 2000) for _ in range(j)], 0.3)
        return
    for name, data, truth in real_data():
        for k in (2, 3):
            split = [data.take(i) for i in split_equal(data.w.size, k, 11)]
            for moments in (False, True):
                rows(name, split, truth, moments)
            rows(name, split, truth, True, levels=True)
    for n in (1000, 2000, 5000, 20_000, 100_000):
        rows("bench Synth", [synth5(np.random.default_rng(n), n)], 0.3)
    for n in (1000, 2000, 5000, 20_000):
        rows("bench Synth, binary outcome", [synth5(np.random.default_rng(n), n, binary=True)],
             0.3)  # fmt: skip
    for j in (2, 3):
        rng = np.random.default_rng(2000 + j)
        sites = [synth5(rng, 2000, binary=True) for _ in range(j)]
        rows("bench Synth, binary outcome", sites, 0.3)
        rows("bench Synth, binary outcome", sites, 0.3, binary=True)
    for n in (1000, 2000, 5000):
        rows("bench Synth, binary outcome", [synth5(np.random.default_rng(n), n, binary=True)],
             0.3, binary=True)  # fmt: skip


def _terms(d: Data, rng: np.random.Generator, models: int, cells: int) -> dict[str, Array]:
    """One site's releases with ``models`` draws of the model and ``cells`` draws of the band
    cells' noise under each (the stage-2 noise redrawn, the model held): the estimates
    ``(models, cells)`` and the reported variance's terms per release."""
    plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=EPS)
    spec = plan.noise[0]

    def noisy(loc: np.ndarray, scale: float, unit: float, reps: int) -> Array:
        z = rng.laplace(0.0, 1.0, (reps, np.asarray(loc).shape[-1]))
        return np.asarray((loc + scale * z) * unit)

    draws = {"model": np.repeat(noisy(spec.loc, spec.scale, spec.unit, models), cells, axis=0)}
    for stage in plan.stages:
        locs = stage.locs(dict(draws))
        for site in stage.sites:
            draws[site.name] = noisy(locs[site.name], site.scale, site.unit, models * cells)
    out = plan.assemble(draws)
    g = out.diagnostics
    rho = np.asarray(g["model_noise_share"])
    k = np.minimum(rho / np.maximum(1.0 - rho, 1e-12), 1.0)
    factor = (1.0 + k) ** 2
    extra = np.asarray(g["model_variance"])
    noise = np.asarray(g["noise_variance"])  # the cells' noise variance times the factor
    unest = np.asarray(g["unestimated_variance"]) * factor
    var = np.asarray(out.variance)
    terms = {"tau": np.asarray(out.tau), "var": var, "FS": var - extra - noise - unest,
             "FN": noise, "N": noise / factor, "extra": extra, "F": factor, "rho": rho,
             "bands": np.asarray(g["usable_strata"])}  # fmt: skip
    return {key: v.reshape(models, cells) for key, v in terms.items()}


def variance_terms(splits: int = 10, models: int = 20, cells: int = 20) -> None:
    """The reported variance of ``propensity`` against the realised error, term by term
    (docs/research/propensity.md, "The reported variance against the realised error"): per
    site, averaged over the sites, IHDP and Lalonde split 2 and 3 ways at random (``splits``
    splits) and Synth with 5 covariates (``splits`` fresh data sets of 2,000 per site), each
    release drawn as ``models`` model draws x ``cells`` band-cell draws. The realised error
    splits into the cells' noise given the model draw (the spread over the cell draws), the
    model draw's (the spread of the means over the model draws, less what the cells add to it)
    and the rest (sampling and bias: the squared error of the site's mean over all draws)."""
    print("\n| data (eps 1 per site) | MSE | cells' noise given the model | F N (N) | model draw "
          "| rho^2 gap^2 | sampling, bias^2 | F S | reported (/ MSE) | F | rho | usable bands "
          "| coverage |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def rows(name: str, make: Any, truth: float, seed: int) -> None:
        rng = np.random.default_rng(seed)
        recs = [[_terms(s, rng, models, cells) for s in make(rng)] for _ in range(splits)]
        out = []
        for j in range(len(recs[0])):
            a = {key: np.stack([r[j][key] for r in recs]) for key in recs[0][j]}
            err = a["tau"] - truth
            ok = np.isfinite(err)
            cell = np.nanmean(np.nanvar(a["tau"], axis=2, ddof=1))
            means = np.nanmean(a["tau"], axis=2)
            model = np.nanmean(np.nanvar(means, axis=1, ddof=1)) - cell / cells
            rest = np.nanmean((np.nanmean(means, axis=1) - truth) ** 2)
            cover = np.abs(err[ok]) <= Z95 * np.sqrt(a["var"][ok])
            out.append([np.mean(err[ok] ** 2), cell, np.nanmean(a["FN"]), np.nanmean(a["N"]),
                        model, np.nanmean(a["extra"]), rest, np.nanmean(a["FS"]),
                        np.nanmean(a["var"][ok]), np.nanmean(a["F"]), np.nanmean(a["rho"]),
                        np.nanmean(a["bands"]), np.mean(cover)])  # fmt: skip
        m = np.asarray(out)
        v = m.mean(axis=0)
        print(f"| {name} | {v[0]:.5f} | {v[1]:.5f} | {v[2]:.5f} ({v[3]:.5f}) | {v[4]:.5f} | "
              f"{v[5]:.5f} | {v[6]:.5f} | {v[7]:.5f} | {v[8]:.5f} ({v[8] / v[0]:.2f}) | "
              f"{v[9]:.2f} | {v[10]:.2f} | {v[11]:.2f} | {m[:, 12].min():.3f}-"
              f"{m[:, 12].max():.3f} |")  # fmt: skip

    for name, data, truth in real_data():
        for k in (2, 3):

            def split(rng: np.random.Generator, k: int = k, data: Data = data) -> list[Data]:
                return [data.take(p) for p in np.array_split(rng.permutation(data.w.size), k)]

            rows(f"{name}, {k} sites of about {data.w.size // k}", split, truth, 7 + k)
    for k in (2, 3):
        rows(f"Synth, {k} sites of 2,000",
             lambda rng, k=k: [synth5(rng, 2000) for _ in range(k)], 0.3, 100 + k)  # fmt: skip


# ------------------------------------------------------------------------------------------
# Width against the non-private propensity-stratified interval (issue 19, "Done when")


def model_split(share: str, binary: bool = False) -> tuple[str, ...]:
    """The budget split with ``share`` to the model and the rest split as ``DEFAULT_SPLIT``'s
    band cells (the histogram and the squares' sums 29 : 1 since stop 51; ``binary``: the
    binary-outcome mode's histogram, the whole rest): the release's own
    (:func:`model_share_split`)."""
    return model_share_split(share, binary)


def _releases(
    d: Data, rng: np.random.Generator, reps: int, bands: int, share: str, model_noise: str,
    eps: float = EPS, binary: bool = False, weighted: bool = False,
) -> tuple[Array, Array, Array]:  # fmt: skip
    """``reps`` releases of one site (each a fresh model draw and band-cell draw): estimates,
    variances and shared sds. ``model_noise``
    ``"laplace"`` is the release (numpy noise at the plan's scales, as :func:`_terms`);
    ``"gaussian"`` a what-if, not a release: the model vector's noise Gaussian at the analytic
    Gaussian sigma of its L2 sensitivity (:func:`gaussian_model_sigma`) at ``GAUSS_DELTA``, the
    fit told the matching variance (its smoothing is the Laplace scale of equal variance).
    ``eps``: the site's epsilon (the what-if at :data:`EPS` only). ``binary``: the release in
    its binary-outcome mode (no squares; the outcome must be 0 or 1). ``weighted``: with the
    weighted sum (``weighted_sum = true``: four budget parts)."""
    split = model_share_split(share, binary, weighted) if weighted else model_split(share, binary)
    plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=eps, split=split,
                           bands=bands, binary=binary)  # fmt: skip
    spec = plan.noise[0]
    if model_noise == "gaussian":
        sigma = gaussian_model_sigma(d.columns, float(plan.shares.apply(plan.total)[0].epsilon))
        b = sigma / np.sqrt(2.0)  # the Laplace scale of the same variance, in counts
        plan = _with_model_scale(plan, d, share, bands, b / (spec.scale * spec.unit))
        spec = plan.noise[0]
        z = rng.normal(0.0, np.sqrt(2.0), (reps, np.asarray(spec.loc).size))
    else:
        z = rng.laplace(0.0, 1.0, (reps, np.asarray(spec.loc).size))
    draws = {"model": np.asarray((spec.loc + spec.scale * z) * spec.unit)}
    for stage in plan.stages:
        locs = stage.locs(dict(draws))
        for site in stage.sites:
            noise = rng.laplace(0.0, 1.0, (reps, np.asarray(locs[site.name]).shape[-1]))
            draws[site.name] = np.asarray((locs[site.name] + site.scale * noise) * site.unit)
    out = plan.assemble(draws)
    tau, var = (np.asarray(x, dtype=np.float64) for x in (out.tau, out.variance))
    return tau, var, _shared(out.diagnostics)


#: the model stages measured as what-ifs (not releases)
WHAT_IF = {
    "gaussian": "Gaussian model, delta 1e-6 (what-if)",
}
#: the what-if Gaussian model stage's delta (per site)
GAUSS_DELTA = 1e-6


def gaussian_model_sigma(columns: Sequence[Column], eps_m: float) -> float:
    """The analytic Gaussian sigma (in counts) of the model vector at ``eps_m`` and
    ``GAUSS_DELTA``: L2 sensitivity ``sqrt(2 [p_cat = 0] + 2 p_cat + 4 p_num)`` (replace one
    record: the arm counts ``(1, 1)`` when released, a categorical covariate's two cells, a
    numeric covariate's arm sums ``|u - u'|^2 + |u^2 - u'^2|^2 <= 4`` in one arm,
    ``u^2 + u'^2 + (u^2 - u'^2)^2 <= 2`` across arms; the grid's rounding left out)."""
    from dpate_core.noise import analytic_gaussian_sigma

    p_cat = sum(isinstance(c, Categorical) for c in columns)
    arms = 0 if p_cat else 2
    l2 = float(np.sqrt(arms + 2 * p_cat + 4 * (len(columns) - p_cat)))
    return analytic_gaussian_sigma(l2, eps_m, GAUSS_DELTA)


def _with_model_scale(
    plan: MechanismPlan, d: Data, share: str, bands: int, factor: float
) -> MechanismPlan:
    """The plan re-made with the model's noise scale times ``factor`` (the fit's smoothing
    follows) and the band cells' budget unchanged: a what-if for the bench, through the public
    API (the model's epsilon divided by ``factor``, the total and the split adjusted to it)."""

    parts = [Fraction(x) * EPS for x in model_split(share)]
    parts[0] /= Fraction(factor).limit_denominator(10**9)
    total = sum(parts, Fraction(0))
    return plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=total,
                           split=[x / total for x in parts], bands=bands)  # fmt: skip


@dataclass
class WidthTally:
    """Per site and pooled: our widths, the non-private widths, our and its coverage."""

    ours: list[list[float]]
    np_w: list[list[float]]
    cover: list[list[bool]]
    np_cover: list[list[bool]]

    def add(self, j: int, tau: Array, var: Array, np_tv: tuple[float, float], truth: float) -> None:
        np_tau, np_var = np_tv
        self.np_cover[j].append(bool(abs(np_tau - truth) <= Z95 * np.sqrt(np_var)))
        ok = np.isfinite(tau) & np.isfinite(var)
        w = np.where(ok, 2 * Z95 * np.sqrt(np.where(ok, var, 0.0)), 2.0)  # unresolved: the range
        self.ours[j] += list(w)
        self.np_w[j] += [2 * Z95 * np.sqrt(np_var)] * tau.size
        self.cover[j] += list(ok & (np.abs(tau - truth) <= Z95 * np.sqrt(np.where(ok, var, 0.0))))

    def ratio(self, j: int) -> tuple[float, float, float]:
        """``(width ratio, our coverage, the non-private interval's coverage)``."""
        r = float(np.mean(self.ours[j]) / np.mean(self.np_w[j]))
        return r, float(np.mean(self.cover[j])), float(np.mean(self.np_cover[j]))


def width_case(
    sites: Sequence[Sequence[Data]], truth: float, reps: int, bands: int = 5,
    share: str = "1/4", model_noise: str = "laplace", seed: int = 0, eps: float = EPS,
    combiners: dict[str, list[bool]] | None = None, binary: bool = False,
    weighted: bool = False,
) -> tuple[list[tuple[float, float, float]], tuple[float, float, float]]:  # fmt: skip
    """Per-site ``(width ratio, coverage, non-private coverage)`` and the inverse-variance
    combination's, over the groups of sites ``sites`` (each group a fresh data set or split) x
    ``reps`` releases at ``eps`` per site; ``combiners``, when given, gains each of
    :data:`COMBINERS`' coverage per release (a release it answers: :func:`combiner_cover`).
    ``binary``: the releases in their binary-outcome mode; ``weighted``: with the weighted sum."""
    rng = np.random.default_rng(seed)
    j_n = len(sites[0])
    site = WidthTally([[] for _ in range(j_n)], [[] for _ in range(j_n)],
                      [[] for _ in range(j_n)], [[] for _ in range(j_n)])  # fmt: skip
    comb = WidthTally([[]], [[]], [[]], [[]])
    for group in sites:
        taus, vars_, nps, shared = [], [], [], []
        for j, s in enumerate(group):
            tau, var, b = _releases(s, rng, reps, bands, share, model_noise, eps, binary,
                                    weighted)  # fmt: skip
            shared.append(b)
            np_tv = np_stratified(s)  # the reference: 5 bands whatever our K
            site.add(j, tau, var, np_tv, truth)
            taus.append(tau)
            vars_.append(var)
            nps.append(np_tv)
        if combiners is not None:
            sizes = np.tile([float(s.w.size) for s in group], (reps, 1))
            combiner_cover(np.column_stack(taus), sizes, np.column_stack(vars_), truth, combiners,
                           np.column_stack(shared))  # fmt: skip
        est, var = pooled(np.column_stack(taus), np.column_stack(vars_), np.column_stack(shared))
        np_est, np_var = pooled(*(np.array([[t[i] for t in nps]]) for i in (0, 1)))
        comb.add(0, est, var, (float(np_est[0]), float(np_var[0])), truth)
    return [site.ratio(j) for j in range(j_n)], comb.ratio(0)


def combiner_cover(
    tau: Array, sizes: Array, var: Array, truth: float, out: dict[str, list[bool]],
    shared: Array | None = None,
) -> None:  # fmt: skip
    """Append to ``out[method]`` whether each of :data:`COMBINERS`' 95% intervals over the
    ``(reps, J)`` site releases covers ``truth`` (the releases a combiner answers only; the
    sites' ``shared`` sds as the server adds them)."""
    for method in COMBINERS:
        r = aggregate_many(method, tau, sizes, var, shared)
        e, cv = np.asarray(r.estimate) - truth, np.asarray(r.variance)
        good = np.isfinite(e) & np.isfinite(cv)
        out.setdefault(method, []).extend(np.abs(e[good]) <= Z95 * np.sqrt(cv[good]))


def width_ratios(quick: bool = False) -> None:
    """Our interval's width over the non-private propensity-stratified interval's (the same
    ``K`` bands of a non-private logistic score, its sandwich variance), per site and for the
    inverse-variance combination, with our coverage beside each: Synth (5 covariates) at 2 and 3
    sites x N per site; ``K`` and the model's budget share at N = 2,000 and 5,000; the what-if
    Gaussian model stage; IHDP and Lalonde split at random (docs/explanation/results.md,
    "Propensity bands": width against the non-private interval)."""
    sets, reps = (8, 10) if quick else (50, 20)

    def synth_groups(n: int, j: int, seed: int) -> list[list[Data]]:
        rng = np.random.default_rng(seed)
        return [[synth5(rng, n) for _ in range(j)] for _ in range(sets)]

    def show(label: str, res: tuple[list[tuple[float, float, float]], tuple[float, ...]]) -> None:
        per_site, (r, c, npc) = res
        sites = ", ".join(f"{a:.2f} ({b:.3f})" for a, b, _ in per_site)
        np_sites = ", ".join(f"{x:.2f}" for *_, x in per_site)
        print(f"| {label} | {sites} | {r:.2f} ({c:.3f}) | {np_sites}; {npc:.2f} |", flush=True)

    print(f"\nwidth / non-private width (our coverage); {sets} data sets or splits x {reps} "
          "releases; the non-private interval's own coverage (sites; combined)")  # fmt: skip
    print("| eps 1 per site | sites | inverse variance | non-private coverage |")
    print("|---|---|---|---|")
    for n in (2000, 5000, 10_000, 20_000):
        for j in (2, 3):
            show(f"{j} x {n:,}, K 5, model 1/4", width_case(synth_groups(n, j, n + j), 0.3, reps))
    for n in (2000, 5000):
        groups = synth_groups(n, 2, n + 2)
        for bands in (3, 4):
            show(f"2 x {n:,}, K {bands}, model 1/4", width_case(groups, 0.3, reps, bands=bands))
        for share in ("1/3", "1/2"):
            show(f"2 x {n:,}, K 5, model {share}", width_case(groups, 0.3, reps, share=share))
        for noise, tag in WHAT_IF.items():
            show(f"2 x {n:,}, K 5, model 1/4, {tag}", width_case(groups, 0.3, reps,
                                                               model_noise=noise))  # fmt: skip
    for n in (10_000, 20_000):
        groups = synth_groups(n, 2, n + 2)
        for share in ("1/3", "1/2"):
            show(f"2 x {n:,}, K 5, model {share}", width_case(groups, 0.3, reps, share=share))
        show(f"2 x {n:,}, K 10, model 1/2", width_case(groups, 0.3, reps, bands=10, share="1/2"))
    groups = synth_groups(5000, 2, 5002)
    show("2 x 5,000, K 10, model 1/2", width_case(groups, 0.3, reps, bands=10, share="1/2"))
    for name, data, truth in real_data():
        for j in (2, 3):
            rng = np.random.default_rng(7 + j)
            groups = [[data.take(p) for p in np.array_split(rng.permutation(data.w.size), j)]
                      for _ in range(sets)]  # fmt: skip
            show(f"{name}, {j} x {data.w.size // j}", width_case(groups, truth, reps))
            for noise, tag in WHAT_IF.items():
                show(f"{name}, {j} x {data.w.size // j}, {tag}",
                     width_case(groups, truth, reps, model_noise=noise))  # fmt: skip


#: ``--auto``'s sizes per site, and those where the rule's other rows are measured beside it
AUTO_SIZES = (2000, 3000, 4000, 5000, 10_000, 20_000)
AUTO_OTHERS = (3000, 4000, 10_000, 20_000)


def auto_rule(
    quick: bool = False, eps: Fraction = Fraction(EPS), sizes: Sequence[int] = AUTO_SIZES,
    others: Sequence[int] = AUTO_OTHERS, sites: Sequence[int] = (2, 3),
    counts: tuple[int, int] | None = None, real: bool = False, every: bool = False,
    rows: Sequence[tuple[int, str]] | None = None, strong: bool = False, binary: bool = False,
    binary_mode: bool = False, weighted: bool = False,
) -> None:  # fmt: skip
    """The shipped ``"auto"`` choice of ``K`` and the model share (``study_choice`` on the
    sites' declared ``n`` and epsilon) on Synth at ``sites`` x N per site for N in ``sizes``,
    then the rule's other rows on the same data sets at the sizes ``others``; with ``real``,
    IHDP and Lalonde split at random into ``sites`` sites under the rule: width over the
    non-private interval's and coverage, per site and for the inverse-variance combination, at
    ``eps`` per site (docs/research/propensity.md, "Bands and model share by study size").
    ``counts``: ``(data sets or splits, releases)``, else 20 x 20 (``quick``) or 40 x 25.
    ``every``: then the rule's rows' coverage under every combiner (:data:`COMBINERS`).
    ``rows``: ``(K, model share)`` rows printed at the sizes ``others`` in place of the rule's
    other rows (and, with ``real``, on IHDP and Lalonde beside the rule's choice), each with every
    combiner's coverage when ``every``. ``strong``: the Synth rows on :func:`synth5_strong`.
    ``binary``: the Synth outcome binary (:func:`synth5`'s ``binary``); ``binary_mode``: and the
    releases in their binary-outcome mode (``outcome.binary``: no squares). ``weighted``: every
    row with the weighted sum (``weighted_sum = true``), on the same data sets and seeds as
    without it (run both to compare)."""
    from dpate_core.mechanisms.propensity import AUTO_RULE

    sets, reps = counts or ((20, 20) if quick else (40, 25))
    est = estimator_of("propensity")

    def chosen(n: int, j: int) -> tuple[int, str]:
        opts = est.study_choice(None, 1, [StudySite(n, eps, ())] * j).options
        return int(opts.bands), str(opts.model_share)

    def show(label: str, bands: int, share: str, tag: str, res: Any) -> None:
        per_site, (r, c, _) = res
        cells = ", ".join(f"{a:.2f} ({b:.3f})" for a, b, _ in per_site)
        tag = tag + (", weighted sum" if weighted else "")
        print(f"| {label} | K {bands}, model {share}{tag} | {cells} | {r:.2f} ({c:.3f}) |",
              flush=True)  # fmt: skip

    by_combiner: list[tuple[str, dict[str, list[bool]]]] = []

    def cover_of(label: str, tag: str) -> dict[str, list[bool]] | None:
        if not (every and (tag or rows)):
            return None
        by_combiner.append((label, {}))
        return by_combiner[-1][1]

    def row(n: int, j: int, bands: int, share: str, tag: str) -> None:
        rng = np.random.default_rng(2000 + n + j)  # the same data sets for every row of (n, j)
        make = synth5_strong if strong else synth5
        groups = [[make(rng, n, binary=binary) for _ in range(j)] for _ in range(sets)]
        label = f"{j} x {n:,}"
        res = width_case(groups, 0.3, reps, bands=bands, share=share, seed=n + j, eps=eps,
                         combiners=cover_of(f"{label}, K {bands}, model {share}", tag),
                         binary=binary_mode, weighted=weighted)  # fmt: skip
        show(label, bands, share, tag, res)

    print(f"\nthe auto rule: width / non-private width (our coverage); {sets} data sets x {reps} "
          "releases")  # fmt: skip
    print(f"| eps {eps} per site | K, model share | sites | inverse variance |")
    print("|---|---|---|---|")
    for n in sizes:
        for j in sites:
            row(n, j, *chosen(n, j), " (auto)")
    for n in others:  # the rule's other rows on each side of a threshold (or ``rows``)
        for j in sites:
            choice = chosen(n, j)
            for bands, share in rows or [(b, str(m)) for _, b, m in AUTO_RULE]:
                if (bands, str(share)) != choice:
                    row(n, j, bands, str(share), "")
    for name, data, truth in real_data() if real else ():
        for j in sites:
            rng = np.random.default_rng(7 + j)
            groups = [[data.take(p) for p in np.array_split(rng.permutation(data.w.size), j)]
                      for _ in range(sets)]  # fmt: skip
            n = min(s.w.size for s in groups[0])
            choice = chosen(n, j)
            label = f"{name}, {j} x {n}"
            for bands, share in [choice, *(r for r in rows or () if r != choice)]:
                tag = " (auto)" if (bands, share) == choice else ""
                cover = cover_of(f"{label}, K {bands}, model {share}", tag)
                res = width_case(groups, truth, reps, bands=bands, share=share, seed=j, eps=eps,
                                 combiners=cover, weighted=weighted)  # fmt: skip
                show(label, bands, share, tag, res)
    if not by_combiner:
        return
    print(f"\nthe auto rule's rows: coverage of each combiner, eps {eps} per site (the releases "
          "it answers)")  # fmt: skip
    print(f"| eps {eps} per site | {' | '.join(m.replace('_', ' ') for m in COMBINERS)} |")
    print("|---|" + "---|" * len(COMBINERS))
    for label, cover in by_combiner:
        cells = " | ".join(f"{np.mean(cover[m]):.3f}" for m in COMBINERS)
        print(f"| {label} | {cells} |", flush=True)


# Variance variants (docs/research/propensity.md, "The reported variance against the realised
# error"): post-processing of the same draws, measured here, not in the release

COMBINERS = ("inverse_variance", "mvagg", "random_effects", "all", "largest")
_CDF = np.vectorize(lambda t: 0.5 * (1.0 + math.erf(t / math.sqrt(2.0))), otypes=[np.float64])


def _band_priors(plan: MechanismPlan, v: dict[str, Array], share_t: Array, prior: str) -> Array:
    """``(reps, 2K)`` counts to smooth the noisy band-arm counts towards: the band's noisy
    total times the noisy treated share (``"band"``), or the model's own predicted count of
    the band and arm (``"model"``: ``N`` times the arm share times the arm's normal mass
    between the band's edges)."""
    parts = plan_parts(plan)
    c, fit = parts.constants, parts.fit
    cnt = np.clip(v["counts"], 0.0, c.n)
    out = np.empty_like(cnt)
    if prior == "band":
        total = cnt[:, 0::2] + cnt[:, 1::2]
        out[:, 1::2], out[:, 0::2] = total * share_t[:, None], total * (1 - share_t[:, None])
        return out
    for i, row in enumerate(v["model"]):
        m = fit(row)
        e = np.concatenate([[-np.inf], m.edges(c.n_strata), [np.inf]])
        sd = np.sqrt(np.maximum(m.variances, 1e-12))
        for a, arm in ((0, 1 - m.arm_share), (1, m.arm_share)):
            out[i, a::2] = c.n * arm * np.diff(_CDF((e - m.means[a]) / sd[a]))
    return out


def variance_variants(plan: MechanismPlan, v: dict[str, Array]) -> tuple[Array, dict[str, Array]]:
    """The published estimate and, per variant, the variance it would report, ``(reps,)``:

    - ``shipped``: the release's: ``F (S + N) + rho^2 gap^2``, or from ``N x epsilon_model``
      750 at the releases whose noise share is at most 0.2 the corrected estimate's own delta
      method over the band cells (stop 41, ``linearised_factors``), each plus the shared sd's
      square;
    - ``linearised at every size`` and ``factor form (until stop 41)``: the release with its
      public switch forced one way;
    - ``joint``: ``F S`` plus the delta method of the corrected estimate ``(1 + k) tau - k
      tau_crude`` over every band cell's count and sum noise together (the two estimates'
      gradients per cell), evaluated at band-arm counts smoothed towards a prior (weight on
      the noisy count ``n^2 / (n^2 + v_n)``) and the crude's arm totals at least two sds of
      their noise;
    - ``+ model draw``: ``joint`` plus ``F rho^2 max(gap^2 - Var(gap), 0) (usable - 1) /
      (K - 1)`` (``Var(gap)``: the same delta method for ``tau_crude - tau`` plus its
      within-cell sampling);
    - ``+ gap^2``: ``joint`` plus ``max(gap^2 - Var(gap), 0) (usable - 1) / (K - 1)``;
    - ``x usable``: ``joint`` times ``1 + 0.9 (usable - 1) / (K - 1)``;
    - ``where |gap| <= z sd, else shipped``: ``joint (band)`` where ``gap^2 <= z^2 Var(gap)``
      (the released gap no larger than its noise), else ``shipped``."""
    c = plan_constants(plan)
    out = plan.assemble(v)
    sub = assemble_subclassification(c, v)
    d = out.diagnostics
    rho = np.clip(np.asarray(d["model_noise_share"]), 0.0, 1.0)
    k = np.minimum(rho / np.maximum(1.0 - rho, 1e-12), 1.0)
    f, kk = (1.0 + k) ** 2, k[:, None]
    nan = np.where(np.isfinite(out.variance), 0.0, np.nan)
    fs = out.variance - d["model_variance"] - d["noise_variance"]  # F S plus F times left-out
    raw = np.asarray(v["counts"])
    cnt = np.clip(raw, 0.0, c.n)
    s = np.clip(np.asarray(v["sums"]), -c.n * c.half_b, c.n * c.half_b)
    q = np.asarray(v["squares"])
    n_c, n_t, s_c, s_t = cnt[:, 0::2], cnt[:, 1::2], s[:, 0::2], s[:, 1::2]
    used = (n_t >= c.min_count) & (n_c >= c.min_count)
    k_used = used.sum(-1)
    big_t, big_c = (np.maximum(raw[:, a::2].sum(-1), 1.0) for a in (1, 0))
    m_big_t, m_big_c = v["sums"][:, 1::2].sum(-1) / big_t, v["sums"][:, 0::2].sum(-1) / big_c
    tau = np.nan_to_num(np.asarray(sub.tau))
    gap = np.where(np.isfinite(sub.tau), np.clip(m_big_t - m_big_c, -c.bound, c.bound) - tau, 0.0)
    nt_u, nc_u = np.where(used, n_t, 1.0), np.where(used, n_c, 1.0)
    pooled = [
        np.clip(np.where(used, qq - ss**2 / nn, 0).sum(-1) / np.maximum(
            np.where(used, nn, 0).sum(-1), 1), 0.0, c.max_var)
        for qq, ss, nn in ((q[:, 1::2], s_t, nt_u), (q[:, 0::2], s_c, nc_u))
    ]  # fmt: skip
    floor = 2.0 * np.sqrt(c.n_strata * c.v_n)  # the crude's arm totals: two sds of their noise
    tot_t, tot_c = np.maximum(big_t, floor), np.maximum(big_c, floor)
    mt = np.clip(m_big_t * big_t / tot_t, -c.half_b, c.half_b)[:, None]
    mc = np.clip(m_big_c * big_c / tot_c, -c.half_b, c.half_b)[:, None]
    crude_g = ((1 / tot_t)[:, None], (-1 / tot_c)[:, None], -mt / tot_t[:, None],
               mc / tot_c[:, None])  # fmt: skip
    u = (k_used - 1) / (c.n_strata - 1)
    res = {"shipped": np.asarray(out.variance)}
    res["shipped without rho^2 gap^2"] = np.asarray(out.variance) - np.nan_to_num(
        np.asarray(d["model_variance"])
    )
    forced = {True: "linearised at every size", False: "factor form (until stop 41)"}
    for linearised, label in forced.items():
        parts = plan_parts(plan)
        if parts.linearised != linearised:
            res[label] = np.asarray(parts._replace(linearised=linearised).assemble(v).variance)
        else:
            res[label] = res["shipped"]
    # the corrected estimate's own delta method at any noise share (the release gates it at
    # LINEARISED_SHARE): a what-if, the module constant lifted for this one assembly
    saved = propensity_release.LINEARISED_SHARE
    propensity_release.LINEARISED_SHARE = 1.0
    try:
        own = np.asarray(plan_parts(plan)._replace(linearised=True).assemble(v).variance)
    finally:
        propensity_release.LINEARISED_SHARE = saved
    for most in (1, 2):
        res[f"own delta method where at most {most} band(s) used, else shipped"] = np.where(
            k_used <= most, own, res["shipped"]
        )
    for prior in ("band", "model"):
        p = _band_priors(plan, v, big_t / (big_t + big_c), prior)
        lam = np.maximum(cnt, 0.0) ** 2 / (np.maximum(cnt, 0.0) ** 2 + c.v_n)
        sm = np.maximum(lam * cnt + (1 - lam) * p, c.min_count)
        st, sc = sm[:, 1::2], sm[:, 0::2]
        size = np.where(used, st + sc, 0.0)
        alpha = (c.n_strata - k_used) / c.n_strata
        left = np.where(used, 0, raw[:, 0::2] + raw[:, 1::2]).sum(-1)
        den = np.maximum(alpha * size.sum(-1) + (1 - alpha) * (c.n - left), c.min_count)
        w = size / den[:, None]
        m_t = np.clip(s_t / nt_u, -c.half_b, c.half_b)
        m_c = np.clip(s_c / nc_u, -c.half_b, c.half_b)
        diff = (m_t - m_c - alpha[:, None] * tau[:, None]) / den[:, None]
        out_left = ((1 - alpha) * tau / den)[:, None]
        tau_g = (np.where(used, w / st, 0), np.where(used, -w / sc, 0),
                 np.where(used, diff - w * m_t / st, out_left),
                 np.where(used, diff + w * m_c / sc, out_left))  # fmt: skip

        def cells(a: Any, b: Any, tau_g: tuple[Array, ...] = tau_g) -> Array:
            g = [a * t + b * cr for t, cr in zip(tau_g, crude_g, strict=True)]
            return np.asarray(c.v_s * (g[0] ** 2 + g[1] ** 2).sum(-1)
                              + c.v_n * (g[2] ** 2 + g[3] ** 2).sum(-1))  # fmt: skip

        joint = fs + cells(1 + kk, -kk) + nan
        var_gap = cells(-1.0, 1.0) + pooled[0] * (st * (crude_g[0] - tau_g[0]) ** 2).sum(-1)
        var_gap = var_gap + pooled[1] * (sc * (crude_g[1] + tau_g[1]) ** 2).sum(-1)
        gap2 = np.maximum(gap**2 - var_gap, 0.0) * u
        res[f"joint ({prior})"] = joint
        res[f"joint ({prior}) + model draw"] = joint + f * rho**2 * gap2
        if prior == "band":
            res["shipped, gap denoised"] = res["shipped without rho^2 gap^2"] + rho**2 * np.maximum(
                gap**2 - var_gap, 0.0
            )
            res["joint (band) + gap^2"] = joint + gap2
            res["joint (band) x usable"] = joint * (1.0 + 0.9 * u)
            for most in (1, 2):  # a switch on a public feature of the release: its used bands
                res[f"joint (band) where at most {most} band(s) used, else shipped"] = np.where(
                    k_used <= most, joint, res["shipped"]
                )
            for z in (1.0, 2.0):
                quiet = gap**2 <= z * z * var_gap  # the gap no larger than its noise
                res[f"joint (band) where |gap| <= {z:g} sd, else shipped"] = np.where(
                    quiet, joint, res["shipped"]
                )
    return np.asarray(out.tau), res


def _synthetic_records(
    plan: MechanismPlan,
    v: dict[str, Array],
    i: int,
    columns: Sequence[Column],
    rng: np.random.Generator,
) -> tuple[np.ndarray, Array, Array]:
    """``N`` records simulated from release ``i``'s released values only: each (band, arm)
    cell's share of ``N`` from its noisy count (clipped at 0), each record's covariates from its
    arm's naive-Bayes distribution in the released model (categorical levels at the smoothed
    noisy frequencies, numeric ``u`` normal at the noisy arm mean and pooled variance, clipped),
    kept where the released model's index puts it in the cell's band; its outcome the cell's
    noisy mean (a cell under ``min_count``: its arm's mean over the bands), with the bands'
    outcome spread scaled by ``1 + k`` (the confounding the correction attributes to the
    index), plus normal noise of sd 0.15, clipped to ``[0, B]``."""
    parts = plan_parts(plan)
    c, fit = parts.constants, parts.fit
    spec = plan.noise[0]
    smoothing = max(1.0, spec.scale * spec.unit)
    row = v["model"][i]
    cnt, sums = v["counts"][i], v["sums"][i]
    model = fit(row)
    edges, bands = model.edges(c.n_strata), c.n_strata
    arm = np.maximum(row[:2], 1.0)
    share = np.maximum(cnt, 0.0)
    target = np.floor(share / max(share.sum(), 1.0) * c.n + rng.uniform(size=cnt.size))
    target = target.astype(np.int64)

    def covariates(a: int, size: int) -> Array:
        out, at = [], 2
        for col in columns:
            if isinstance(col, Categorical):
                freq = np.maximum(row[at : at + col.width].reshape(col.levels, 2)[:, a], 0.0)
                freq = freq + smoothing
                out.append(rng.choice(col.levels, size=size, p=freq / freq.sum()).astype(float))
            else:
                block = row[at : at + 3]
                mean = np.clip(block[:2] / arm, -1.0, 1.0)[a]
                s2 = float(np.clip((block[2] - np.sum(block[:2] ** 2 / arm)) / c.n, 1e-2, 1.0))
                u = np.clip(rng.normal(mean, np.sqrt(s2), size), -1.0, 1.0)
                out.append((col.lo + col.hi) / 2 + (col.hi - col.lo) / 2 * u)
            at += col.width
        return np.column_stack(out)

    zs, cells = [], []
    for a in (0, 1):
        z = covariates(a, max(8 * int(target[a::2].sum()), 50))
        band = np.searchsorted(edges, model.index(z))
        for b in range(bands):
            need = int(target[2 * b + a])
            pool = np.flatnonzero(band == b)
            if need == 0:
                continue
            if pool.size == 0:  # the model puts none there: the records nearest the band
                pool = np.argsort(np.abs(band - b))[:need]
            zs.append(z[rng.choice(pool, need, replace=pool.size < need)])
            cells.append(np.full(need, 2 * b + a))
    cell = np.concatenate(cells)
    mean = np.clip(sums / np.maximum(cnt, 1.0) + c.bound / 2, 0.0, c.bound)
    for a in (0, 1):
        arm_mean = np.sum(sums[a::2]) / max(np.sum(cnt[a::2]), 1.0) + c.bound / 2
        mean[a::2] = np.where(cnt[a::2] < c.min_count, np.clip(arm_mean, 0, c.bound), mean[a::2])
    rho = float(np.clip(model.noise_share, 0.0, 1.0))
    k = min(rho / max(1.0 - rho, 1e-12), 1.0)
    size = share[0::2] + share[1::2]
    band_mean = (mean[0::2] * share[0::2] + mean[1::2] * share[1::2]) / np.maximum(size, 1.0)
    spread = k * (band_mean - np.sum(band_mean * size) / max(size.sum(), 1.0))
    mean = np.clip(mean + np.repeat(spread, 2), 0.0, c.bound)
    y = np.clip(mean[cell] + rng.normal(0.0, 0.15, cell.size), 0.0, c.bound)
    return (cell % 2).astype(np.int8), y, np.vstack(zs)


def bootstrapped_model_draw(
    plan: MechanismPlan,
    v: dict[str, Array],
    columns: Sequence[Column],
    rng: np.random.Generator,
    redraws: int = 30,
) -> Array:
    """Per release, the spread of the corrected estimate over ``redraws`` draws of the model's
    noise (at the public scale) on records simulated from the released values
    (:func:`_synthetic_records`), the band cells left without noise: the model draw's part of
    the variance in a world where the released model's index carries the confounding."""
    c = plan_constants(plan)
    resolved = np.isfinite(np.asarray(plan.assemble(v).tau))
    out = np.full(resolved.size, np.nan)
    for i in np.flatnonzero(resolved):
        w, y, z = _synthetic_records(plan, v, int(i), columns, rng)
        sim = plan_propensity(w, y, z, columns, bound=c.bound, epsilon=EPS)
        spec = sim.noise[0]
        draws = {"model": (spec.loc + spec.scale * rng.laplace(0, 1, (redraws, spec.loc.size)))
                 * spec.unit}  # fmt: skip
        for stage in sim.stages:
            locs = stage.locs(draws)
            draws.update({site.name: np.asarray(locs[site.name]) * site.unit
                          for site in stage.sites})  # fmt: skip
        out[i] = np.nanvar(np.asarray(sim.assemble(draws).tau), ddof=1)
    return out


def every_band_crude(plan: MechanismPlan, v: dict[str, Array]) -> tuple[Array, Array, Array]:
    """The release as it was until stop 34, its crude difference over every band (the unused
    ones' noisy cells too) in place of the bands the subclassification uses: ``(estimate,
    variance, shared sd)`` per draw, the shipped formulas otherwise."""
    from dpate_core.mechanisms.propensity._release import (
        ATTENUATION_CAP,
        residual_confounding_share,
    )

    c = plan_constants(plan)
    d = plan.assemble(v).diagnostics
    sub = assemble_subclassification(c, v)
    cnt = np.asarray(v["counts"], dtype=np.float64)
    sums = np.asarray(v["sums"], dtype=np.float64)
    n_t = np.maximum(cnt[:, 1::2].sum(-1), 1.0)
    n_c = np.maximum(cnt[:, 0::2].sum(-1), 1.0)
    crude = sums[:, 1::2].sum(-1) / n_t - sums[:, 0::2].sum(-1) / n_c
    tau = np.asarray(sub.tau, dtype=np.float64)
    gap = np.where(np.isfinite(tau), np.clip(crude, -c.bound, c.bound) - np.nan_to_num(tau), 0.0)
    rho = np.clip(np.asarray(d["model_noise_share"], dtype=np.float64), 0.0, 1.0)
    k = np.minimum(rho / np.maximum(1.0 - rho, 1e-12), ATTENUATION_CAP)
    shared = residual_confounding_share(c.n_strata) * (1.0 + k) * np.abs(gap)
    var = np.asarray(sub.variance) * (1.0 + k) ** 2 + (rho * gap) ** 2 + shared**2
    est = np.clip(tau - k * gap, -c.bound, c.bound)
    return est, var, np.where(np.isfinite(var), shared, 0.0)


def coverage_cells(
    tau: Array, var: Array, n: Array, shared: Array, truth: float
) -> tuple[list[float], list[float], list[float], float, float]:
    """Of ``(reps, J)`` site releases: each site's coverage of the 95% interval, each of
    :data:`COMBINERS`' (as the server combines them, the shared sds included), each site's
    reported variance over its mean squared error, and the inverse-variance combination's RMSE
    and mean width."""
    err = tau - truth
    ok = np.isfinite(err) & np.isfinite(var)
    site = [float(np.mean(np.abs(err[ok[:, j], j]) <= Z95 * np.sqrt(var[ok[:, j], j])))
            for j in range(tau.shape[1])]  # fmt: skip
    ratio = [float(np.mean(var[ok[:, j], j]) / np.mean(err[ok[:, j], j] ** 2))
             for j in range(tau.shape[1])]  # fmt: skip
    comb, rmse, width = [], 0.0, 0.0
    for method in COMBINERS:
        r = aggregate_many(method, tau, n, var, shared)
        e, cv = np.asarray(r.estimate) - truth, np.asarray(r.variance)
        good = np.isfinite(e) & np.isfinite(cv)
        comb.append(float(np.mean(np.abs(e[good]) <= Z95 * np.sqrt(cv[good]))))
        if method == "inverse_variance":
            rmse = math.sqrt(np.mean(e[good] ** 2))
            width = 2 * Z95 * float(np.mean(np.sqrt(cv[good])))
    return site, comb, ratio, rmse, width


def _cover_line(name: str, label: str, site: list[float], comb: list[float],
                ratio: list[float]) -> str:  # fmt: skip
    every = site + comb
    return (f"| {name} | {label} | {' '.join(f'{x:.3f}' for x in site)} | "
            f"{' '.join(f'{x:.3f}' for x in comb)} | {min(every):.3f}-{max(every):.3f} | "
            f"{min(ratio):.2f}-{max(ratio):.2f} |")  # fmt: skip


def every_band_rows(
    name: str, shipped: tuple[Array, Array, Array], every: tuple[Array, Array, Array],
    n: Array, truth: float,
) -> None:  # fmt: skip
    """:func:`coverage_cells` of the shipped release (the crude difference over the bands
    used) and of :func:`every_band_crude`, with the inverse-variance RMSE and mean width."""
    for label, (tau, var, shared) in (("shipped", shipped), ("every band's crude", every)):
        site, comb, ratio, rmse, width = coverage_cells(tau, var, n, shared, truth)
        print(f"{_cover_line(name, label, site, comb, ratio)} {rmse:.4f} | {width:.4f} |")


def split_many(
    method: str, tau: Array, n: Array, v_int: Array, v_wt: Array, shared: Array | None
) -> tuple[Array, Array]:
    """A combination whose choice and weights read ``v_wt`` and whose reported variance is
    ``sum w_j^2 v_int_j`` (plus what the combiner adds to each site's variance, random effects'
    ``tau^2``, and the shared sds' cross terms): the estimate and the variance per row."""
    from dpate_core.aggregation import Rows, aggregator_of
    from dpate_core.aggregation._parts import shared_sds, shared_term, weighted_many

    ok = np.isfinite(tau) & np.isfinite(v_wt) & (v_wt > 0) & np.isfinite(v_int) & (v_int > 0)
    comb = aggregator_of(method).combine(Rows(tau, np.broadcast_to(n, tau.shape), v_wt, ok))
    res = weighted_many(method, tau, v_int + (comb.var - v_wt), comb.weights, comb.chosen & ok)
    b = shared_sds(shared, tau.shape)
    var = res.variance if b is None else res.variance + shared_term(res.weights, b)
    return np.asarray(res.estimate), np.asarray(var)


def split_rows(
    name: str, tau: Array, n: Array, v_int: Array, v_wt: Array, shared: Array, truth: float
) -> None:
    """Each combiner's coverage, RMSE and mean width with the weights of ``v_wt`` (shipped) and
    the interval of ``v_int`` (without the model-noise term), against both alone."""
    for method in COMBINERS:
        cells = []
        for label, (vi, vw, b) in {"shipped": (v_wt, v_wt, shared),
                                   "without": (v_int, v_int, shared),
                                   "split": (v_int, v_wt, shared),
                                   "split, no cross": (v_int, v_wt, None)}.items():  # fmt: skip
            e, cv = split_many(method, tau, n, vi, vw, b)
            e = e - truth
            good = np.isfinite(e) & np.isfinite(cv)
            cover = np.mean(np.abs(e[good]) <= Z95 * np.sqrt(cv[good]))
            rmse = math.sqrt(np.mean(e[good] ** 2))
            width = 2 * Z95 * np.mean(np.sqrt(cv[good]))
            cells.append(f"{label} {cover:.3f} rmse {rmse:.4f} w {width:.3f}")
        print(f"|| {name} | {method} | " + " | ".join(cells) + " |")


def coverage(
    groups: int, reps: int, bootstrap: bool = False, synth_sizes: Sequence[int] = (2000,),
    strong: bool | str = False, rule: bool = False, real: bool = True, binary: bool = False,
    weights: bool = False, crude_every: bool = False,
) -> None:  # fmt: skip
    """Each variance variant's coverage of the 95% interval per site and per combiner, and the reported
    variance over the realised mean squared error per site: Synth (``10 groups`` fresh data sets of
    each of ``synth_sizes`` per site, ``reps // 10`` draws each; ``strong``: :func:`synth5_strong`,
    ``"extreme"``: :func:`synth5_extreme`), IHDP and Lalonde (``groups`` random splits, ``reps`` draws
    each; not with ``real`` False), eps 1 per site. ``rule``: each study at the ``"auto"`` rule's
    ``K`` and model share for its smallest site (else ``K`` 5 and a quarter to the model). ``binary``:
    Synth's outcome binary (released in the general mode, with squares). ``weights``: also the
    model-noise term scaled by 1/4 and 1/2, and each combiner with the shipped variance as its
    weights and the variance without the term as its interval's (:func:`split_rows`).
    ``crude_every``: only the shipped release against the one whose correction read the crude
    difference over every band, as until stop 34 (:func:`every_band_rows`). The variants'
    own gap (``variance_variants``) is over every band, as they were measured."""
    est = estimator_of("propensity")

    def rows(name: str, make: Any, truth: float, n_groups: int, draws: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        taus, sizes, shares, var = [], [], [], {}  # type: ignore[var-annotated]
        every_parts: list[list[Array]] = [[], [], []]
        for _ in range(n_groups):
            sites = make(rng)
            bands, split = BANDS, None
            if rule:
                smallest = min(d.w.size for d in sites)
                opts = est.study_choice(None, 1, [StudySite(smallest, EPS, ())] * len(sites))
                bands, split = int(opts.options.bands), model_split(str(opts.options.model_share))
            per, alt = [], []  # type: ignore[var-annotated]
            for d in sites:
                plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=EPS,
                                       split=split, bands=bands)  # fmt: skip
                v = _vectors(plan, draw_many(plan, rng, draws))
                tau, res = variance_variants(plan, v)
                if bootstrap:
                    boot = bootstrapped_model_draw(plan, v, d.columns, rng)
                    res = {key: res[key] for key in ("shipped", "joint (band)")}
                    res["joint (band) + bootstrapped model draw"] = res["joint (band)"] + boot
                per.append((tau, res, _shared(plan.assemble(v).diagnostics)))
                if crude_every:
                    alt.append(every_band_crude(plan, v))
            if crude_every:
                for i, part in enumerate(zip(*alt, strict=True)):
                    every_parts[i].append(np.column_stack(part))
            taus.append(np.column_stack([t for t, _, _ in per]))
            shares.append(np.column_stack([b for _, _, b in per]))
            sizes.append(np.tile([float(d.w.size) for d in sites], (draws, 1)))
            for key in per[0][1]:
                var.setdefault(key, []).append(np.column_stack([r[key] for _, r, _ in per]))
        tau, n, shared = np.vstack(taus), np.vstack(sizes), np.vstack(shares)
        if crude_every:
            every_band_rows(name, (tau, np.vstack(var["shipped"]), shared),
                            tuple(np.vstack(p) for p in every_parts), n, truth)  # type: ignore[arg-type]  # fmt: skip
            return
        if weights:  # the model-noise term scaled: without it + c (shipped - without it)
            full, bare = np.vstack(var["shipped"]), np.vstack(var["shipped without rho^2 gap^2"])
            for c in ("1/4", "1/2"):
                var[f"shipped, rho^2 gap^2 x {c}"] = [bare + float(Fraction(c)) * (full - bare)]
        for key, parts in var.items():
            v = np.vstack(parts)
            site, comb, ratio, _, _ = coverage_cells(tau, v, n, shared, truth)
            if weights and key == "shipped without rho^2 gap^2" and "shipped" in var:
                split_rows(name, tau, n, v, np.vstack(var["shipped"]), shared, truth)
            print(_cover_line(name, key, site, comb, ratio))

    print(
        "\n| data (eps 1 per site) | variance | site coverage | combiners (inverse variance, "
        "MVAgg, random effects, all, largest) | range | reported / MSE per site |"
    )
    print("|---|---|---|---|---|---|")
    make = {True: synth5_strong, "extreme": synth5_extreme}.get(strong, synth5)
    for n in synth_sizes:
        for k in (2, 3):
            label = {True: " strong", "extreme": " extreme"}.get(strong, "")
            rows(f"Synth{label}{' binary' if binary else ''} {k} x {n:,}",
                 lambda rng, k=k, n=n: [make(rng, n, binary=binary) for _ in range(k)],
                 0.3, 10 * groups, max(reps // 10, 1), 100 + k)  # fmt: skip
    for name, data, truth in real_data() if real else ():
        for k in (2, 3):

            def split(rng: np.random.Generator, k: int = k, data: Data = data) -> list[Data]:
                return [data.take(p) for p in np.array_split(rng.permutation(data.w.size), k)]

            rows(f"{name} {k} sites", split, truth, groups, reps, 7 + k)


def gap_thirds(data_sets: int = 150, draws: int = 4) -> None:
    """The corrected estimate's error against the released ``gap = tau_crude - tau`` at one
    Synth site of 2,000 (docs/research/propensity.md, "Why a term built from the released gap
    cannot carry the model draw"): their correlation, and by thirds of ``gap`` the mean error,
    the MSE and two variances' means and coverage."""
    rng = np.random.default_rng(5)
    rows: list[Array] = []
    for _ in range(data_sets):
        d = synth5(rng, 2000)
        plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=EPS)
        v = _vectors(plan, draw_many(plan, rng, draws))
        tau, res = variance_variants(plan, v)
        sub = np.asarray(assemble_subclassification(plan_constants(plan), v).tau)
        cnt, sums = v["counts"], v["sums"]
        crude = sums[:, 1::2].sum(1) / cnt[:, 1::2].sum(1) - sums[:, 0::2].sum(1) / cnt[
            :, 0::2
        ].sum(1)
        rho = plan.assemble(v).diagnostics["model_noise_share"]
        rows.append(np.column_stack([tau - 0.3, crude - sub, res["joint (band) + model draw"],
                                     res["shipped"], rho]))  # fmt: skip
    err, gap, joint, shipped, rho = np.vstack(rows).T
    centred = err - err.mean()
    kurtosis = np.mean(centred**4) / np.mean(centred**2) ** 2 - 3.0
    q95 = np.quantile(np.abs(centred), 0.95) / centred.std()
    quartiles = np.quantile(rho, [0, 0.25, 0.5, 0.75, 1])
    mse = [np.mean(err[(rho >= lo) & (rho <= hi)] ** 2) for lo, hi in itertools.pairwise(quartiles)]
    print(f"\nexcess kurtosis of the error {kurtosis:.2f}, 95% quantile of |error| {q95:.2f} sd; "
          f"MSE by quartile of rho ({quartiles[0]:.2f}-{quartiles[-1]:.2f}): "
          f"{' '.join(f'{x:.5f}' for x in mse)}")  # fmt: skip
    print(f"correlation of the error with gap: {np.corrcoef(err, gap)[0, 1]:.2f}")
    print("| gap (thirds) | mean error | MSE | joint + model draw: variance, coverage | shipped |")
    print("|---|---|---|---|---|")
    q = np.quantile(gap, [0, 1 / 3, 2 / 3, 1])
    for lo, hi in itertools.pairwise(q):
        m = (gap >= lo) & (gap <= hi)
        cov = [np.mean(np.abs(err[m]) <= Z95 * np.sqrt(x[m])) for x in (joint, shipped)]
        print(f"| {lo:+.3f} to {hi:+.3f} | {err[m].mean():+.4f} | {np.mean(err[m] ** 2):.5f} | "
              f"{joint[m].mean():.5f}, {cov[0]:.3f} | {shipped[m].mean():.5f}, {cov[1]:.3f} |")  # fmt: skip


def _noiseless_cells(plan: MechanismPlan, v: dict[str, Array]) -> dict[str, Array]:
    """``v`` with the band cells at their values without noise (the drawn model's bands)."""
    (stage,) = plan.stages
    locs = stage.locs({"model": v["model"]})
    out = dict(v)
    for site in stage.sites:
        out[site.name] = np.asarray(locs[site.name], np.float64) * site.unit
    return _vectors(plan, out)


def _vectors(plan: MechanismPlan, v: dict[str, Array]) -> dict[str, Array]:
    """The drawn values with the band cells' counts and sums read from their histogram (as the
    release's assembly reads them; the histogram kept, so assembling them again is the same)."""
    return histogram_vectors(plan_constants(plan), v)


def _crude(v: dict[str, Array]) -> Array:
    cnt, sums = v["counts"], v["sums"]
    n_t, n_c = (np.maximum(cnt[:, a::2].sum(1), 1.0) for a in (1, 0))
    return np.asarray(sums[:, 1::2].sum(1) / n_t - sums[:, 0::2].sum(1) / n_c)


def captured_share(data_sets: int = 60, draws: int = 4) -> None:
    """The model draw's error against the confounding (docs/research/propensity.md, "The model
    draw's error is per covariate"): per release, the corrected estimate on the drawn model's
    bands without the cells' noise, less the same data's estimate on the exact model's bands
    (``e0``), over the crude difference less that reference (``c0``); its spread by quartile of
    the released noise share, on Synth and on Synth with the covariates' confounding aligned.
    One site of 2,000, eps 1."""
    print("\n| data (one site of 2,000, eps 1) | c0 | E[e0^2] | rho quartile: sd(e0 / c0), "
          "mean e0 / c0 |")  # fmt: skip
    print("|---|---|---|---|")
    for name, make in (("Synth", synth5), ("Synth, confounding aligned", synth5_aligned)):
        rng = np.random.default_rng(31)
        rows = []
        for _ in range(data_sets):
            d = make(rng, 2000)
            exact = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=10**6)
            ref = float(np.asarray(exact.assemble(
                _noiseless_cells(exact, draw_many(exact, rng, 1))).tau)[0])  # fmt: skip
            plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=EPS)
            v0 = _noiseless_cells(plan, draw_many(plan, rng, draws))
            out = plan.assemble(v0)
            rows.append(np.column_stack([np.asarray(out.tau) - ref, _crude(v0) - ref,
                                         out.diagnostics["model_noise_share"]]))  # fmt: skip
        e0, c0, rho = np.vstack(rows).T
        q = e0 / c0
        cuts = np.quantile(rho, [0, 0.25, 0.5, 0.75, 1])
        parts = []
        for lo, hi in itertools.pairwise(cuts):
            m = (rho >= lo) & (rho <= hi)
            parts.append(f"{lo:.2f}-{hi:.2f}: {q[m].std():.2f}, {q[m].mean():+.2f}")
        print(f"| {name} | {c0.mean():.4f} | {np.mean(e0**2):.5f} | {'; '.join(parts)} |")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--plan", action="store_true", help="dpate plan's accuracy only")
    ap.add_argument("--variance", action="store_true", help="the reported variance's terms only")
    ap.add_argument("--width", action="store_true", help="width / non-private width only")
    ap.add_argument("--auto", action="store_true", help="the shipped 'auto' K and model share")
    ap.add_argument("--eps", type=Fraction, default=Fraction(EPS), help="--auto: eps per site")
    ap.add_argument("--sizes", type=int, nargs="+", help="--auto: records per site")
    ap.add_argument("--others", type=int, nargs="*", help="--auto: sizes for the other rows")
    ap.add_argument("--sites", type=int, nargs="+", default=[2, 3], help="--auto: site counts")
    ap.add_argument("--counts", type=int, nargs=2, help="--auto: data sets, releases")
    ap.add_argument("--real", action="store_true", help="--auto: IHDP and Lalonde as well")
    ap.add_argument("--every", action="store_true", help="--auto: every combiner's coverage")
    ap.add_argument("--strong", action="store_true", help="--auto: Synth with 4x confounding")
    ap.add_argument("--binary", action="store_true", help="--auto: Synth's outcome binary")
    ap.add_argument("--binary-mode", action="store_true",
                    help="--auto --binary: the releases in their binary-outcome mode")  # fmt: skip
    ap.add_argument("--weighted", action="store_true",
                    help="--auto, --plan: with the weighted sum (weighted_sum = true)")  # fmt: skip
    ap.add_argument("--rows", nargs="+", metavar="K:SHARE",
                    help="--auto: these rows at the --others sizes, in place of the rule's")  # fmt: skip
    ap.add_argument("--coverage", action="store_true", help="variance variants' coverage only")
    ap.add_argument("--bootstrap", action="store_true", help="--coverage: the bootstrap variant")
    ap.add_argument("--rule", action="store_true", help="--coverage: the 'auto' rule's K, share")
    ap.add_argument("--extreme", action="store_true", help="--coverage: Synth, 3x confounding")
    ap.add_argument("--synth-only", action="store_true", help="--coverage: no IHDP, Lalonde")
    ap.add_argument("--every-band-crude", action="store_true",
                    help="--coverage: against the crude difference over every band")  # fmt: skip
    ap.add_argument("--weights", action="store_true",
                    help="--coverage: the scaled model-noise term, split weights")  # fmt: skip
    ap.add_argument("--gap", action="store_true", help="the error against the released gap")
    ap.add_argument("--captured", action="store_true", help="the model draw's error / confounding")
    args = ap.parse_args(argv)
    if args.width:
        width_ratios(args.quick)
        return
    if args.auto:
        auto_rule(args.quick, args.eps, args.sizes or AUTO_SIZES,
                  AUTO_OTHERS if args.others is None else args.others, args.sites,
                  tuple(args.counts) if args.counts else None, args.real, args.every,
                  [(int(r.split(":")[0]), r.split(":")[1]) for r in args.rows or ()],
                  args.strong, args.binary or args.binary_mode, args.binary_mode,
                  args.weighted)  # fmt: skip
        return
    if args.variance:
        variance_terms(3 if args.quick else 10)
        return
    if args.gap:
        gap_thirds()
        return
    if args.captured:
        captured_share()
        return
    if args.coverage:
        coverage(10 if args.quick else 30, 20, args.bootstrap, args.sizes or (2000,),
                 "extreme" if args.extreme else args.strong, args.rule, not args.synth_only,
                 args.binary, args.weights, args.every_band_crude)  # fmt: skip
        return
    if args.timing:
        timing()
        return
    if args.plan:
        plan_accuracy(100 if args.quick else 400, args.weighted)
        return
    reps = 60 if args.quick else 300
    run_synth(reps // 2 if args.quick else 200)
    for name, data, truth in real_data():
        run_fixed(name, data, truth, reps)
    timing()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
