"""The spec's ``adjusted_weighting`` reaches the release plan on both of the site's paths: the
records (``SiteData``, the registry's plan) and the streamed per-cell statistics
(``SiteStatistics``, the path a deployed adjusted release takes)."""

from __future__ import annotations

import numpy as np
import pytest

from dpate.schemas.site_data import PreparationReport, SiteData, SiteStatistics
from dpate.schemas.spec import StudySpec
from dpate.site.plans import plan_from_records
from dpate_core.mechanisms.adjusted import plan_adjusted
from dpate_core.release import noise_free
from dpate_core.statistics import cell_statistics

K = 4


def _spec(weighting: str | None) -> StudySpec:
    d = {
        "study_id": "w1",
        "design": "observational",
        "estimator": "adjusted",
        "treatment": {"column": "w"},
        "outcome": {"column": "y", "bound": 1.0},
        "covariates": [{"kind": "categorical", "column": "g", "levels": [0, 1, 2, 3]}],
        "sites": [
            {"id": "a", "data": "a.csv", "epsilon": 1, "lifetime_cap": {"epsilon": 5}, "n": 4000},
        ],
    }
    if weighting is not None:
        d["adjusted_weighting"] = weighting
    # the histogram alone: the fixed-effects queries ("auto" at 4,000 records) are a second
    # stage, which a noise-free assembly of the first does not read (test_adjusted_fe_queries)
    d["estimator_options"] = {"weighted_sum": False}
    return StudySpec.from_dict(d)


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # 4,000 records in 4 strata ("auto": subclassification) with effects that differ between
    # strata (an effect in the most imbalanced one only), so the two weightings' estimands differ
    rng = np.random.default_rng(11)
    x = rng.integers(0, K, 4000)
    w = (rng.random(4000) < np.array([0.1, 0.3, 0.6, 0.9])[x]).astype(np.int8)
    y = np.clip(0.2 + 0.6 * (x == 0) * w + 0.1 * rng.random(4000), 0.0, 1.0)
    return w, y, x


def _noise_free(plan):  # the plan's outputs at its pre-noise values (no draw)
    return plan.assemble(noise_free(plan)).tau


@pytest.mark.parametrize("weighting", [None, "subclassification", "fixed_effects"])
@pytest.mark.parametrize("streamed", [False, True])
def test_spec_weighting_reaches_the_plan(weighting, streamed):
    w, y, x = _data()
    report = PreparationReport(n_read=w.size, n_used=w.size)
    if streamed:
        data = SiteStatistics(cell_statistics(w, y, x, domain_size=K, bound=1.0), report)
    else:
        data = SiteData(w, y, x, K, 1.0, report)
    plan = plan_from_records(_spec(weighting), "a", data)
    by_mode = {
        mode: _noise_free(
            plan_adjusted(w, y, x, bound=1.0, epsilon=1, domain_size=K, weighting=mode)
        )
        for mode in ("subclassification", "fixed_effects")
    }
    assert abs(by_mode["subclassification"] - by_mode["fixed_effects"]) > 0.03
    want = weighting or "subclassification"  # "auto" at a declared 500 records per arm per stratum
    assert _noise_free(plan) == pytest.approx(by_mode[want], abs=1e-12)
