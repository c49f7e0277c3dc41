"""Site data validation and discretisation: rules, policies, file formats, and no value leaks."""

from __future__ import annotations

import copy
import logging
import pickle
import traceback
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpate.schemas.site_data import SiteDataError, prepare_site_data
from dpate.schemas.spec import StudySpec

from .test_spec import base


def make_spec(**changes) -> StudySpec:
    """``base()`` with ``changes``; another estimator drops the split site ``b`` states for
    SmoothDPMatching's three parts (it takes the estimator's default)."""
    d = copy.deepcopy(base())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(d.get(key), dict):
            d[key].update(value)
        else:
            d[key] = value
    if d["estimator"] != "smooth_matching":
        for site in d["sites"]:
            site.pop("budget_split", None)
    return StudySpec.from_dict(d)


def good_frame(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "w": rng.integers(0, 2, n),
            "y": rng.random(n),
            "sex": rng.choice(["f", "m"], n),
            "age": rng.uniform(0, 100, n),
        }
    )


def expected_strata(frame: pd.DataFrame) -> np.ndarray:
    sex = (frame["sex"] == "m").to_numpy().astype(int)
    age = np.digitize(frame["age"].to_numpy(), [40, 65])
    return sex * 3 + age


def test_valid_frame_maps_to_w_y_x():
    spec = make_spec()
    frame = good_frame()
    data = prepare_site_data(frame, spec)
    assert data.w.dtype == np.int8 and data.y.dtype == np.float64 and data.x.dtype == np.int64
    np.testing.assert_array_equal(data.w, frame["w"].to_numpy())
    np.testing.assert_array_equal(data.y, frame["y"].to_numpy())
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    assert data.domain_size == spec.domain_size == 6
    assert data.n == 200 and data.report.n_read == data.report.n_used == 200
    assert data.report.clipped_low == data.report.clipped_high == 0
    assert repr(data) == "SiteData(n=200, domain_size=6, bound=1.0)"  # no records in the repr


def test_bin_edges_are_half_open_and_the_last_edge_is_in_the_last_bin():
    spec = make_spec(
        covariates=[{"kind": "numeric", "column": "age", "edges": [0, 40, 65, 100]}],
    )
    frame = pd.DataFrame({"w": [0, 1, 0, 1, 0], "y": [0.5] * 5, "age": [0, 39.999, 40, 65, 100]})
    assert prepare_site_data(frame, spec).x.tolist() == [0, 0, 1, 2, 2]


def test_open_ended_bins_admit_infinite_values():
    spec = make_spec(covariates=[{"kind": "numeric", "column": "age", "edges": ["-inf", 0, "inf"]}])
    frame = pd.DataFrame({"w": [0, 1, 0], "y": [0.5] * 3, "age": [-np.inf, 0.0, np.inf]})
    assert prepare_site_data(frame, spec).x.tolist() == [0, 1, 1]


def test_clip_policy_clips_and_counts_for_the_operator():
    spec = make_spec(outcome={"column": "y", "bound": 10.0, "offset": 5.0, "policy": "clip"})
    frame = good_frame(6)
    frame["y"] = [4.0, 5.0, 10.0, 15.0, 16.0, 100.0]
    data = prepare_site_data(frame, spec)
    assert data.y.tolist() == [0.0, 0.0, 5.0, 10.0, 10.0, 10.0]
    assert frame["y"].tolist() == [
        4.0,
        5.0,
        10.0,
        15.0,
        16.0,
        100.0,
    ]  # the caller's frame is untouched
    assert (data.report.clipped_low, data.report.clipped_high) == (1, 2)
    assert data.bound == 10.0


def test_reject_policy_refuses_out_of_bounds_with_positions():
    spec = make_spec(outcome={"column": "y", "bound": 1.0, "policy": "reject"})
    frame = good_frame(6)
    frame["y"] = [0.0, 1.0, 1.5, 0.2, -0.1, 0.3]
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(frame, spec)
    (p,) = info.value.problems
    assert (p.column, p.count, p.rows) == ("y", 2, (2, 4))
    assert "outside [0, B]" in p.rule


def test_errors_are_lazy_grouped_and_not_repeated():
    spec = make_spec()
    frame = good_frame(8).astype(object)
    frame.loc[1, "w"] = 2
    frame.loc[2, "w"] = "x"
    frame.loc[3, "y"] = np.inf
    frame.loc[4, "y"] = None
    frame.loc[5, "sex"] = "other"
    frame.loc[6, "age"] = -1.0
    frame.loc[7, "age"] = "old"
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(frame, spec)
    got = {(p.column, p.rule.split(" (")[0]): (p.count, p.rows) for p in info.value.problems}
    assert got == {
        ("w", "not 0/1"): (1, (1,)),
        ("w", "not a number"): (1, (2,)),
        ("y", "missing or not finite"): (2, (3, 4)),
        ("sex", "not one of the declared levels"): (1, (5,)),
        ("age", "outside the declared bin edges"): (1, (6,)),
        ("age", "not a number"): (1, (7,)),
    }
    assert [p.column for p in info.value.problems] == ["w", "w", "y", "sex", "age", "age"]
    assert "of 8 rows" in str(info.value)


