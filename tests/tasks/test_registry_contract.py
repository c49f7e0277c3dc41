"""The contract every registered estimator and aggregator meets, end to end without Prefect:
plan -> simulated release -> published report round trip (dpate.schemas.reports) and its
plausibility check -> aggregation (and its bootstrap interval) -> simulation of the same plans
with the vectorised combiner; and ``dpate plan`` and ``dpate check`` on a study of each.

A toy estimator with an option and a toy aggregator, each one module of their own
(``toy_estimator.py``, ``toy_aggregator.py``) registered with the registries' ``register``,
pass it with no edit anywhere else (docs/how-to/extending.md); ``tests/pipeline/test_plugins.py`` runs
and reports a whole study of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import dpate_core.aggregation as aggregators
import dpate_core.mechanisms as mechanisms
from dpate.cli.main import app
from dpate.schemas.reports import SiteReport, estimate_problems, read_report
from dpate.schemas.spec import StudySpec
from dpate_core.aggregation import aggregate
from dpate_core.inference import combined_bootstrap_interval
from dpate_core.mechanisms import ESTIMATORS, PlanInputs
from dpate_core.planning import SiteDesign, plan_study
from dpate_core.release import draw_once
from dpate_core.simulation import aggregate_many, simulate_sites

from .toy_aggregator import MEDIAN_SITE
from .toy_estimator import TOY

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
LEVELS = 6
SIZES = (500, 300, 120)


def option_keys(estimator: str, options: Any = None) -> dict[str, Any]:
    """A spec's keys for the estimator's options (default: what a plan assumes for it): a
    field with a ``spec_key`` at the top level, the others in ``[estimator_options]``."""
    est = ESTIMATORS[estimator]
    options = est.assumed_options() if options is None else options
    out: dict[str, Any] = {}
    for f in est.option_fields():
        key = f.metadata.get("spec_key")
        value = getattr(options, f.name)
        if key is not None:
            out[key] = value
        else:
            out.setdefault("estimator_options", {})[f.name] = value
    return out


def spec_dict(estimator: str, aggregator: str, options: Any = None) -> dict[str, Any]:
    """A three-site study of ``estimator`` combined by ``aggregator``, from the registry alone."""
    est = ESTIMATORS[estimator]
    return {
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
        **option_keys(estimator, options),
        # the mechanisms are the subject here, not the signatures (tests/schemas/test_report_trust)
        "signing": "none",
        "unsigned_reason": "registry contract of the mechanisms",
    }


def spec_for(estimator: str, aggregator: str, options: Any = None) -> StudySpec:
    return StudySpec.from_dict(spec_dict(estimator, aggregator, options))


def _records(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.integers(0, LEVELS, n)
    w = (rng.random(n) < 0.3 + 0.05 * x).astype(np.int64)
    y = np.clip(0.2 + 0.05 * x + 0.3 * w + rng.normal(0, 0.1, n), 0.0, 1.0)
    return w, y, x


def run_contract(estimator: str, aggregator: str, seed: int = 0, options: Any = None) -> None:
    spec = spec_for(estimator, aggregator, options)
    rng = np.random.default_rng(seed)
    plans = []
    released = []
    for site, n in zip(spec.sites, SIZES, strict=True):
        w, y, x = _records(rng, n)
        plan = spec.estimator_info.plan(
            PlanInputs(
                w=w,
                y=y,
                x=x,
                domain_size=spec.domain_size,
                bound=spec.outcome.bound,
                privacy=site.privacy,
                split=spec.budget_split(site.id).shares,
                options=spec.study_options,  # as a release (dpate.site.plans)
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
        # the server's plausibility rules accept a genuine release (resolved or not)
        assert estimate_problems(back.estimate, spec) == []
        plans.append(plan)
        released.append(back.estimate)

    released = [e for e in released if e.resolved]
    if not released:
        return
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


@pytest.mark.parametrize("aggregator", ["mvagg", "inverse_variance"])
def test_dim_with_private_arm_sizes_passes_the_contract(aggregator):
    """The option a plan does not assume: the arms' histogram release, published, read back,
    accepted by the server's rules and combined."""
    from dpate_core.mechanisms.difference_in_means import DifferenceInMeansOptions

    run_contract("dim", aggregator, options=DifferenceInMeansOptions(arm_sizes_public=False))


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_every_registered_estimator_plans_a_study(estimator):
    """``dpate plan``'s core: every estimator predicts a site's variances from public inputs,
    with the options a study gives or a plan assumes."""
    spec = spec_for(estimator, "mvagg")
    designs = [
        SiteDesign(s.id, n, s.epsilon, s.delta, spec.budget_split(s.id).shares)
        for s, n in zip(spec.sites, SIZES, strict=True)
    ]
    plan = plan_study(
        estimator,
        "mvagg",
        designs,
        domain_size=spec.domain_size,
        bound=1.0,
        design=spec.design,
        options=spec.options,
    )
    assert all(p.reported_variance > 0 and p.noise_variance > 0 for p in plan.sites)
    assert plan.recommendation is not None


# ---------------------------------------------------------------------------------------------
# The toys: each its own module, registered here and nowhere else


