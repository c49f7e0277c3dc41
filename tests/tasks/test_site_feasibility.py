"""Feasibility checks before any budget is reserved: the rules, and public wording (no counts)."""

from __future__ import annotations

import copy
import pickle
import re

import numpy as np
import pandas as pd
import pytest

from dpate.schemas.site_data import prepare_site_data
from dpate.schemas.spec import StudySpec
from dpate.site.feasibility import FeasibilityError, feasibility_problems
from tests.schemas.test_spec import base


def spec_for(estimator: str) -> StudySpec:
    d = copy.deepcopy(base())
    if estimator == "dim":
        d.update(design="randomized", estimator="dim", arm_sizes_public=True)
        for s in d["sites"]:
            s.pop("budget_split", None)
    else:
        d["estimator"] = estimator
        if estimator != "smooth_matching":  # the base spec's split has three shares
            d["sites"][1].pop("budget_split")
    return StudySpec.from_dict(d)


def data(w, sex, spec):
    n = len(w)
    frame = pd.DataFrame({"w": w, "y": np.linspace(0, 1, n), "sex": sex, "age": [30.0] * n})
    return prepare_site_data(frame, spec)


ESTIMATORS = ["dim", "smooth_matching", "global_matching", "adjusted"]


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_a_good_site_is_feasible(estimator):
    spec = spec_for(estimator)
    assert feasibility_problems(data([0, 1, 0, 1], ["f", "f", "m", "m"], spec), spec) == []


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_too_few_records_and_empty_arms(estimator):
    spec = spec_for(estimator)
    [one] = feasibility_problems(data([1], ["f"], spec), spec)
    assert one.startswith("too few records")
    [treated] = feasibility_problems(data([0, 0, 0], ["f", "m", "f"], spec), spec)
    assert treated.startswith("empty treated arm")
    [control] = feasibility_problems(data([1, 1, 1], ["f", "m", "f"], spec), spec)
    assert control.startswith("empty control arm")


def test_stratified_estimators_need_a_stratum_with_both_arms_but_dim_does_not():
    w, sex = [1, 1, 0, 0, 0], ["f", "f", "m", "m", "m"]  # arms in disjoint strata
    for estimator in ("smooth_matching", "global_matching", "adjusted"):
        spec = spec_for(estimator)
        [p] = feasibility_problems(data(w, sex, spec), spec)
        assert p.startswith("no common support") and repr(estimator) in p
    spec = spec_for("dim")
    assert feasibility_problems(data(w, sex, spec), spec) == []


def test_messages_hold_no_numbers_and_the_error_pickles():
    spec = spec_for("smooth_matching")
    found = []
    for w, sex in (([1], ["f"]), ([0, 0, 0], ["f"] * 3), ([1, 1, 0], ["f", "f", "m"])):
        found += feasibility_problems(data(w, sex, spec), spec)
    assert len(found) == 3
    for p in found:
        # "2 records" is the public rule; no other number may appear
        assert re.findall(r"\d+", p.replace("at least 2 records", "")) == [], p
    err = FeasibilityError("a", found)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.problems == found and again.site_id == "a"


CASES = [
    ([0, 1, 0, 1], ["f", "f", "m", "m"]),  # feasible
    ([1], ["f"]),  # too few
    ([0, 0, 0], ["f", "m", "f"]),  # no treated
    ([1, 1, 1], ["f", "m", "f"]),  # no control
    ([1, 1, 0, 0, 0], ["f", "f", "m", "m", "m"]),  # no common support
    ([], []),  # no record at all
]


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize(("w", "sex"), CASES)
def test_the_rules_on_cell_counts_are_the_rules_on_the_records(estimator, w, sex, monkeypatch):
    """A streamed release checks its per-cell counts (cell 2 x + w): the same answer, word for
    word, as the records give (checked through sorted stratum ids, the path for a huge |X|)."""
    import dpate.site.feasibility
    from dpate.site.feasibility import cell_feasibility_problems
    from dpate_core.statistics import cell_statistics

    monkeypatch.setattr(dpate.site.feasibility, "COUNT_CELLS_UP_TO", 0)
    spec = spec_for(estimator)
    records = data(w, sex, spec)
    cells = cell_statistics(
        records.w, records.y, records.x, domain_size=records.domain_size, bound=records.bound
    )
    want = feasibility_problems(records, spec)
    assert feasibility_problems(cells, spec) == want
    monkeypatch.setattr(dpate.site.feasibility, "COUNT_CELLS_UP_TO", 1 << 24)  # records, by counts
    assert feasibility_problems(records, spec) == want
    assert cell_feasibility_problems(cells.counts, spec) == want
    if len(w) == 4:
        assert want == []
    with pytest.raises(ValueError, match=re.escape("2 |X| cells")):
        cell_feasibility_problems(np.zeros(3), spec)