def test_drop_policy_drops_incomplete_rows_and_says_how_many():
    spec = make_spec(missing="drop")
    frame = good_frame(10)
    frame.loc[[1, 4], "y"] = np.nan
    frame.loc[4, "sex"] = None
    frame.loc[7, "age"] = np.nan
    frame.loc[8, "y"] = -np.inf
    data = prepare_site_data(frame, spec)
    kept = frame.drop(index=[1, 4, 7, 8])
    assert data.n == 6 and data.report.n_read == 10 and data.report.dropped_missing == 4
    assert data.report.missing_by_column == {"y": 3, "sex": 1, "age": 1}
    np.testing.assert_array_equal(data.x, expected_strata(kept))
    np.testing.assert_array_equal(data.y, kept["y"].to_numpy())


def test_drop_policy_still_reports_rule_violations_at_file_positions():
    spec = make_spec(missing="drop")
    frame = good_frame(6)
    frame.loc[0, "y"] = np.nan  # dropped
    frame.loc[3, "sex"] = "x"  # invalid: position 3 in the file, not 2 after the drop
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(frame, spec)
    (p,) = info.value.problems
    assert (p.column, p.rows) == ("sex", (3,))


def test_treatment_labels_and_booleans():
    spec = make_spec(treatment={"column": "w", "treated": "small", "control": "regular"})
    frame = good_frame(4)
    frame["w"] = ["small", "regular", "regular", "small"]
    assert prepare_site_data(frame, spec).w.tolist() == [1, 0, 0, 1]
    frame["w"] = ["small", "big", "regular", "small"]
    with pytest.raises(SiteDataError, match="not one of the two treatment labels"):
        prepare_site_data(frame, spec)
    frame["w"] = [True, False, False, True]
    assert prepare_site_data(frame, make_spec()).w.tolist() == [1, 0, 0, 1]
    frame["w"] = [1.0, 0.0, 0.0, 1.0]
    assert prepare_site_data(frame, make_spec()).w.tolist() == [1, 0, 0, 1]


def test_other_level_collects_unknown_levels():
    covs = copy.deepcopy(base()["covariates"])
    covs[0]["other"] = "unknown"
    spec = make_spec(covariates=covs)
    frame = good_frame(4)
    frame["sex"] = ["f", "m", "x", "y"]
    frame["age"] = [10.0, 10.0, 10.0, 70.0]
    data = prepare_site_data(frame, spec)
    assert data.domain_size == 9
    assert data.x.tolist() == [0, 3, 6, 8]
    assert data.report.mapped_to_other == {"sex": 2}


def test_integer_levels():
    spec = make_spec(covariates=[{"kind": "categorical", "column": "grade", "levels": [3, 1, 2]}])
    frame = pd.DataFrame({"w": [0, 1, 1], "y": [0.1, 0.2, 0.3], "grade": [1, 2, 3]})
    assert prepare_site_data(frame, spec).x.tolist() == [1, 2, 0]


def test_missing_columns_are_named():
    with pytest.raises(SiteDataError, match=r"lacks the column\(s\) \['age'\]"):
        prepare_site_data(good_frame().drop(columns=["age"]), make_spec())


@pytest.mark.parametrize("fmt", ["csv", "parquet", "csv.gz"])
def test_files_csv_and_parquet(tmp_path, fmt):
    spec = make_spec()
    frame = good_frame(300, seed=3)
    frame["unused"] = "zzz"
    path = tmp_path / f"site.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    data = prepare_site_data(path, spec)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    np.testing.assert_allclose(data.y, frame["y"].to_numpy())
    assert prepare_site_data(str(path), spec).n == 300


def test_fsspec_url_and_arrow_table(tmp_path):
    import fsspec

    spec = make_spec()
    frame = good_frame(50)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame), buf)
    with fsspec.open("memory://dpate-test/site.parquet", "wb") as fh:
        fh.write(buf.getvalue().to_pybytes())
    data = prepare_site_data("memory://dpate-test/site.parquet", spec)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    assert prepare_site_data(pa.Table.from_pandas(frame), spec).n == 50


