"""The coverage study, the variance-ratio study and the budget-split search of
dpate.experiments on small inline data: what they produce, that it is reproducible, and that
the intervals behave as the mechanisms promise where the answer is known."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpate.experiments.coverage import (
    COVERAGE_ALPHAS,
    COVERAGE_COLUMNS,
    COVERAGE_CONFIGS,
    COVERAGE_EPSILONS,
    coverage_markdown,
    coverage_study,
)
from dpate.experiments.settings import AGGREGATOR_LABELS, ExperimentSettings
from dpate.experiments.split_search import search_budget_split, split_search_markdown
from dpate.experiments.variance_ratio import variance_markdown, variance_ratio_study
from tests.experiments.inline_data import SOURCE

SMALL = ExperimentSettings(
    reps=6,
    synth_n=3000,
    synth_domain=10,
    coverage_reps=240,
    coverage_data=6,
    coverage_boot=2,
    coverage_boot_draws=200,
    figures=False,
)


@pytest.fixture(scope="module")
def rows():
    return coverage_study(SMALL, SOURCE)


def test_every_point_unit_and_method_is_reported(rows):
    assert all(set(r) == set(COVERAGE_COLUMNS) for r in rows)
    points = {
        (r["dataset"], r["estimator"], r["proportions"], r["epsilon_1"], r["alpha"]) for r in rows
    }
    assert len(points) == len(COVERAGE_CONFIGS) * len(COVERAGE_EPSILONS) * len(COVERAGE_ALPHAS)
    units = {r["unit"] for r in rows}
    assert units == {"site 1", "site 2", "site 3", *AGGREGATOR_LABELS.values()}
    for method, size in (("normal", 240), ("bootstrap", 2)):
        sel = [r for r in rows if r["method"] == method]
        assert len(sel) == len(points) * len(units)
        assert all(r["intervals"] == size and 0.0 <= r["coverage"] <= 1.0 for r in sel)
    used = [r["mean_sites_used"] for r in rows if r["unit"] == "MVAgg" and r["method"] == "normal"]
    assert all(1.0 <= u <= 3.0 for u in used)


def test_reproducible(rows):
    again = coverage_study(SMALL, SOURCE)
    assert len(again) == len(rows)
    for a, b in zip(again, rows, strict=True):
        assert {k: v for k, v in a.items() if v == v} == {k: v for k, v in b.items() if v == v}


def test_difference_in_means_intervals_cover_at_a_large_budget(rows):
    # eps_1 = 5 on the randomized trial: the sampling part dominates and the DiM's reported
    # variance is the usual s^2 / n sum: the normal interval covers close to 95%
    sel = [
        r["coverage"]
        for r in rows
        if r["estimator"] == "dim" and r["epsilon_1"] == "5" and r["method"] == "normal"
        and r["unit"].startswith("site")
    ]  # fmt: skip
    assert 0.85 <= float(np.mean(sel)) <= 1.0


def test_markdown_table(rows):
    text = coverage_markdown(rows)
    assert text.startswith("# Coverage of the 95% intervals")
    assert text.count("\n| IST |") == 3 * 6  # three IST configurations: sites + five combiners
    assert "SmoothDPMatching" in text


def test_variance_ratio_study_shows_the_appendix_overstates():
    rows = variance_ratio_study(SMALL, sizes=(20_000,), imbalances=(0.0,), reps=200)
    by = {r["variance"]: r for r in rows}
    assert by["appendix"]["nonprivate_ratio"] > 20  # V_hat squares the effect
    assert by["stratified"]["nonprivate_ratio"] == pytest.approx(1.0, abs=0.2)
    assert "| stratified |" in variance_markdown(rows)


def test_split_search_reports_each_candidate_against_the_even_split():
    rows = search_budget_split(
        SMALL, candidates=(("1/3", "1/3", "1/3"), ("11/20", "3/20", "3/10")), imbalances=(0.0,),
        seeds=1, reps=200, epsilon=Fraction(1), multi_site=((1, 1, 1),), multi_draws=2,
        multi_reps=20,
    )  # fmt: skip
    assert [r["split"] for r in rows] == ["1/3:1/3:1/3", "11/20:3/20:3/10"]
    assert rows[0]["mse_vs_even"] == 1.0
    assert all(r["releases"] == 200 and r["mse"] > 0 for r in rows)
    assert rows[0]["mvagg_mse_vs_even"] == 1.0
    assert all(0.0 <= r["mvagg_coverage"] <= 1.0 for r in rows)
    assert "| 11/20:3/20:3/10 |" in split_search_markdown(rows)
