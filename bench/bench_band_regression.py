"""The propensity release's band cells read by regression on the model's index (stop 54) against
its band estimate, on the same draws.

From the model's ``N x epsilon_model`` 750 (``REGRESSION_FROM``: every site of 1,500 records
and more at epsilon 1 under ``"auto"``) the release reads its band cells through a line per arm
across the bands, read for both arms at each band's own mean index
(``dpate_core/mechanisms/propensity/_band_regression.py``); below, and with the weighted sum,
it keeps the band estimate. This bench draws each site's releases once and assembles them both
ways (``PlanParts._replace(regressed=False)`` for the band estimate: the release until stop 53).

    cd bench && python bench_band_regression.py [--sizes 1500 2000 5000] [--sites 2 3]
        [--confounding mild strong extreme] [--sets 20] [--reps 25] [--real] [--binary]

Prints, per row: each site's bias, RMSE (the mean reported variance over the mean squared error
in brackets), coverage and mean width over the non-private 5-band interval's; then every
combiner's coverage (the lowest and highest of the five, the sites' shared sds as the server
adds them) and the inverse-variance combination's mean width over one site's non-private
interval's. docs/research/propensity.md, "Regression on the index within and across the bands",
has the tables.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import bench_propensity as bp
import numpy as np

from dpate_core.mechanisms.propensity import (
    model_share_split,
    plan_parts,
    plan_propensity,
)
from dpate_core.release import MechanismPlan, draw_many
from dpate_core.simulation import aggregate_many

Array = bp.Array


def releases(plan: MechanismPlan, v: dict[str, Array], regressed: bool) -> tuple[Array, ...]:
    """``(tau, variance, shared sd)`` of ``plan``'s releases of the draws ``v``: the release
    (``regressed``: as shipped) or its band estimate (the regression left out)."""
    parts = plan_parts(plan)
    out = (parts if regressed else parts._replace(regressed=False)).assemble(v)
    return (np.asarray(out.tau, np.float64), np.asarray(out.variance, np.float64),
            bp._shared(out.diagnostics))  # fmt: skip


def _split(n: int, binary: bool = False) -> tuple[str, ...]:
    """The ``"auto"`` rule's split at ``n x epsilon`` (epsilon 1): two fifths to the model below
    1,500, half from it (``binary``: the binary-outcome mode's parts)."""
    return model_share_split("2/5" if n < 1500 else "1/2", binary)


LABELS = ("band", "release")


class _Row:
    def __init__(self) -> None:
        self.err: dict[str, list[float]] = {k: [] for k in LABELS}
        self.var: dict[str, list[float]] = {k: [] for k in LABELS}
        self.cover: dict[str, list[bool]] = {k: [] for k in LABELS}
        self.width: dict[str, list[float]] = {k: [] for k in LABELS}
        self.comb: dict[str, dict[str, list[bool]]] = {k: {} for k in LABELS}
        self.comb_width: dict[str, list[float]] = {k: [] for k in LABELS}
        self.np_sd: list[float] = []

    def add(self, label: str, tau: Array, var: Array, truth: float) -> None:
        good = np.isfinite(tau) & np.isfinite(var)
        e = tau[good] - truth
        self.err[label].extend(e)
        self.var[label].extend(var[good])
        self.cover[label].extend(np.abs(e) <= bp.Z95 * np.sqrt(var[good]))
        self.width[label].extend(2 * bp.Z95 * np.sqrt(var[good]))

    def combine(
        self, label: str, tau: Array, n: Array, var: Array, sd: Array, truth: float
    ) -> None:
        bp.combiner_cover(tau, n, var, truth, self.comb[label], sd)
        r = aggregate_many("inverse_variance", tau, n, var, sd)
        cv = np.asarray(r.variance)
        self.comb_width[label].extend(2 * bp.Z95 * np.sqrt(cv[np.isfinite(cv)]))

    def show(self, name: str) -> None:
        np_width = 2 * bp.Z95 * float(np.mean(self.np_sd))
        cells = []
        for label in LABELS:
            e = np.asarray(self.err[label])
            mse = float(np.mean(e * e))
            covers = [float(np.mean(v)) for v in self.comb[label].values()]
            cells.append(
                f"{float(np.mean(e)):+.4f}, {math.sqrt(mse):.4f} "
                f"({float(np.mean(self.var[label])) / mse:.2f}), "
                f"{float(np.mean(self.cover[label])):.3f}, "
                f"{float(np.mean(self.width[label])) / np_width:.2f}; "
                f"{min(covers):.3f}-{max(covers):.3f}, "
                f"{float(np.mean(self.comb_width[label])) / np_width:.2f}"
            )
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def row(name: str, groups: Sequence[Sequence[bp.Data]], truth: float, reps: int, seed: int) -> None:
    """One table row over ``groups`` (each a study's sites)."""
    rng = np.random.default_rng(seed)
    tally = _Row()
    for sites in groups:
        per: dict[str, list[tuple[Array, ...]]] = {k: [] for k in LABELS}
        for d in sites:
            tally.np_sd.append(math.sqrt(bp.np_stratified(d)[1]))
            binary = bool(np.all((d.y == 0.0) | (d.y == 1.0)))
            plan = plan_propensity(d.w, d.y, d.z, d.columns, bound=1.0, epsilon=1,
                                   split=_split(d.w.size, binary), binary=binary)  # fmt: skip
            v = draw_many(plan, rng, reps)
            for label in LABELS:
                per[label].append(releases(plan, v, regressed=label == "release"))
                tally.add(label, *per[label][-1][:2], truth)
        n = np.array([float(d.w.size) for d in sites])
        for label, rows in per.items():
            tau, var, sd = (np.stack([r[i] for r in rows], axis=1) for i in range(3))
            tally.combine(label, tau, np.broadcast_to(n, tau.shape), var, sd, truth)
    tally.show(name)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1500, 2000, 5000])
    ap.add_argument("--sites", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--confounding", nargs="+", default=["mild", "strong", "extreme"])
    ap.add_argument("--sets", type=int, default=20, help="data sets per row")
    ap.add_argument("--reps", type=int, default=25, help="releases per data set")
    ap.add_argument("--real", action="store_true", help="IHDP and Lalonde split 2 and 3 ways")
    ap.add_argument("--binary", action="store_true", help="a binary outcome, in its own mode")
    args = ap.parse_args(argv)
    print("| data | band estimate: bias, RMSE (reported / MSE), coverage, width / np; every "
          "combiner's coverage, IV width / np | release: the same |")  # fmt: skip
    print("|---|---|---|")
    if args.real:
        for name, data, truth in bp.real_data():
            for j in args.sites:
                rng = np.random.default_rng(100 + j)
                groups = [[data.take(p) for p in np.array_split(rng.permutation(data.w.size), j)]
                          for _ in range(args.sets)]  # fmt: skip
                row(f"{name} {j} sites", groups, truth, args.reps, 7 + j)
        return
    for conf in args.confounding:
        for n in args.sizes:
            for j in args.sites:
                rng = np.random.default_rng(n + j)
                groups = [[bp.synth5(rng, n, confounding=conf, binary=args.binary) for _ in range(j)]
                          for _ in range(args.sets)]  # fmt: skip
                row(f"{conf} {j} x {n:,}", groups, 0.3, args.reps, n * j)


if __name__ == "__main__":
    main()
