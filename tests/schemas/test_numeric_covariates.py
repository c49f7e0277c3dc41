"""Numeric covariates with public bounds and no bins (``[[covariates]] kind = "numeric"``,
``lower``/``upper``): the spec form and its errors, the refusal by estimators that take covariates
only as strata, the site's validation of the column (type, missing values, the bounds policy;
errors that name columns and rules, never values), a propensity release on a Synth frame mixing
categorical and bounded numeric covariates, and the canonical form of existing specs unchanged."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpate.schemas.site_data import SiteDataError, prepare_site_data
from dpate.schemas.spec import SpecError, StudySpec
from dpate.site.plans import plan_from_records
from dpate_core.mechanisms.propensity import Categorical, Numeric, plan_propensity
from dpate_core.release import draw_many

from .test_spec import base

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

AGE = {"kind": "numeric", "column": "age", "lower": 18, "upper": 90}
BMI = {"kind": "numeric", "column": "bmi", "lower": 15, "upper": 45, "policy": "reject"}
SITE = {"id": "a", "data": "a.csv", "epsilon": "1", "lifetime_cap": {"epsilon": "3", "delta": "0"}}


def spec_dict(**changes: object) -> dict:
    d = {
        "study_id": "s1",
        "design": "observational",
        "estimator": "propensity",
        "reports": "file:///tmp/reports",
        "treatment": {"column": "w"},
        "outcome": {"column": "y", "bound": 1.0},
        "covariates": [
            {"kind": "categorical", "column": "sex", "levels": ["f", "m"]},
            AGE,
            {"kind": "categorical", "column": "grp", "levels": [0, 1, 2, 3]},
            BMI,
            {"kind": "numeric", "column": "sev", "edges": [0, 2, 5]},
        ],
        "sites": [SITE],
    }
    d.update(copy.deepcopy(changes))
    return d


def problems(d: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        StudySpec.from_dict(d)
    return info.value.problems


# --- the spec -------------------------------------------------------------------------------


def test_bounded_numeric_covariate_parses_and_gives_no_strata() -> None:
    spec = StudySpec.from_dict(spec_dict())
    age, bmi = spec.covariates[1], spec.covariates[3]
    assert age.kind == bmi.kind == "numeric"
    assert not age.binned and age.bounds == (18.0, 90.0) and age.clip_policy == "clip"
    assert bmi.clip_policy == "reject" and bmi.size == 1
    assert spec.domain_size == 2 * 4 * 2  # sex x grp x sev bins; age and bmi add no strata
    assert [c.column for c in spec.unbinned_covariates] == ["age", "bmi"]
    assert [c.column for c in spec.binned_covariates] == ["sex", "grp", "sev"]
    # the canonical form keeps the bounds (a change of bound is a change of spec)
    moved = spec_dict()
    moved["covariates"][1] = dict(AGE, upper=95)
    assert StudySpec.from_dict(moved).spec_hash != spec.spec_hash
    again = StudySpec.from_dict(spec.canonical_dict())
    assert again.spec_hash == spec.spec_hash


@pytest.mark.parametrize(
    ("covariate", "words"),
    [
        ({"kind": "numeric", "column": "age", "lower": 18}, "needs bin edges"),
        ({"kind": "numeric", "column": "age"}, "needs bin edges"),
        ({"kind": "numeric", "column": "age", "lower": 90, "upper": 18}, "must be below upper"),
        ({"kind": "numeric", "column": "age", "lower": 5, "upper": 5}, "must be below upper"),
        (dict(AGE, edges=[18, 40, 90]), "not both"),
        ({"kind": "numeric", "column": "age", "edges": [0, 9], "policy": "clip"}, "not both"),
        (dict(AGE, lower="eighteen"), "bounds must be numbers"),
        (dict(AGE, upper=float("inf")), "finite"),
        (dict(AGE, policy="winsorise"), "must be"),
    ],
)
def test_bounded_numeric_covariate_errors_name_the_covariate_and_rule(
    covariate: dict, words: str
) -> None:
    found = problems(spec_dict(covariates=[covariate]))
    assert len(found) == 1
    loc, msg = found[0]
    assert loc.startswith("covariates.0")
    assert words in msg
    if "bin edges" in words or "below" in words or "both" in words:
        assert "'age'" in msg


@pytest.mark.parametrize("estimator", ["adjusted", "dim", "smooth_matching", "global_matching"])
def test_estimators_without_record_level_covariates_refuse_them(estimator: str) -> None:
    d = spec_dict(estimator=estimator)
    if estimator == "dim":
        d.update(design="randomized", arm_sizes_public=True)
    if "matching" in estimator:
        d["sites"] = [dict(SITE, delta="1e-5", lifetime_cap={"epsilon": "3", "delta": "1e-4"})]
    found = problems(d)
    assert [loc for loc, _ in found] == ["covariates.1", "covariates.3"]
    for (_, msg), column in zip(found, ("age", "bmi"), strict=True):
        assert f"covariate {column!r} has public bounds and no bins" in msg
        assert f"estimator {estimator!r}" in msg
        assert "declare bins for it (edges = [lower, ..., upper])" in msg
        assert "'propensity'" in msg


def test_balance_table_reads_covariates_without_bins_in_public_bins() -> None:
    """A covariate with public bounds and no bins enters the balance table read in
    NUMERIC_BALANCE_BINS equal bins of its bounds: one row, their midpoints."""
    import itertools

    from dpate_core.balance import NUMERIC_BALANCE_BINS, bounded_bins

    spec = StudySpec.from_dict(spec_dict(balance={"epsilon": "1/10"}))
    layout = spec.balance_layout
    for c in spec.unbinned_covariates:
        j = layout.names.index(c.column)
        edges = bounded_bins(*c.bounds)
        assert len(layout.labels[j]) == NUMERIC_BALANCE_BINS == len(edges) - 1
        mids = tuple((a + b) / 2 for a, b in itertools.pairwise(edges))
        assert layout.values[j] == mids
        assert spec.balance_values[c.column] == mids  # what a report's reader is given
    categorical = [c.column for c in spec.covariates if c.kind == "categorical"]
    assert categorical and not set(categorical) & set(spec.balance_values)
    # a study without covariates (a randomized trial's difference in means) has no table: every
    # site's artifact reads its values all the same
    trial = StudySpec.from_dict(
        spec_dict(design="randomized", estimator="dim", covariates=[], arm_sizes_public=True)
    )
    assert trial.balance_values == {}


#: canonical hashes of specs that existed before the bounded form (base() of test_spec, the same
#: with the propensity estimator, the shipped examples): the form adds no key to them. A spec's
#: hash is what every site approved: regenerate (tests/golden.py) only with a change meant to
#: alter every existing spec's hash, and say so in the CHANGELOG
PINNED = Path(__file__).with_name("pinned_spec_hashes.json")


def test_existing_specs_keep_their_canonical_form_and_hash(golden) -> None:
    binned = StudySpec.from_dict(base())
    assert set(binned.model_dump(mode="json")["covariates"][1]) == {"kind", "column", "edges"}
    d = base()
    d["estimator"] = "propensity"
    d["sites"][1]["budget_split"] = ["1/4", "1/2", "1/4"]
    hashes = {"base": binned.spec_hash, "base_propensity": StudySpec.from_dict(d).spec_hash}
    for name in ("ist-aspirin-randomized.toml", "synth-observational-3-sites.toml"):
        hashes[name] = StudySpec.from_toml_text((EXAMPLES / name).read_text()).spec_hash
    pinned = json.loads(golden.text(PINNED, json.dumps(hashes, indent=1) + "\n"))
    assert hashes == pinned, golden.differs(f"spec hashes differ from {PINNED.name}")


# --- the site's validation ------------------------------------------------------------------


def synth_frame(n: int, seed: int = 0, effect: float = 0.1) -> pd.DataFrame:
    """A Synth frame with five covariates: sex, grp (categorical), sev (binned numeric), age and
    bmi (numeric, some values outside the study's public bounds); confounded treatment."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["f", "m"], n)
    grp = rng.integers(0, 4, n)
    sev = rng.uniform(0, 5, n)
    age = rng.uniform(10, 100, n)
    bmi = np.clip(rng.normal(27, 5, n), 16, 44)
    lin = -0.5 + 0.5 * (sex == "m") + 0.3 * grp + 0.2 * sev - 0.02 * (age - 50) + 0.05 * (bmi - 27)
    w = (rng.uniform(size=n) < 1 / (1 + np.exp(-lin))).astype(int)
    y = 0.3 + 0.03 * grp + 0.02 * sev + 0.003 * (age - 50) + 0.01 * (bmi - 27) + effect * w
    y = np.clip(y + rng.normal(0, 0.1, n), 0, 1)
    return pd.DataFrame(
        {"w": w, "y": y, "sex": sex, "grp": grp, "sev": sev, "age": age, "bmi": bmi}
    )


def test_records_carry_the_clipped_values_and_the_strata_of_the_binned_covariates() -> None:
    spec = StudySpec.from_dict(spec_dict())
    frame = synth_frame(400)
    data = prepare_site_data(frame, spec)
    assert data.z is not None and data.z.shape == (400, 2)
    np.testing.assert_array_equal(data.z[:, 0], np.clip(frame["age"], 18, 90))
    np.testing.assert_array_equal(data.z[:, 1], frame["bmi"])
    sex = (frame["sex"] == "m").to_numpy().astype(int)
    sev = np.digitize(frame["sev"].to_numpy(), [2])
    np.testing.assert_array_equal(data.x, (sex * 4 + frame["grp"].to_numpy()) * 2 + sev)
    clipped = int(((frame["age"] < 18) | (frame["age"] > 90)).sum())
    assert data.report.clipped_covariates == {"age": clipped} and clipped > 0
    assert repr(data) == f"SiteData(n=400, domain_size={spec.domain_size}, bound=1.0)"
    # without bounded covariates the records carry no values
    binned = spec_dict(estimator="adjusted")
    binned["covariates"] = [c for c in binned["covariates"] if "edges" in c or "levels" in c]
    assert prepare_site_data(frame, StudySpec.from_dict(binned)).z is None


def test_bounds_policy_and_column_type_are_checked_naming_columns_not_values() -> None:
    spec = StudySpec.from_dict(spec_dict())
    frame = synth_frame(50).astype({"bmi": object, "age": object})
    frame.loc[3, "bmi"] = 987654.125  # outside [15, 45], policy "reject"
    frame.loc[7, "age"] = "QXLEAK"  # not a number
    frame.loc[9, "age"] = np.nan  # missing, missing = "reject"
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(frame, spec)
    found = {(p.column, p.rule, p.count, p.rows) for p in info.value.problems}
    assert found == {
        ("age", "not a number", 1, (7,)),
        ("age", "missing or not finite (study policy missing = 'reject')", 1, (9,)),
        ("bmi", "outside the declared lower/upper bounds (covariate policy 'reject')", 1, (3,)),
    }
    text = str(info.value)
    assert "987654" not in text and "QXLEAK" not in text
    # missing = "drop" drops the incomplete row; a value that is not a number is still an error
    dropped = StudySpec.from_dict(spec_dict(missing="drop"))
    frame.loc[3, "bmi"] = 30.0
    with pytest.raises(SiteDataError, match="'age': 1 row"):
        prepare_site_data(frame, dropped)
    frame.loc[7, "age"] = 40.0
    data = prepare_site_data(frame, dropped)
    assert data.n == 49 and data.z is not None and data.z.shape == (49, 2)


def test_engine_statistics_path_is_not_used_for_bounded_covariates() -> None:
    from dpate.schemas.site_data import site_statistics

    spec = StudySpec.from_dict(spec_dict())
    stats = site_statistics(synth_frame(300), spec)
    with pytest.raises(ValueError, match="plans only from records here"):
        plan_from_records(spec, "a", stats)


# --- a release ------------------------------------------------------------------------------


def test_release_on_a_synth_frame_with_mixed_covariates() -> None:
    """The site's release (the spec, the validated records, the plan) equals the core's
    propensity release on the same records with the categorical columns of the binned
    covariates' strata and the bounded numeric columns; its model charges the clipped range's
    sensitivity; its estimate covers the effect."""
    spec = StudySpec.from_dict(spec_dict())
    frame = synth_frame(20_000, seed=3, effect=0.1)
    data = prepare_site_data(frame, spec)
    plan = plan_from_records(spec, "a", data)
    assert plan.estimator == "propensity" and plan.total.epsilon == Fraction(1)
    # "auto" without a declared n: the rule's first row, two fifths to the model
    assert plan.shares.shares == tuple(Fraction(s) for s in ("2/5", "29/50", "1/50"))

    sex = (frame["sex"] == "m").to_numpy().astype(int)
    sev = np.digitize(frame["sev"].to_numpy(), [2])
    z = np.column_stack([sex, frame["grp"], sev, frame["age"], frame["bmi"]]).astype(np.float64)
    columns = (Categorical(2), Categorical(4), Categorical(2), Numeric(18, 90), Numeric(15, 45))
    core = plan_propensity(
        data.w, data.y, z, columns, bound=1.0, epsilon=1, split=plan.shares.shares
    )
    np.testing.assert_array_equal(plan.noise[0].value, core.noise[0].value)
    assert plan.noise[0].scale == core.noise[0].scale  # (2 + 2*3 + 3*2) 2^g / (eps/3)

    rng = np.random.default_rng(0)
    out = plan.assemble(draw_many(plan, rng, 200))
    assert np.all(np.isfinite(out.tau)) and np.all(out.variance > 0)
    crude = float(data.y[data.w == 1].mean() - data.y[data.w == 0].mean())
    assert abs(crude - 0.1) > 0.008  # confounded
    assert abs(float(np.mean(out.tau)) - 0.1) < 0.006  # the bands remove most of it


def test_sqlite_and_parquet_give_the_same_records_and_errors(tmp_path) -> None:
    """The bounds' rules are engine expressions: a database (SQLite) and a file (DuckDB) give
    the same values, clipped alike, and the same refusal."""
    import sqlite3

    spec = StudySpec.from_dict(spec_dict())
    frame = synth_frame(300, seed=5)
    frame.to_parquet(tmp_path / "d.parquet")
    db = tmp_path / "site.db"
    with sqlite3.connect(db) as conn:
        frame.to_sql("records", conn, index_label="id")
    url = f"sqlite:///{db}"
    ref = prepare_site_data(tmp_path / "d.parquet", spec)
    got = prepare_site_data(url, spec, query="SELECT * FROM records ORDER BY id")
    assert ref.z is not None and got.z is not None
    np.testing.assert_array_equal(got.z, ref.z)
    np.testing.assert_array_equal(got.x, ref.x)
    assert got.report.clipped_covariates == ref.report.clipped_covariates
    frame.loc[[4, 250], "bmi"] = 50.0  # above the public upper bound 45, policy "reject"
    with sqlite3.connect(db) as conn:
        frame.to_sql("records", conn, index_label="id", if_exists="replace")
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(url, spec, query="SELECT * FROM records ORDER BY id")
    (problem,) = info.value.problems
    assert (problem.column, problem.count, problem.rows) == ("bmi", 2, (4, 250))