def test_file_problems(tmp_path):
    spec = make_spec()
    with pytest.raises(SiteDataError, match="not found"):
        prepare_site_data(tmp_path / "absent.csv", spec)
    good_frame().drop(columns=["sex"]).to_csv(tmp_path / "a.csv", index=False)
    with pytest.raises(SiteDataError, match=r"\['sex'\]"):
        prepare_site_data(tmp_path / "a.csv", spec)
    good_frame().drop(columns=["sex"]).to_parquet(tmp_path / "a.parquet")
    with pytest.raises(SiteDataError, match=r"\['sex'\]"):
        prepare_site_data(tmp_path / "a.parquet", spec)
    (tmp_path / "b.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(SiteDataError, match="could not read"):
        prepare_site_data(tmp_path / "b.parquet", spec)


def test_csv_types_follow_the_spec_not_the_file(tmp_path):
    # text levels that look like numbers stay text
    spec = make_spec(covariates=[{"kind": "categorical", "column": "code", "levels": ["01", "02"]}])
    (tmp_path / "c.csv").write_text("w,y,code\n0,0.5,01\n1,0.25,02\n")
    assert prepare_site_data(tmp_path / "c.csv", spec).x.tolist() == [0, 1]


# ---------------------------------------------------------------------------------------------
# no raw value in any message


MARK_TEXT = "QXLEAKMARK"
MARK_NUMBERS = ("987654.125", "31337.5", "424242")


def _leaky_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "w": [0, 1, f"{MARK_TEXT}W", 424242, 1],
            "y": [0.5, 987654.125, f"{MARK_TEXT}Y", np.nan, 0.1],
            "sex": ["f", f"{MARK_TEXT}S", "m", None, "f"],
            "age": [10.0, 31337.5, f"{MARK_TEXT}A", 5.0, np.nan],
        }
    )


def _assert_clean(text: str) -> None:
    assert MARK_TEXT not in text
    for number in MARK_NUMBERS:
        assert number not in text, number
        assert number.replace(".", ",") not in text
    assert "987654" not in text and "31337" not in text


@pytest.mark.parametrize("policy", ["reject", "drop"])
@pytest.mark.parametrize("source", ["frame", "csv", "parquet"])
def test_no_data_value_leaks_into_errors_logs_or_warnings(tmp_path, caplog, policy, source):
    spec = make_spec(missing=policy, outcome={"column": "y", "bound": 1.0, "policy": "reject"})
    frame = _leaky_frame()
    if source == "frame":
        src = frame
    elif source == "csv":
        src = tmp_path / "leak.csv"
        frame.to_csv(src, index=False)
    else:
        src = tmp_path / "leak.parquet"
        frame.astype(str).to_parquet(src)
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(SiteDataError) as info:
        warnings.simplefilter("always")
        prepare_site_data(src, spec)
    exc = info.value
    assert exc.problems  # it did find the problems
    assert {p.column for p in exc.problems} == {"w", "y", "sex", "age"}
    texts = [
        str(exc),
        repr(exc),
        *(p.describe() for p in exc.problems),
        *(repr(p) for p in exc.problems),
        "".join(traceback.format_exception(exc)),
        caplog.text,
        *(str(w.message) for w in caught),
    ]
    for text in texts:
        _assert_clean(text)
    assert exc.__context__ is None and exc.__cause__ is None
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc)


def test_unparseable_csv_is_redacted(tmp_path):
    path = tmp_path / "broken.csv"
    path.write_text(f"w,y,sex,age\n0,0.5,f,10\n1,0.5,{MARK_TEXT},987654.125,extra,fields\n")
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(path, make_spec())
    assert "could not read" in str(info.value)
    _assert_clean(str(info.value) + "".join(traceback.format_exception(info.value)))
    assert info.value.__context__ is None


@pytest.mark.parametrize("n_edges", [3, 33, 200])  # branch-free count and binary search
def test_binning_matches_digitize(n_edges):
    rng = np.random.default_rng(n_edges)
    edges = np.unique(np.round(rng.uniform(0, 100, n_edges), 3)).tolist()
    spec = make_spec(
        covariates=[
            {"kind": "numeric", "column": "v", "edges": edges},
            {"kind": "categorical", "column": "g", "levels": [7, 5], "other": 9},
        ]
    )
    v = rng.uniform(edges[0], edges[-1], 5000)
    v[: len(edges)] = edges  # every edge itself
    g = rng.choice([5, 7, 8, 9], 5000)
    frame = pd.DataFrame({"w": rng.integers(0, 2, 5000), "y": rng.random(5000), "v": v, "g": g})
    data = prepare_site_data(frame, spec)
    bins = np.minimum(np.digitize(v, edges[1:-1], right=False), len(edges) - 2)
    gcode = np.select([g == 7, g == 5], [0, 1], 2)
    np.testing.assert_array_equal(data.x, bins * 3 + gcode)
    assert data.domain_size == (len(edges) - 1) * 3
    assert data.report.mapped_to_other == {
        "g": int((g == 8).sum())
    }  # 9 is the "other" level itself


