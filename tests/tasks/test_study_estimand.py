"""One estimand per study: the adjusted estimator's weighting is declared once in the spec or
chosen by ``"auto"`` once for the whole study from every site's public design (declared ``n``,
``|X|``, epsilon, split), never per site; the release at every site, ``dpate plan`` and the
result document name the same one."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpate.schemas.reports import StudyResult
from dpate.schemas.site_data import PreparationReport, SiteData
from dpate.schemas.spec import StudySpec
from dpate.site.plans import plan_from_records
from dpate_core.mechanisms import StudySite, estimator_of
from dpate_core.mechanisms.adjusted import adjusted_weighting, plan_adjusted, study_weighting
from dpate_core.planning import SiteDesign, plan_study
from dpate_core.release import noise_free

K = 4
SIZES = {"large": 4000, "small": 200}  # alone, "auto" picks subclassification / fixed effects


def _spec(declare: bool = True, weighting: str | None = None) -> StudySpec:
    sites = [
        {
            "id": site,
            "data": f"{site}.csv",
            "epsilon": 1,
            "lifetime_cap": {"epsilon": 5},
            **({"n": n} if declare else {}),
        }
        for site, n in SIZES.items()
    ]
    d = {
        "study_id": "one-estimand",
        "design": "observational",
        "estimator": "adjusted",
        "treatment": {"column": "w"},
        "outcome": {"column": "y", "bound": 1.0},
        "covariates": [{"kind": "categorical", "column": "g", "levels": [0, 1, 2, 3]}],
        "sites": sites,
    }
    if weighting is not None:
        d["adjusted_weighting"] = weighting
    return StudySpec.from_dict(d)


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # effects that differ between strata (an effect in the most imbalanced one only), so the
    # two weightings' estimands differ
    rng = np.random.default_rng(seed)
    x = rng.integers(0, K, n)
    w = (rng.random(n) < np.array([0.1, 0.3, 0.6, 0.9])[x]).astype(np.int8)
    y = np.clip(0.2 + 0.6 * (x == 0) * w + 0.1 * rng.random(n), 0.0, 1.0)
    return w, y, x


def _noise_free(plan) -> float:  # the plan's output at its pre-noise values (no draw)
    return plan.assemble(noise_free(plan)).tau


def test_alone_auto_would_choose_differently_at_the_two_sites():
    picks = {site: adjusted_weighting("auto", n, K, 1) for site, n in SIZES.items()}
    assert picks == {"large": "subclassification", "small": "fixed_effects"}


def test_every_site_releases_the_studys_one_estimand():
    spec = _spec()
    assert spec.variant == "fixed_effects"
    assert spec.estimand.startswith("the average of the effects within strata")
    assert "1 of 2 site(s)" in spec.study_choice.reason
    for seed, (site, n) in enumerate(SIZES.items()):
        w, y, x = _data(n, seed)
        data = SiteData(w, y, x, K, 1.0, PreparationReport(n_read=n, n_used=n))
        by_mode = {
            mode: _noise_free(
                plan_adjusted(w, y, x, bound=1.0, epsilon=1, domain_size=K, weighting=mode)
            )
            for mode in ("subclassification", "fixed_effects")
        }
        assert abs(by_mode["subclassification"] - by_mode["fixed_effects"]) > 0.02
        released = _noise_free(plan_from_records(spec, site, data))
        assert released == pytest.approx(by_mode["fixed_effects"], abs=1e-12), site


def test_the_study_choice_reads_the_spec_only():
    # undeclared sizes: fixed effects (defined at any size), whatever the data
    undeclared = _spec(declare=False)
    assert undeclared.variant == "fixed_effects"
    assert "not every site declares its record count n" in undeclared.study_choice.reason
    forced = _spec(weighting="subclassification")
    assert forced.variant == "subclassification"
    assert forced.estimand.startswith("the average effect over the patients in strata where both")
    # every site large enough: subclassification everywhere
    sites = [StudySite(4000, 1, (Fraction(9, 10), Fraction(1, 10)))] * 2
    assert study_weighting("auto", K, sites)[0] == "subclassification"
    # a choice's own options choose themselves (idempotent)
    est = estimator_of("adjusted")
    choice = est.study_choice(None, K, sites)
    assert est.study_choice(choice.options, K, sites[:1]).variant == "subclassification"


def test_plan_predicts_one_weighting_for_every_site_and_names_the_estimand():
    designs = [SiteDesign.of(site, n, 1, split=None, parts=2) for site, n in SIZES.items()]
    plan = plan_study("adjusted", "inverse_variance", designs, domain_size=K, bound=1.0)
    assert {p.weighting for p in plan.sites} == {"fixed_effects"}
    assert plan.variant == "fixed_effects"
    assert plan.estimand.startswith("the average of the effects within strata")
    assert any(
        n.startswith("fixed_effects at every site: adjusted_weighting = 'auto'") for n in plan.notes
    )
    assert plan.as_dict()["estimand"] == plan.estimand


def test_the_result_document_and_its_views_name_the_estimand():
    spec = _spec()
    doc = {
        "schema": "dpate.study-result",
        "schema_version": 3,
        "study_id": "one-estimand",
        "spec_hash": spec.spec_hash,
        "round": "1",
        "aggregator": "inverse_variance",
        "estimator": spec.estimator,
        "estimand": spec.estimand,
        "complete": True,
        "status": "answered",
        "reason": None,
        "estimate": 0.1,
        "variance": 0.001,
        "ci95": [0.04, 0.16],
        "interval": None,
        "uninformative": False,
        "extra": {},
        "sites": [],
        "software_version": "test",
    }
    result = StudyResult.of(doc)
    assert result.to_document() == doc
    words = "Estimand: the average of the effects within strata where both treatments occur"
    assert words in result.markdown()
    from dpate.cli.output import sites_table

    assert words in str(sites_table(result).caption)
    from dpate.html_report import render_html

    assert words in render_html(result, "x/results/1.json", {})
