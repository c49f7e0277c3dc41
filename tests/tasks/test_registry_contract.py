"""The contract every registered estimator and aggregator meets, end to end without Prefect:
plan -> simulated release -> published report round trip (dpate.schemas.report) -> aggregation (and its
bootstrap interval) -> simulation of the same plans with the vectorised combiner.

A toy estimator and a toy aggregator, defined only here, register and pass it: adding one is one
module each (its plan or combiner, its registry entry; for an estimator also its noise model for
``dpate_core.inference``), with no edit anywhere else (docs/extending.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpate_core.aggregation as aggregators
from dpate.schemas.report import SiteReport, read_report
from dpate.schemas.spec import StudySpec
from dpate_core.aggregation import Aggregator, Combination, Rows, aggregate
from dpate_core.inference import NOISE_MODELS, NoiseDraws, PublicSite, combined_bootstrap_interval
from dpate_core.mechanisms import ESTIMATORS, Estimator, PlanInputs
from dpate_core.privacy import BudgetSplit, PrivacyParams
from dpate_core.release import MechanismPlan, NoiseSpec, Outputs, draw_once
from dpate_core.simulation import aggregate_many, simulate_sites

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
LEVELS = 6
SIZES = (500, 300, 120)


def spec_for(estimator: str, aggregator: str) -> StudySpec:
    """A three-site study of ``estimator`` combined by ``aggregator``, from the registry alone."""
    est = ESTIMATORS[estimator]
    d: dict[str, Any] = {
        "study_id": "contract",
        "design": "observational" if "observational" in est.designs else est.designs[0],
        "estimator": estimator,
        "aggregator": aggregator,
        "reports": "file:///tmp/unused",
        "treatment": {"column": "w"},
        "outcome": {"column": "y", "bound": 1.0},
        "covariates": [
            {"kind": "categorical", "column": "x", "levels": [str(k) for k in range(LEVELS)]}
        ],
        "sites": [
            {
                "id": f"s{j}",
                "data": f"s{j}.csv",
                "epsilon": "1",
                "delta": "1e-5",
                "lifetime_cap": {"epsilon": "3", "delta": "1e-4"},
            }
            for j in range(len(SIZES))
        ],
    }
    if est.private_arm_parts is not None:  # the arm sizes' status must be said explicitly
        d["arm_sizes_public"] = True
    return StudySpec.from_dict(d)


def run_contract(estimator: str, aggregator: str, seed: int = 0) -> None:
    spec = spec_for(estimator, aggregator)
    rng = np.random.default_rng(seed)
    plans: list[MechanismPlan] = []
    released = []
    for site, n in zip(spec.sites, SIZES, strict=True):
        x = rng.integers(0, LEVELS, n)
        w = (rng.random(n) < 0.3 + 0.05 * x).astype(np.int64)
        y = np.clip(0.2 + 0.05 * x + 0.3 * w + rng.normal(0, 0.1, n), 0.0, 1.0)
        plan = spec.estimator_info.plan(
            PlanInputs(
                w=w,
                y=y,
                x=x,
                domain_size=spec.domain_size,
                bound=spec.outcome.bound,
                privacy=site.privacy,
                split=spec.budget_split(site.id).shares,
                arm_sizes_public=spec.arm_sizes_public,
            )
        )
        # the plan is the registry's mechanism, spending what the spec (and the ledger) charge
        assert plan.estimator == estimator and plan.n == n
        assert plan.total == spec.release_cost(site.id)
        estimate = plan.estimate(draw_once(plan, rng))  # simulation noise: a test, not a release
        report = SiteReport.from_estimate(estimate, spec=spec, site_id=site.id, created_at=T0)
        back = read_report(report.to_json_bytes(), spec, site_id=site.id)
        assert back.to_json_bytes() == report.to_json_bytes()
        assert back.to_estimate().public_fields() == estimate.public_fields()
        plans.append(plan)
        released.append(back.estimate)

    tau = [e.tau for e in released]
    n_j = [e.n for e in released]
    var = [e.variance for e in released]
    res = aggregate(aggregator, tau, n_j, var)
    assert res.method == aggregator and res.used and set(res.used) <= {0, 1, 2}
    assert math.isfinite(res.estimate) and res.variance > 0
    assert math.fsum(res.weights) == pytest.approx(1.0)
    interval = combined_bootstrap_interval(released, aggregator, draws=200, seed=1)
    assert interval.lo <= interval.hi

    tau_m, n_m, var_m = simulate_sites(plans, rng, 40)
    many = aggregate_many(aggregator, tau_m, n_m, var_m)
    assert many.method == aggregator and many.estimate.shape == (40,)
    one = aggregate(aggregator, tau_m[0], n_m, var_m[0])
    np.testing.assert_allclose(many.estimate[0], one.estimate, rtol=1e-9, atol=1e-12)
    assert tuple(np.flatnonzero(many.used[0])) == one.used


@pytest.mark.parametrize("aggregator", sorted(aggregators.AGGREGATORS))
@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_every_registered_estimator_and_aggregator(estimator, aggregator):
    run_contract(estimator, aggregator)


# ---------------------------------------------------------------------------------------------
# A toy estimator: one module's worth (plan + registry entry + noise model), nothing else edited


def plan_toy(p: PlanInputs) -> MechanismPlan:
    """Difference in means with public arm sizes, one budget part: Laplace(B / eps) on each arm's
    sum (one record changes one sum by at most B), and a public worst-case sampling variance
    ``B^2 / 4 (1/N_t + 1/N_c)`` (nothing private in the variance)."""
    w = np.asarray(p.w).astype(bool)
    y = np.asarray(p.y, dtype=np.float64)
    n_t, n_c = int(w.sum()), int((~w).sum())
    shares = BudgetSplit.of(p.split, 1)
    total = PrivacyParams(p.privacy.epsilon, Fraction(0))
    scale = float(Fraction(p.bound) / total.epsilon)
    sampling = p.bound**2 / 4 * (1 / n_t + 1 / n_c)
    noise_var = 2 * scale**2 * (1 / n_t**2 + 1 / n_c**2)

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
        shares=shares,
        noise=(
            NoiseSpec("sum_t", float(y[w].sum()), scale, "laplace"),
            NoiseSpec("sum_c", float(y[~w].sum()), scale, "laplace"),
        ),
        assemble=assemble,
    )


TOY_ESTIMATOR = Estimator(
    name="toy",
    label="Toy difference in means",
    parts=("arm sums",),
    pure=True,
    needs_covariates=False,
    designs=("randomized", "observational"),
    build=plan_toy,
)


def toy_noise_model(site: PublicSite, rng: np.random.Generator, reps: int) -> NoiseDraws:
    b = math.sqrt(site.noise_variance / 2 / (1 / site.n_treated**2 + 1 / site.n_control**2))
    lap = rng.laplace(0.0, b, (reps, 2))
    noise = lap[:, 0] / site.n_treated - lap[:, 1] / site.n_control
    return NoiseDraws(noise, np.full(reps, site.variance))


# A toy aggregator: one registry entry (the median site's estimate, by N_j var_j)


def _median_site(r: Rows) -> Combination:
    key = np.where(r.ok, r.var, np.inf)
    order = np.argsort(key, axis=1, kind="stable")
    k = (r.ok.sum(axis=1) - 1) // 2
    j = np.take_along_axis(order, k[:, None], axis=1)[:, 0]
    pick = np.zeros_like(r.ok)
    pick[np.arange(r.ok.shape[0]), j] = True
    return Combination(pick & r.ok, np.ones_like(r.n), r.var)


TOY_AGGREGATOR = Aggregator(
    name="median_site",
    label="Median site",
    why_used="the site of median variance",
    why_not_used="only the site of median variance is used",
    style={"color": "#7f7f7f", "marker": "x", "ls": "-."},
    combine=_median_site,
)


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(ESTIMATORS, TOY_ESTIMATOR.name, TOY_ESTIMATOR)
    monkeypatch.setitem(NOISE_MODELS, TOY_ESTIMATOR.name, toy_noise_model)
    aggregators.register(TOY_AGGREGATOR)
    try:
        yield
    finally:
        aggregators.unregister(TOY_AGGREGATOR.name)


def test_a_toy_estimator_and_aggregator_register_and_pass(toys):
    for aggregator in sorted(aggregators.AGGREGATORS):
        run_contract("toy", aggregator)
    for estimator in sorted(ESTIMATORS):
        run_contract(estimator, "median_site")
    # the spec, the scalar and vectorised tables and the result wording see the new names
    from dpate_core.aggregation import AGGREGATORS
    from dpate_core.simulation import COMBINERS_MANY

    assert "median_site" in AGGREGATORS and "median_site" in COMBINERS_MANY
    assert spec_for("toy", "median_site").estimator_info is TOY_ESTIMATOR


def test_the_toy_aggregator_is_gone_after_the_test():
    assert "median_site" not in aggregators.AGGREGATORS
    with pytest.raises(ValueError, match="aggregator: must be one of 'mvagg'"):
        spec_for("dim", "median_site")