def test_no_leak_with_labels_integer_levels_and_finite_edges(tmp_path, caplog):
    spec = make_spec(
        treatment={"column": "w", "treated": "small", "control": "regular"},
        outcome={"column": "y", "bound": 1.0, "offset": 0.5, "policy": "reject"},
        covariates=[
            {"kind": "categorical", "column": "grade", "levels": [1, 2, 3]},
            {"kind": "numeric", "column": "age", "edges": [0, 18, 65, 120]},
        ],
    )
    frame = pd.DataFrame(
        {
            "w": ["small", f"{MARK_TEXT}L", "regular", "regular"],
            "y": [0.7, 1.2, 31337.5, 0.4],
            "grade": [1, 424242, 3, 987654.125],
            "age": [30.0, 31337.5, -987654.125, 5.0],
        }
    )
    path = tmp_path / "leak2.csv"
    frame.to_csv(path, index=False)
    caplog.set_level(logging.DEBUG)
    for src in (frame, path):
        with pytest.raises(SiteDataError) as info:
            prepare_site_data(src, spec)
        got = {(p.column, p.rule.split(" (")[0]): p.rows for p in info.value.problems}
        assert got == {
            ("w", "not one of the two treatment labels in the spec"): (1,),
            ("y", "outside [0, B] after the offset"): (2, 3),
            ("grade", "not one of the declared levels"): (1, 3),
            ("age", "outside the declared bin edges"): (1, 2),
        }
        for text in (str(info.value), repr(info.value), caplog.text):
            _assert_clean(text)


@settings(max_examples=40)
@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_strata_are_the_mixed_radix_number_of_the_public_codes(sizes, n, seed):
    rng = np.random.default_rng(seed)
    covariates, columns, codes = [], {}, []
    for k, size in enumerate(sizes):
        code = rng.integers(0, size, n)
        if k % 2 == 0:  # categorical, levels in a shuffled order
            levels = [f"L{k}_{i}" for i in rng.permutation(size)]
            covariates.append({"kind": "categorical", "column": f"c{k}", "levels": levels})
            columns[f"c{k}"] = np.array(levels, dtype=object)[code]
        else:  # numeric, values drawn inside their bins (edges included)
            edges = np.cumsum(rng.uniform(0.5, 3.0, size + 1)).round(3)
            covariates.append({"kind": "numeric", "column": f"c{k}", "edges": edges.tolist()})
            lo, hi = edges[code], edges[code + 1]
            v = lo + (hi - lo) * rng.uniform(0, 0.999, n)
            at_edge = rng.random(n) < 0.2
            v[at_edge] = lo[at_edge]  # lower edges belong to their bin
            columns[f"c{k}"] = v
        codes.append(code)
    spec = make_spec(covariates=covariates)
    frame = pd.DataFrame({"w": rng.integers(0, 2, n), "y": rng.random(n), **columns})
    data = prepare_site_data(frame, spec)
    expected = np.zeros(n, dtype=np.int64)
    for size, code in zip(sizes, codes, strict=True):
        expected = expected * size + code
    np.testing.assert_array_equal(data.x, expected)
    assert data.domain_size == int(np.prod(sizes))


@pytest.mark.parametrize("missing", ["reject", "drop"])
def test_nullable_integer_treatment_follows_the_missing_policy(missing):
    frame = good_frame(5)
    frame["w"] = pd.array([0, 1, None, 1, 0], dtype="Int64")
    spec = make_spec(missing=missing)
    if missing == "drop":
        data = prepare_site_data(frame, spec)
        assert data.w.tolist() == [0, 1, 1, 0] and data.report.dropped_missing == 1
    else:
        with pytest.raises(SiteDataError) as info:
            prepare_site_data(frame, spec)
        (p,) = info.value.problems
        assert (p.column, p.rows) == ("w", (2,)) and "missing" in p.rule


@pytest.mark.parametrize("policy", ["reject", "drop"])
def test_outcome_labels_are_mapped_and_unknown_labels_reported_without_values(tmp_path, policy):
    spec = make_spec(outcome={"labels": {"Yes": 1, "No": 0}}, missing=policy)
    frame = good_frame(50)
    frame["y"] = np.where(frame["w"] == 1, "Yes", "No")
    data = prepare_site_data(frame, spec)
    np.testing.assert_array_equal(data.y, (frame["w"] == 1).to_numpy().astype(float))
    path = tmp_path / "labels.csv"
    frame.to_csv(path, index=False)
    np.testing.assert_array_equal(prepare_site_data(path, spec).y, data.y)
    frame.loc[[4, 9], "y"] = "Maybe-7391"
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(frame, spec)
    [p] = info.value.problems
    assert (p.column, p.rule, p.count, p.rows) == (
        "y",
        "not one of the outcome labels in the spec",
        2,
        (4, 9),
    )
    assert "Maybe" not in str(info.value) and "7391" not in str(info.value)