@pytest.fixture
def toys() -> Iterator[None]:
    mechanisms.register(TOY)
    aggregators.register(MEDIAN_SITE)
    try:
        yield
    finally:
        mechanisms.unregister(TOY.name)
        aggregators.unregister(MEDIAN_SITE.name)


def test_a_toy_estimator_and_aggregator_register_and_pass(toys):
    for aggregator in sorted(aggregators.AGGREGATORS):
        run_contract("toy", aggregator)
    run_contract("toy", "mvagg", options=dataclasses.replace(TOY.make_options(), sampling="none"))
    for estimator in sorted(ESTIMATORS):
        run_contract(estimator, "median_site")
    # the spec, the scalar and vectorised tables and the result wording see the new names
    from dpate_core.aggregation import COMBINERS
    from dpate_core.simulation import COMBINERS_MANY

    assert "median_site" in COMBINERS and "median_site" in COMBINERS_MANY
    spec = spec_for("toy", "median_site")
    assert spec.estimator_info is TOY and spec.options == TOY.make_options()
    assert spec.estimand == "the difference in arm means (a toy)"
    test_every_registered_estimator_plans_a_study("toy")


def test_the_toys_option_is_read_and_checked_by_the_spec(toys):
    d = spec_dict("toy", "mvagg")
    d["estimator_options"] = {"sampling": "none"}
    assert StudySpec.from_dict(d).options.sampling == "none"
    d["estimator_options"] = {"sampling": "best"}
    with pytest.raises(ValueError, match=r"estimator_options\.sampling"):
        StudySpec.from_dict(d)
    d["estimator_options"] = {"bands": 5}
    with pytest.raises(ValueError, match="estimator 'toy' has no option 'bands'"):
        StudySpec.from_dict(d)
    d = spec_dict("toy", "mvagg")
    d["variance"] = "stratified"  # a built-in estimator's option
    with pytest.raises(ValueError, match="estimator 'toy' has no option variance"):
        StudySpec.from_dict(d)


def test_a_forged_toy_report_is_refused_by_its_own_rule(toys):
    spec = spec_for("toy", "mvagg")
    rng = np.random.default_rng(3)
    w, y, x = _records(rng, 400)
    site = spec.sites[0]
    plan = TOY.plan(PlanInputs(w, y, x, spec.domain_size, 1.0, site.privacy, None, spec.options))
    genuine = plan.estimate(draw_once(plan, rng))
    forged = dataclasses.replace(genuine, variance=genuine.variance / 4)
    report = SiteReport.from_estimate(genuine, spec=spec, site_id=site.id, created_at=T0)
    assert estimate_problems(report.estimate, spec) == []
    bad = report.model_copy(update={"estimate": report.estimate.of(forged)})
    assert any("toy's public variance" in p for p in estimate_problems(bad.estimate, spec))


def write_toy_spec(root: Path, sampling: str = "none") -> Path:
    """A three-site study of the toys on CSV files (the contract's records), as a user writes it:
    each site's key made where a local run looks (``dpate site keygen``), listed in the spec."""
    from dpate.settings import dpate_home
    from dpate.signing import ensure_private_key

    rng = np.random.default_rng(11)
    blocks = []
    for j, n in enumerate(SIZES):
        w, y, x = _records(rng, n)
        rows = ["w,y,x"] + [f"{a},{b:.6f},{c}" for a, b, c in zip(w, y, x, strict=True)]
        (root / f"s{j}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        blocks.append(
            f'[[sites]]\nid = "s{j}"\ndata = "s{j}.csv"\nepsilon = "1"\n'
            f'lifetime_cap = {{ epsilon = "3", delta = "1e-4" }}\n'
            f'public_key = "{ensure_private_key(dpate_home() / "keys" / f"s{j}.ed25519.pem")}"\n'
        )
    levels = ", ".join(f'"{k}"' for k in range(LEVELS))
    spec = root / "toy.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "toy-study"\ndesign = "observational"\n'
        'estimator = "toy"\naggregator = "median_site"\nreports = "published"\n\n'
        f'[estimator_options]\nsampling = "{sampling}"\n\n'
        '[treatment]\ncolumn = "w"\n\n[outcome]\ncolumn = "y"\nbound = 1.0\n\n'
        f'[[covariates]]\nkind = "categorical"\ncolumn = "x"\nlevels = [{levels}]\n\n'
        + "\n".join(blocks),
        encoding="utf-8",
    )
    return spec


def test_dpate_check_and_plan_handle_the_toys(toys, tmp_path, monkeypatch):
    for k in ("DPATE_LEDGER_URL", "DPATE_SITE_LOG", "DPATE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    spec = write_toy_spec(tmp_path)
    runner = CliRunner()
    checked = runner.invoke(app, ["check", str(spec)])
    out = checked.output
    assert "estimator toy, aggregator median_site" in out, out
    assert "N after the missing-value policy: 500" in out and "not feasible" not in out
    assert "publishes exactly: N (the number of records used) and the arm sizes" in out
    sizes = [a for j, n in enumerate(SIZES) for a in ("--n", f"s{j}={n}")]
    planned = runner.invoke(app, ["plan", str(spec), *sizes, "--json"])
    assert planned.exit_code == 0, planned.output
    import json

    doc = json.loads(planned.output)
    assert doc["estimator"] == "toy" and doc["aggregator"] == "median_site"
    assert len(doc["combined"]["used"]) == 1  # the median site
