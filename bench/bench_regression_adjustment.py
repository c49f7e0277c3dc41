"""A DP regression adjustment (main effects, sufficient-statistics perturbation) against the adjusted
estimator. Simulation only (numpy noise); prints tables, asserts
nothing. docs/research/regression-adjustment.md has the design and the numbers.

The regression: ``Y = alpha + tau W + sum_k (main effects of covariate k) + error``, each covariate
one-hot (levels minus one columns) or, where ordinal, linear in its level scaled to ``[0, 1]``.
Each record gives a row ``v = (1, W, z, Y)``; the upper triangle of ``M = sum_i v_i v_i^T`` except
its ``(1, 1)`` entry (``N``, public) is released with Laplace noise of scale ``Delta / eps``, where
``Delta = (sum_a r_a)^2 + sum_a r_a^2 - 2`` over the public per-coordinate radii ``r`` (constant 1;
one radius per covariate, its one-hot block counting once), a replace-one bound
(:func:`ssp_sensitivity`). ``tau`` solves the noisy normal equations (eigenvalues of the noisy Gram
matrix floored at :func:`eig_floor` when needed); its variance is the OLS variance from the noisy
statistics plus the noise's, by the delta method. Two codings: "ssp" as stated (``W, z in [0, 1]``,
``Y in [0, B]``) and "ssp-c" with ``W``, ordinal and binary columns and ``Y`` centred at the middle
of their public ranges (the same ``tau``; radii halved, so ``Delta`` about 3 times smaller).

Compared with the shipped adjusted estimator (``"auto"``, ``"fixed_effects"``,
``"subclassification"``) on the product strata of the same covariates, at the same pure eps.

Designs: (a) Synth (one ordinal covariate, effect 0.5: the regression is correctly specified);
(b) IHDP and Lalonde with several covariates (whole data and a seeded third; error against each
estimator's own non-private value, and the non-private values side by side); (c) Synth variants
with an effect that grows with the covariate ("het") and with a nonlinear baseline ("curve");
(d) Synth-like data with six covariates whose main effects are exactly linear.

Run: ``python bench/bench_regression_adjustment.py`` (about 40 s; ``--quick`` for fewer
draws). Real data through ``DPATE_DATA_DIR`` (skipped when absent).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

from dpate.data.datasets import DataUnavailableError, data_dir, load_ihdp, load_lalonde
from dpate_core.mechanisms.adjusted import (
    DEFAULT_SPLIT,
    plan_adjusted_from_statistics,
    resolve_weighting,
)
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics, matching_statistics
from dpate_core.synth import split_equal, synth

Array = npt.NDArray[np.float64]
WEIGHTINGS = ("auto", "fixed_effects", "subclassification")
Z95 = 1.959963984540054


# --------------------------------------------------------------------------------------------
# Covariates: levels, product strata, regression columns


@dataclass(frozen=True)
class Covariate:
    """One covariate: integer levels ``0 .. levels-1``; ``ordinal`` enters the regression as
    ``level / (levels - 1)`` (one column), otherwise one-hot (``levels - 1`` columns)."""

    name: str
    values: npt.NDArray[np.int64]
    levels: int
    ordinal: bool


def strata_ids(covs: Sequence[Covariate]) -> tuple[npt.NDArray[np.int64], int]:
    """Mixed-radix id of the product of the covariates' levels, and the product's size."""
    x = np.zeros(covs[0].values.size, dtype=np.int64)
    size = 1
    for c in covs:
        x = x * c.levels + c.values
        size *= c.levels
    return x, size


def columns(covs: Sequence[Covariate], centre: bool) -> tuple[Array, list[float]]:
    """The regression's covariate columns and one public radius per covariate (the largest
    ``|z|`` it can take; a one-hot block counts once because only one of its entries is 1).
    ``centre``: ordinal and binary columns minus 1/2 (radius 1/2); one-hot blocks of three or more
    levels stay 0/1 (centring them would lose the one-hot structure)."""
    cols, radii = [], []
    for c in covs:
        if c.ordinal or c.levels == 2:
            z = c.values / (c.levels - 1.0)
            cols.append((z - 0.5 if centre else z)[:, None])
            radii.append(0.5 if centre else 1.0)
        else:
            cols.append((c.values[:, None] == np.arange(1, c.levels)[None, :]).astype(np.float64))
            radii.append(1.0)
    return np.hstack(cols), radii


# --------------------------------------------------------------------------------------------
# The regression by sufficient-statistics perturbation (SSP)


def ssp_sensitivity(radii: Sequence[float]) -> float:
    """L1 sensitivity (replace-one) of the upper triangle of ``M = sum v v^T`` without ``M_11``.

    ``radii``: the public bound of ``|v_a|`` per coordinate, the constant's 1 first, one entry per
    one-hot block. Replacing ``v`` by ``v'`` changes the released entries by
    ``sum_{a<=b, (a,b) != (1,1)} |v_a v_b - v'_a v'_b| <= F(v) + F(v')`` with
    ``F(v) = sum_{a<=b, (a,b) != (1,1)} |v_a| |v_b|``. ``F`` grows with every ``|v_a|``, and inside
    a one-hot block the products of two different entries are 0 and one entry is at most 1, so
    ``F <= ((sum r)^2 + sum r^2) / 2 - 1`` and ``Delta = (sum r)^2 + sum r^2 - 2``. Within a
    factor 2 of the true sensitivity for the uncentred coding (``v`` at every radius against
    ``v' = (1, 0, ..., 0)`` changes the entries by ``F(v)``); :func:`check_sensitivity`."""
    r = np.asarray(radii, dtype=np.float64)
    return float(r.sum() ** 2 + (r * r).sum() - 2.0)


def check_sensitivity() -> None:
    """The largest change of the released entries over pairs of rows on a grid (``W`` in {0, 1},
    ``z`` and ``Y`` in steps of 1/20; ``B = 1``) for Synth's design, against the claimed bound."""
    grid = np.linspace(0.0, 1.0, 21)
    iu = np.triu_indices(4)
    print("sensitivity of the released entries, Synth's design (1, W, z, Y), B = 1:")
    for centre in (False, True):
        h = 0.5 if centre else 0.0
        rows = np.array([[1.0, w - h, z - h, y - h] for w in (0, 1) for z in grid for y in grid])
        prod = (rows[:, iu[0]] * rows[:, iu[1]])[:, 1:]  # without the exact (1, 1) entry
        worst = max(
            float(np.abs(prod[i : i + 200, None, :] - prod[None, :, :]).sum(-1).max())
            for i in range(0, len(prod), 200)
        )
        claimed = ssp_sensitivity([1.0, *([0.5] * 3 if centre else [1.0] * 3)])
        name = "centred (ssp-c)" if centre else "as stated (ssp)"
        print(f"  {name:<16} largest change on the grid {worst:.4f}, bound {claimed:.4f}")


def eig_floor(scale: float, dim: int) -> float:
    """Smallest eigenvalue allowed for the noisy Gram matrix of the ``dim`` regressors: the sd of
    one noisy entry times ``sqrt(dim)`` (about half the noise matrix's spectral norm). Public."""
    return float(np.sqrt(2.0) * scale * np.sqrt(dim))


@dataclass(frozen=True)
class SSPDesign:
    """Rows ``v = (1, W, z, Y)`` of one data set (private, simulation only), the public scale."""

    v: Array
    n: int
    dim: int  # regressors: 1, W, z
    scale: float
    bound: float


def ssp_design(
    w: npt.ArrayLike, y: npt.ArrayLike, z: Array, radii_z: Sequence[float], *, bound: float,
    epsilon: float, centre: bool,
) -> SSPDesign:  # fmt: skip
    w = np.asarray(w, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    half = 0.5 if centre else 0.0
    v = np.column_stack([np.ones_like(w), w - half, z, y - half * bound])
    r_w, r_y = (0.5, bound / 2.0) if centre else (1.0, bound)
    delta = ssp_sensitivity([1.0, r_w, *radii_z, r_y])
    return SSPDesign(v, w.size, v.shape[1] - 1, delta / epsilon, bound)


def ssp_release(design: SSPDesign, rng: np.random.Generator, reps: int) -> Array:
    """``reps`` noisy copies of ``M`` (symmetric; ``M_11 = N`` exact), shape (reps, d+1, d+1)."""
    m = design.v.T @ design.v
    k = m.shape[0]
    iu = np.triu_indices(k)
    e = np.zeros((reps, k, k))
    e[:, iu[0], iu[1]] = rng.laplace(0.0, design.scale, (reps, iu[0].size))
    e[:, 0, 0] = 0.0
    e = e + np.triu(e, 1).transpose(0, 2, 1)
    return m[None] + e


def ssp_estimate(design: SSPDesign, mm: Array) -> dict[str, Array]:
    """``tau`` (W's coefficient), its variance (OLS from the noisy statistics plus the noise's by
    the delta method) and whether the eigenvalue floor was needed, for each noisy ``M``."""
    d, n, bound = design.dim, design.n, design.bound
    a, b, yy = mm[:, :d, :d], mm[:, :d, d], mm[:, d, d]
    vals, vecs = np.linalg.eigh(a)
    floor = eig_floor(design.scale, d)
    floored = vals[:, 0] < floor
    inv = (vecs / np.maximum(vals, floor)[:, None, :]) @ vecs.transpose(0, 2, 1)
    beta = np.einsum("rij,rj->ri", inv, b)
    tau = np.clip(beta[:, 1], -bound, bound)
    rss = yy - 2.0 * np.einsum("ri,ri->r", beta, b) + np.einsum("ri,rij,rj->r", beta, a, beta)
    sigma2 = np.clip(rss / max(n - d, 1), 0.0, bound * bound / 4.0)
    sampling = sigma2 * inv[:, 1, 1]
    # delta method: d beta = A^-1 (e_b - E beta); Var(e_b) = v I, Cov((E beta)_i, (E beta)_k) =
    # v (|beta|^2 [i = k] + beta_i beta_k [i != k]), without the exact (1, 1) entry
    v_e = 2.0 * design.scale**2
    sq = np.einsum("ri,ri->r", beta, beta)
    cov = v_e * (beta[:, :, None] * beta[:, None, :])
    idx = np.arange(d)
    cov[:, idx, idx] = v_e * (sq[:, None] + 1.0)  # |beta|^2 from E beta, 1 from e_b
    cov[:, 0, 0] -= v_e * beta[:, 0] ** 2
    row = inv[:, 1, :]
    noise = np.einsum("ri,rij,rj->r", row, cov, row)
    return {"tau": tau, "variance": sampling + noise, "floored": floored.astype(np.float64)}


def ssp_nonprivate(design: SSPDesign) -> float:
    m = design.v.T @ design.v
    d = design.dim
    return float(np.linalg.lstsq(m[:d, :d], m[:d, d], rcond=None)[0][1])


# --------------------------------------------------------------------------------------------
# The shipped adjusted estimator and the non-private stratum estimands


def adjusted_draws(
    w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike, size: int, *, bound: float,
    epsilon: float, weighting: str, rng: np.random.Generator, reps: int,
) -> dict[str, Array]:  # fmt: skip
    st = cell_statistics(w, y, x, domain_size=size, bound=bound)
    plan = plan_adjusted_from_statistics(st, epsilon=epsilon, weighting=weighting)
    out = plan.assemble(draw_many(plan, rng, reps))
    return {"tau": np.asarray(out.tau), "variance": np.asarray(out.variance)}


def stratum_estimands(
    w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike, size: int
) -> dict[str, float]:
    """Non-private subclassification (strata with both arms, weights ``n_x / N``), fixed effects
    (weights ``n_xt n_xc``) and Algorithm 1."""
    w, y, x = np.asarray(w), np.asarray(y, dtype=np.float64), np.asarray(x)
    cells = 2 * x + w
    cnt = np.bincount(cells, minlength=2 * size).astype(np.float64)
    sm = np.bincount(cells, weights=y, minlength=2 * size)
    nc, nt, sc, st = cnt[0::2], cnt[1::2], sm[0::2], sm[1::2]
    both = (nt > 0) & (nc > 0)
    d = np.where(both, st / np.where(both, nt, 1) - sc / np.where(both, nc, 1), 0.0)
    sub = float(np.sum((nt + nc) * d) / w.size)
    fe = float(np.sum(nt * nc * d) / np.sum(nt * nc))
    alg1 = float(matching_statistics(w, y, x, size).tau)
    return {"subclassification": sub, "fixed_effects": fe, "algorithm 1": alg1}


# --------------------------------------------------------------------------------------------
# One cell of the comparison


@dataclass(frozen=True)
class Data:
    w: npt.NDArray[np.int8]
    y: Array
    covs: tuple[Covariate, ...]
    bound: float = 1.0


def draws(data: Data, eps: float, rng: np.random.Generator, reps: int) -> dict[str, dict]:
    """Every estimator's ``reps`` releases on one data set, with its non-private value."""
    x, size = strata_ids(data.covs)
    out: dict[str, dict] = {}
    for centre, name in ((False, "ssp"), (True, "ssp-c")):
        z, radii = columns(data.covs, centre)
        des = ssp_design(data.w, data.y, z, radii, bound=data.bound, epsilon=eps, centre=centre)
        res = ssp_estimate(des, ssp_release(des, rng, reps))
        out[name] = {**res, "np": ssp_nonprivate(des), "scale": des.scale}
    est = stratum_estimands(data.w, data.y, x, size)
    count_scale = 2.0 / (eps * float(Fraction(DEFAULT_SPLIT[0])))  # the counts' Laplace scale
    sum_eps = eps * float(Fraction(DEFAULT_SPLIT[1]))
    auto = resolve_weighting("auto", data.w.size, size, count_scale, sum_eps)
    for wt in WEIGHTINGS:
        res = adjusted_draws(data.w, data.y, x, size, bound=data.bound, epsilon=eps,
                             weighting=wt, rng=rng, reps=reps)  # fmt: skip
        target = est[auto if wt == "auto" else wt]
        label = f"auto ({'fe' if auto == 'fixed_effects' else 'sub'})" if wt == "auto" else wt
        out[label] = {**res, "np": target}
    out["_estimands"] = {**est, "regression": out["ssp"]["np"], "strata": size}
    return out


def summary(res: dict, truth: float | None, other: float | None) -> str:
    """Bias, noise sd and RMSE against ``truth`` (each estimator's own non-private value when
    None), coverage of ``tau +- 1.96 sd`` for the same, the floored fraction, then the bias,
    RMSE and coverage against ``other`` (own non-private value when None)."""
    t, var = np.asarray(res["tau"]), np.asarray(res["variance"])

    def against(ref: float) -> tuple[float, float, float]:
        cover = float(np.mean(np.abs(t - ref) <= Z95 * np.sqrt(var)))
        return float(t.mean() - ref), float(np.sqrt(np.mean((t - ref) ** 2))), cover

    bias, rmse, cover = against(res["np"] if truth is None else truth)
    text = f"bias {bias:+.4f}  sd {t.std():.4f}  rmse {rmse:.4f}  cover {cover:.3f}"
    text += f"  floored {np.mean(res['floored']):.2f}" if "floored" in res else " " * 15
    bias2, rmse2, cover2 = against(res["np"] if other is None else other)
    return text + f"  | bias {bias2:+.4f}  rmse {rmse2:.4f}  cover {cover2:.3f}"


def pooled(runs: list[dict], key: str) -> dict:
    """One estimator's draws pooled over data draws (the non-private value: their mean)."""
    return {
        "tau": np.concatenate([r[key]["tau"] for r in runs]),
        "variance": np.concatenate([r[key]["variance"] for r in runs]),
        "np": float(np.mean([r[key]["np"] for r in runs])),
        **(
            {"floored": np.concatenate([r[key]["floored"] for r in runs])}
            if "floored" in runs[0][key]
            else {}
        ),
    }


def report(runs: list[dict], truth: float | None, other: float | None) -> None:
    est = runs[0]["_estimands"]
    means = {k: np.mean([r["_estimands"][k] for r in runs]) for k in est}
    print(
        f"    non-private: regression {means['regression']:.4f}, subclassification "
        f"{means['subclassification']:.4f}, fixed effects {means['fixed_effects']:.4f}, "
        f"Algorithm 1 {means['algorithm 1']:.4f}  (|X| = {int(est['strata'])}; noise scale "
        f"ssp {runs[0]['ssp']['scale']:.1f}, ssp-c {runs[0]['ssp-c']['scale']:.1f})"
    )
    for key in runs[0]:
        if not key.startswith("_"):
            print(f"    {key:<20} {summary(pooled(runs, key), truth, other)}")


# --------------------------------------------------------------------------------------------
# Designs


def synth_data(n: int, size: int, a: float, seed: int) -> Data:
    d = synth(n, size, a=a, seed=seed)
    return Data(d.w, d.y, (Covariate("x", d.x, size, True),), d.bound)


def synth_variant(n: int, size: int, kind: str, seed: int) -> Data:
    """Synth-like data with a true ATE of 0.5 (population) that a main-effects model gets wrong:
    ``"het"``: effect ``0.2 + 0.6 x`` and treatment probability ``0.05 + 0.5 x`` (regression and
    fixed effects weigh the larger effects at large ``x`` more); ``"curve"``: effect 0.5 but
    baseline ``0.4 x^2`` with treatment probability ``0.1 + 0.8 x^2`` (linear ``x`` leaves
    confounding)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, size, n)
    xv = k / (size - 1.0)
    e = rng.uniform(0.0, 0.1, n)
    if kind == "het":
        w = (rng.random(n) < 0.05 + 0.5 * xv).astype(np.int8)
        y = 0.1 * xv + (0.2 + 0.6 * xv) * w + e
    else:
        w = (rng.random(n) < 0.1 + 0.8 * xv**2).astype(np.int8)
        y = 0.4 * xv**2 + 0.5 * w + e
    return Data(w, np.minimum(y, 1.0), (Covariate("x", k, size, True),))


def synth_multi(n: int, seed: int) -> Data:
    """Several covariates, main effects exactly linear, effect 0.5: an ordinal ``x0`` with 10
    levels and five binary ``b1..b5`` (320 product strata); treatment probability
    ``sigmoid(x0v - 1/2 + (b1 + b2 - b3) / 2)``; ``Y = 0.1 x0v + 0.05 (b1 + ... + b5) + 0.5 W + e``."""
    rng = np.random.default_rng(seed)
    x0 = rng.integers(0, 10, n)
    bs = rng.integers(0, 2, (5, n))
    x0v = x0 / 9.0
    p = 1.0 / (1.0 + np.exp(-(x0v - 0.5 + 0.5 * (bs[0] + bs[1] - bs[2]))))
    w = (rng.random(n) < p).astype(np.int8)
    y = 0.1 * x0v + 0.05 * bs.sum(axis=0) + 0.5 * w + rng.uniform(0.0, 0.1, n)
    covs = (Covariate("x0", x0, 10, True),
            *(Covariate(f"b{k + 1}", bs[k], 2, False) for k in range(5)))  # fmt: skip
    return Data(w, np.minimum(y, 1.0), covs)


def ihdp_data() -> tuple[Data, float]:
    """IHDP replication 1: ``x4`` (4 ordinal levels, as the loader cuts it), ``x7``, ``x13`` (the
    experiments' covariates) plus the binary ``x9``, ``x10``, ``x11``: 128 product strata for 747
    records. Also the rescaled true ATE ``mean(mu1 - mu0) / 20`` per record."""
    d = load_ihdp(1)
    raw = pd.read_csv(data_dir() / "ihdp" / "ihdp_npci_1.csv", header=None)
    covs = [
        Covariate("x4", d.x // 4, 4, True),
        Covariate("x7", (d.x // 2) % 2, 2, False),
        Covariate("x13", d.x % 2, 2, False),
    ]
    for name in ("x9", "x10", "x11"):
        v = raw[5 + int(name[1:]) - 1].to_numpy().astype(np.int64)
        covs.append(Covariate(name, v, 2, False))
    ite = (raw[4] - raw[3]).to_numpy() / 20.0
    return Data(d.w, d.y, tuple(covs)), ite


def lalonde_data() -> Data:
    """Lalonde: age in six bins (17-19, 20-24, 25-29, 30-34, 35-44, 45-55; ordinal), schooling in
    four (<= 8, 9-11, 12, >= 13 years; ordinal), ``black``, ``marr``, ``nodeg``: 192 product
    strata (``nodeg`` is schooling < 12, so half are empty by construction) for 722 records."""
    d = load_lalonde()
    raw = pd.read_csv(data_dir() / "lalonde" / "nswdemo.csv")
    age = d.x + 17
    age_bin = np.searchsorted(np.array([20, 25, 30, 35, 45]), age, side="right")
    educ_bin = np.searchsorted(np.array([9, 12, 13]), raw["educ"].to_numpy(), side="right")
    covs = (
        Covariate("age", age_bin.astype(np.int64), 6, True),
        Covariate("educ", educ_bin.astype(np.int64), 4, True),
        *(Covariate(c, raw[c].to_numpy().astype(np.int64), 2, False)
          for c in ("black", "marr", "nodeg")),
    )  # fmt: skip
    return Data(d.w, d.y, covs)


def subset(data: Data, idx: npt.NDArray[np.intp]) -> Data:
    covs = tuple(Covariate(c.name, c.values[idx], c.levels, c.ordinal) for c in data.covs)
    return Data(data.w[idx], data.y[idx], covs, data.bound)


def run_cells(
    title: str, make: Callable[[int], Data], seeds: Sequence[int], eps_list: Sequence[float],
    reps: int,
) -> None:  # fmt: skip
    """Synth cells: against the true 0.5, then (after ``|``) against each estimator's own
    non-private value averaged over the data draws."""
    for eps in eps_list:
        print(f"  {title}, eps = {eps:g}")
        runs = [draws(make(s), eps, np.random.default_rng(1000 + s), reps) for s in seeds]
        report(runs, 0.5, None)


def run_real(quick: bool, reps: int) -> None:
    """IHDP and Lalonde: against each estimator's own non-private value (noise only), then against
    a common reference: IHDP's true ATE of the records used, Lalonde's Algorithm 1 estimate."""
    try:
        ihdp, ite = ihdp_data()
        lal = lalonde_data()
    except DataUnavailableError as err:
        print(f"(b) skipped: {err}")
        return
    print(f"(b) real data: against each estimator's own non-private value (noise only; "
          f"4 x {reps} releases) | against IHDP's true ATE, Lalonde's Algorithm 1")  # fmt: skip
    third_i = split_equal(ihdp.w.size, 3, 7)[0]
    third_l = split_equal(lal.w.size, 3, 7)[0]
    cells = (("IHDP", ihdp, ite), ("IHDP third", subset(ihdp, third_i), ite[third_i]),
             ("Lalonde", lal, None), ("Lalonde third", subset(lal, third_l), None))  # fmt: skip
    for name, data, cell_ite in cells:
        for eps in (1.0,) if quick else (1.0, 5.0):
            runs = [draws(data, eps, np.random.default_rng(2000 + k), reps) for k in range(4)]
            ref = (float(cell_ite.mean()) if cell_ite is not None
                   else runs[0]["_estimands"]["algorithm 1"])  # fmt: skip
            print(f"  {name} (N = {data.w.size}), eps = {eps:g}, reference {ref:.4f}")
            report(runs, None, ref)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer draws and cells")
    parser.add_argument("--only", choices=("synth", "real", "variants", "multi"), default=None)
    parser.add_argument("--check-sensitivity", action="store_true", help="grid check of Delta")
    args = parser.parse_args()
    if args.check_sensitivity:
        check_sensitivity()
        return
    reps, seeds = (200, (1,)) if args.quick else (1000, (1, 2, 3, 4))
    sizes = (1000,) if args.quick else (100, 1000)
    n = 10_000
    if args.only in (None, "synth"):
        print(f"(a) Synth, N = {n}: against the true 0.5 | against each estimator's own "
              f"non-private value ({len(seeds)} data draws x {reps} releases)")  # fmt: skip
        for size in sizes:
            for a in (0.02, -0.83):
                run_cells(f"|X| = {size}, a = {a:+.2f}",
                          lambda s, size=size, a=a: synth_data(n, size, a, s), seeds,
                          (1.0,) if args.quick else (0.5, 1.0, 5.0), reps)  # fmt: skip
    if args.only in (None, "real"):
        run_real(args.quick, reps)
    if args.only in (None, "variants"):
        print(f"(c) Synth variants, N = {n}: against the population ATE 0.5 | against each "
              f"estimator's own non-private value")  # fmt: skip
        for kind in ("het", "curve"):
            for size in sizes:
                run_cells(f"{kind}, |X| = {size}",
                          lambda s, size=size, kind=kind: synth_variant(n, size, kind, s),
                          seeds, (1.0,) if args.quick else (1.0, 5.0), reps)  # fmt: skip
    if args.only in (None, "multi"):
        print("(d) Synth with six covariates (320 product strata), effect 0.5: against 0.5 | "
              "against each estimator's own non-private value")  # fmt: skip
        for size_n in (10_000,) if args.quick else (10_000, 100_000):
            run_cells(f"N = {size_n}", lambda s, size_n=size_n: synth_multi(size_n, s), seeds,
                      (1.0,) if args.quick else (1.0, 5.0), reps)  # fmt: skip


if __name__ == "__main__":
    main()
