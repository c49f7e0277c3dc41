"""A toy estimator, written as a plug-in would be: this one module and nothing edited elsewhere
(docs/how-to/extending.md follows it). Registering :data:`TOY` makes the study spec accept
``estimator = "toy"`` (with its option in ``[estimator_options]``) and every command handle it:
``dpate check``, ``dpate plan``, ``dpate run`` (the site releases it, the server checks its
reports with :func:`plausible`), ``dpate report``.

The mechanism: a difference in means with public arm sizes and one budget part. Each arm's sum
gets ``Lap(B / eps)`` (one record changes one arm's sum by at most ``B``: parallel composition,
``(eps, 0)``-DP); the variance it reports is the public noise variance plus, with the option
``sampling = "worst_case"``, the worst-case sampling variance ``B^2/4 (1/N_t + 1/N_c)`` (nothing
private in the variance). Not shipped: its sums are floats (a real mechanism noises exact integer
sums, ``dpate_core.statistics.cell_noise``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpate_core.inference import NoiseDraws
from dpate_core.mechanisms import (
    Estimator,
    PlanInputs,
    StatisticsInputs,
    clipped_tau_problems,
    noise_variance_problems,
)
from dpate_core.planning import PredictionInputs
from dpate_core.privacy import BudgetSplit, PrivacyParams
from dpate_core.release import MechanismPlan, NoiseSpec, Outputs, SiteEstimate


@dataclass(frozen=True)
class ToyOptions:
    """The toy's one option (``[estimator_options] sampling = ...``)."""

    sampling: Literal["worst_case", "none"] = field(
        default="worst_case",
        metadata={"doc": "report the worst-case sampling variance, or only the noise's"},
    )


def _variances(options: Any, bound: float, eps: float, n_t: float, n_c: float) -> tuple[float, ...]:
    scale = bound / eps
    noise = 2 * scale**2 * (1 / n_t**2 + 1 / n_c**2)
    sampling = bound**2 / 4 * (1 / n_t + 1 / n_c) if options.sampling == "worst_case" else 0.0
    return scale, noise, sampling


def _plan(
    sums: tuple[float, float], n_t: int, n_c: int, p: PlanInputs | StatisticsInputs
) -> MechanismPlan:
    total = PrivacyParams(p.privacy.epsilon, Fraction(0))
    options = p.options or ToyOptions()
    _, noise_var, sampling = _variances(options, p.bound, total.epsilon_float, n_t, n_c)

    def assemble(v: Mapping[str, Any]) -> Outputs:
        tau = v["sum_t"] / n_t - v["sum_c"] / n_c
        return Outputs(
            tau, sampling + noise_var, sampling + noise_var, {"noise_variance": noise_var}
        )

    return MechanismPlan(
        estimator="toy",
        n=n_t + n_c,
        n_treated=n_t,
        n_control=n_c,
        total=total,
        bound=p.bound,
        shares=BudgetSplit.of(p.split, 1),
        noise=(
            NoiseSpec("sum_t", sums[0], total.laplace_scale(p.bound), "laplace"),
            NoiseSpec("sum_c", sums[1], total.laplace_scale(p.bound), "laplace"),
        ),
        assemble=assemble,
    )


def plan(p: PlanInputs) -> MechanismPlan:
    w = np.asarray(p.w).astype(bool)
    y = np.asarray(p.y, dtype=np.float64)
    return _plan((float(y[w].sum()), float(y[~w].sum())), int(w.sum()), int((~w).sum()), p)


def plan_from_statistics(s: StatisticsInputs) -> MechanismPlan:
    cells = s.cells  # not centred: sums of Y on the grid, control then treated per stratum
    sums = cells.sums.astype(np.float64) * cells.sum_unit
    n = cells.counts
    return _plan(
        (float(sums[1::2].sum()), float(sums[0::2].sum())),
        int(n[1::2].sum()),
        int(n[0::2].sum()),
        s,
    )


def noise_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    n_t, n_c = float(site.n_treated or 1), float(site.n_control or 1)
    b = math.sqrt(site.noise_variance / 2 / (1 / n_t**2 + 1 / n_c**2))
    lap = rng.laplace(0.0, b, (reps, 2))
    return NoiseDraws(lap[:, 0] / n_t - lap[:, 1] / n_c, np.full(reps, site.variance))


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
    n = inp.design.n
    n_t = min(max(round(inp.assumptions.arm_share * n), 1), n - 1)
    eps = PrivacyParams(inp.design.epsilon).epsilon_float
    _, noise, sampling = _variances(inp.options, inp.bound, eps, n_t, n - n_t)
    sd = inp.assumptions.sd(inp.bound)
    return sd * sd * (1 / n_t + 1 / (n - n_t)), noise, noise + sampling


def plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    if e.n_treated is None or e.n_control is None:
        return ["n_treated/n_control are missing: the toy publishes its public arm sizes"]
    _, noise, sampling = _variances(
        options, e.bound, e.privacy.epsilon_float, e.n_treated, e.n_control
    )
    out = clipped_tau_problems(e) + noise_variance_problems(
        noise, e, "2 (B/eps)^2 (1/N_t^2 + 1/N_c^2)"
    )
    if not math.isclose(e.variance, noise + sampling, rel_tol=1e-9):
        out.append(f"variance ({e.variance}) is not the toy's public variance {noise + sampling}")
    return out


TOY = Estimator(
    name="toy",
    label="Toy difference in means",
    estimand="the difference in arm means (a toy)",
    parts=("arm sums",),
    pure=True,
    designs=("randomized", "observational"),
    options=ToyOptions,
    plan=plan,
    plan_from_statistics=plan_from_statistics,
    centred_cells=False,
    stratified=False,
    noise_model=noise_model,
    predict=predict,
    plausible=plausible,
    publishes_arm_sizes=lambda options: True,
)
