"""Site data sources (dpate.schemas.site_data): CSV, Parquet files and partitioned datasets
(DuckDB), SQL databases (SQLite here, PostgreSQL below) and in-memory frames are read through one
engine path and give the same records, reports and errors, word for word; credentials never
appear in a message."""

from __future__ import annotations

import itertools
import math
import sqlite3
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpate.schemas.site_data import (
    SiteDataError,
    is_sql_url,
    open_site_table,
    prepare_site_data,
    redact_location,
    site_statistics,
)
from dpate_core.statistics import cell_statistics

from .test_site_data import expected_strata, good_frame, make_spec

PG = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG, connect_timeout=3):
            return None
    except Exception as exc:  # the reason is shown in the skip message
        return f"PostgreSQL at 127.0.0.1:5432/test is unreachable ({type(exc).__name__}: {exc})"


REJECT = {"column": "y", "bound": 1.0, "policy": "reject"}


def bad_frame(n: int = 50, seed: int = 1) -> pd.DataFrame:
    """A frame with problems spread over many rows."""
    f = good_frame(n, seed).astype({"w": object, "y": object, "sex": object, "age": object})
    f.loc[[3, 17, 41], "w"] = "x"  # not a number
    f.loc[[5, 6, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40], "y"] = 7.5  # above B
    f.loc[[2, 44], "sex"] = "u"  # not a level
    f.loc[[9, 27], "age"] = np.nan  # missing
    f.loc[[12], "age"] = -3.0  # outside the edges
    return f


def assert_same(a, b) -> None:
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.x, b.x)
    assert a.w.dtype == b.w.dtype and a.y.dtype == b.y.dtype and a.x.dtype == b.x.dtype
    assert a.domain_size == b.domain_size and a.bound == b.bound
    assert a.report == b.report


def error_text(source, spec, **kw) -> str:
    with pytest.raises(SiteDataError) as info:
        prepare_site_data(source, spec, **kw)
    return str(info.value)


def write_source(frame: pd.DataFrame, tmp_path, fmt: str, name: str, text: tuple[str, ...] = ()):
    """``frame`` as a CSV file, a Parquet file (``text`` columns stored as strings) or a
    directory of three Parquet files read in path order."""
    if fmt == "csv":
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, index=False)
        return path
    stored = frame.astype(dict.fromkeys(text, str))
    if fmt == "parquet":
        path = tmp_path / f"{name}.parquet"
        stored.to_parquet(path, row_group_size=64)
        return path
    path = tmp_path / name
    path.mkdir()
    cut = [0, 7, min(30, len(frame)), len(frame)]
    for i, (lo, hi) in enumerate(itertools.pairwise(cut)):
        stored.iloc[lo:hi].to_parquet(path / f"part-{i}.parquet")
    return path


# ---------------------------------------------------------------------------------------------
# every source gives what the in-memory frame gives


@pytest.mark.parametrize("fmt", ["csv", "parquet", "dataset"])
@pytest.mark.parametrize("missing", ["reject", "drop"])
def test_files_equal_the_frame_in_data_and_in_errors(tmp_path, fmt, missing):
    spec = make_spec(missing=missing, outcome=REJECT)
    good, bad = good_frame(1000, 3), bad_frame()
    good.loc[[10, 500], "age"] = np.nan  # dropped, or refused
    good_path = write_source(good, tmp_path, fmt, "good")
    bad_path = write_source(bad, tmp_path, fmt, "bad", text=("w", "y", "age"))
    if missing == "drop":
        one = prepare_site_data(good, spec)
        assert_same(prepare_site_data(good_path, spec), one)
        assert one.report.dropped_missing == 2
    else:
        text = error_text(good_path, spec)
        assert "2 row(s) missing or not finite" in text and "rows 10, 500" in text
        assert error_text(good, spec) == text
    expected = error_text(bad_path, spec)
    assert "13 row(s) outside [0, B]" in expected and "rows 5, 6, 30, 31, 32, 33, 34" in expected
    if fmt == "csv":  # (a Parquet file stores "nan" text for the missing ages: not a number)
        assert error_text(bad, spec) == expected
    # the release path (grouped codes, then a query per rule for its positions) says the same
    for path, want in ((bad_path, expected), (good_path, None)):
        if want is None and missing == "drop":
            continue
        with pytest.raises(SiteDataError) as info:
            site_statistics(path, make_spec(missing=missing, outcome=REJECT, estimator="adjusted"))
        assert str(info.value) == (want or error_text(good_path, spec))


def test_prepare_site_data_reads_a_location(tmp_path):
    spec = make_spec()
    frame = good_frame(3000, 5)
    path = tmp_path / "d.parquet"
    frame.to_parquet(path, row_group_size=500)
    data = prepare_site_data(path, spec)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    np.testing.assert_array_equal(data.y, frame["y"].to_numpy())
    assert data.report.n_read == data.n == 3000
    assert repr(data) == "SiteData(n=3000, domain_size=6, bound=1.0)"


def test_hive_partitioned_dataset(tmp_path):
    spec = make_spec()
    frame = good_frame(2000, 7)
    frame["year"] = np.where(np.arange(2000) < 1200, 2023, 2024)
    root = tmp_path / "ds"
    for year, part in frame.groupby("year"):
        (root / f"year={year}").mkdir(parents=True)
        part.drop(columns="year").to_parquet(root / f"year={year}" / "part-0.parquet")
    site = open_site_table(root, ["w", "y", "sex", "age", "year"])
    assert site.kind == "parquet-dataset" and "year" in site.columns
    site.close()
    data = prepare_site_data(root, spec)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    np.testing.assert_array_equal(data.y, frame["y"].to_numpy())
    # a partition key may be a study column: the treatment here
    spec2 = make_spec(treatment={"column": "arm"})
    root2 = tmp_path / "ds2"
    for arm, part in frame.groupby("w"):
        (root2 / f"arm={arm}").mkdir(parents=True)
        part.drop(columns=["w", "year"]).to_parquet(root2 / f"arm={arm}" / "p.parquet")
    data2 = prepare_site_data(root2, spec2, fmt="parquet-dataset")
    order = np.argsort(frame["w"].to_numpy(), kind="stable")  # files in path order
    np.testing.assert_array_equal(data2.w, frame["w"].to_numpy()[order])
    np.testing.assert_array_equal(data2.y, frame["y"].to_numpy()[order])


def test_missing_columns_and_unreadable_files_are_named_without_contents(tmp_path):
    spec = make_spec()
    path = tmp_path / "d.parquet"
    good_frame(20).drop(columns="age").to_parquet(path)
    assert "lacks the column(s) ['age']" in error_text(path, spec)
    ds = tmp_path / "ds"
    ds.mkdir()
    good_frame(20).drop(columns="sex").to_parquet(ds / "a.parquet")
    assert "lacks the column(s) ['sex']" in error_text(ds, spec)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 QXLEAKMARK not parquet")
    text = error_text(broken, spec)
    assert "could not read" in text and "as parquet" in text and "QXLEAKMARK" not in text
    assert "not found at" in error_text(tmp_path / "nope.parquet", spec)
    assert "not found at" in error_text(tmp_path / "nope", spec, fmt="parquet-dataset")


def test_an_unknown_level_only_in_dropped_rows_is_not_an_error():
    spec = make_spec(missing="drop")
    f = pd.DataFrame(
        {"w": [0, 1, 1, 0], "y": [0.5, np.nan, 0.2, 0.3], "sex": ["f", "zz", "m", "f"]}
        | {"age": [10.0, 20.0, 30.0, 40.0]}
    )
    data = prepare_site_data(f, spec)
    assert data.n == 3 and data.report.mapped_to_other == {}


@pytest.mark.parametrize("later", ["stable", "widens", "text"])
def test_csv_values_are_typed_as_one_read_types_them(tmp_path, later):
    """A CSV column's values are converted by the spec's rules, whatever the rows before them
    looked like: integers then a decimal, or numbers then text."""
    spec = make_spec(outcome=REJECT)
    frame = good_frame(6000, 8)
    frame["age"] = np.floor(frame["age"]).astype(np.int64).astype(object)  # ints in every row
    if later == "widens":
        frame.loc[5000, "age"] = 12.5
    elif later == "text":
        frame.loc[[5000, 5500], "age"] = "abc"
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    if later == "text":
        text = error_text(path, spec)
        assert "2 row(s) not a number (rows 5000, 5500)" in text
        assert error_text(frame, spec) == text
    else:
        data = prepare_site_data(path, spec)
        assert_same(data, prepare_site_data(frame.astype({"age": float}), spec))
        if later == "widens":
            assert data.x[5000] == expected_strata(frame.astype({"age": float}))[5000]


# ---------------------------------------------------------------------------------------------
# the statistics a release reads


@pytest.mark.parametrize("fmt", ["csv", "parquet", "dataset"])
@pytest.mark.parametrize("missing", ["reject", "drop"])
def test_site_statistics_equal_the_core_on_the_records(tmp_path, fmt, missing):
    spec = make_spec(missing=missing, estimator="adjusted")
    frame = good_frame(5000, 11)
    if missing == "drop":
        frame.loc[np.arange(0, 5000, 3), "age"] = np.nan  # 1667 dropped: N 3333, another grid
    path = write_source(frame, tmp_path, fmt, "d")
    data = prepare_site_data(path, spec)
    ref = cell_statistics(data.w, data.y, data.x, domain_size=data.domain_size, bound=data.bound)
    stats = site_statistics(path, spec)
    assert (stats.cells.k, stats.cells.m) == (ref.k, ref.m) and stats.matching is None
    for name in ("counts", "sums", "squares"):
        np.testing.assert_array_equal(getattr(stats.cells, name), getattr(ref, name))
    assert stats.report == data.report
    assert repr(stats) == "SiteStatistics(cells=12)"


def test_site_statistics_refuse_bad_data(tmp_path):
    spec = make_spec(estimator="adjusted", outcome=REJECT)
    frame = good_frame(100)
    frame.loc[99, "y"] = 2.0
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    with pytest.raises(SiteDataError, match=r"1 row\(s\) outside \[0, B\].*rows 99"):
        site_statistics(path, spec)


# ---------------------------------------------------------------------------------------------
# SQL (SQLite here, PostgreSQL below)


def _sqlite(tmp_path, frame: pd.DataFrame) -> str:
    db = tmp_path / "site.db"
    with sqlite3.connect(db) as conn:
        frame.to_sql("records", conn, index_label="id")
    return f"sqlite:///{db}"


def test_sql_source_reads_a_table_or_a_query_like_parquet(tmp_path, monkeypatch):
    spec = make_spec()
    frame = good_frame(3000, 4)
    frame.loc[[7, 2500], "sex"] = None
    frame.to_parquet(tmp_path / "d.parquet")
    url = _sqlite(tmp_path, frame)
    ref = prepare_site_data(tmp_path / "d.parquet", make_spec(missing="drop"))
    # a database URL whatever the spec's format says
    got = prepare_site_data(
        url, make_spec(missing="drop"), fmt="csv", query="SELECT * FROM records ORDER BY id"
    )
    assert_same(got, ref)
    monkeypatch.setenv("DPATE_DATA_QUERY", "records")
    assert_same(prepare_site_data(url, make_spec(missing="drop")), ref)
    text = error_text(url, spec)
    assert "column 'sex': 2 row(s) missing or not finite" in text and "(rows 7, 2500)" in text
    monkeypatch.setenv("DPATE_DATA_QUERY", "SELECT w, y, age FROM records")
    assert "lacks the column(s) ['sex']" in error_text(url, spec)


def test_sql_query_text_is_sent_as_written(tmp_path):
    # no bind-parameter parsing of ':' or '%' in the site's query
    spec = make_spec()
    frame = good_frame(50, 6)
    url = _sqlite(tmp_path, frame)
    q = "SELECT * FROM records WHERE sex LIKE '%' OR sex = 'a:b' ORDER BY id"
    data = prepare_site_data(url, spec, query=q)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    stats = site_statistics(url, make_spec(estimator="adjusted"), query=q)
    assert stats.n == 50


def test_sql_source_needs_a_query(tmp_path, monkeypatch):
    monkeypatch.delenv("DPATE_DATA_QUERY", raising=False)
    with pytest.raises(SiteDataError, match="DPATE_DATA_QUERY") as info:
        prepare_site_data("postgresql+psycopg://u:hunter2@db.example/x", make_spec())
    assert "hunter2" not in str(info.value)


def test_sql_text_labels_and_nulls(tmp_path):
    spec = make_spec(treatment={"column": "arm", "treated": "drug", "control": "placebo"})
    frame = good_frame(300, 9)
    frame["arm"] = np.where(frame["w"] == 1, "drug", "placebo")
    url = _sqlite(tmp_path, frame)
    data = prepare_site_data(url, spec, query="SELECT * FROM records ORDER BY id")
    np.testing.assert_array_equal(data.w, frame["w"].to_numpy())
    np.testing.assert_array_equal(data.x, expected_strata(frame))


# ---------------------------------------------------------------------------------------------
# credentials never appear


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://alice:hunter2@127.0.0.1:1/test",
        "postgresql://alice:hunter2@127.0.0.1:1/test?sslpassword=hunter2",
        "mysql+pymysql://alice:hunter2@127.0.0.1:1/test",
    ],
)
def test_sql_errors_never_show_the_password(url):
    assert is_sql_url(url)
    shown = redact_location(url)
    assert "hunter2" not in shown and "alice" in shown and "127.0.0.1" in shown
    text = error_text(url, make_spec(), query="SELECT * FROM t")
    assert "hunter2" not in text and "could not read" in text and "as sql" in text
    assert "***" in text


def test_file_urls_lose_passwords_and_secret_query_values():
    shown = redact_location("s3://key:hunter2@bucket/d.parquet?X-Amz-Signature=hunter2&v=1")
    assert "hunter2" not in shown and "v=1" in shown and "s3://key:***@bucket/d.parquet" in shown
    assert redact_location("/data/site.parquet") == "/data/site.parquet"
    assert not is_sql_url("s3://bucket/x.parquet") and not is_sql_url("/tmp/a.csv")


def _spy_connect(monkeypatch) -> list:
    """Record the password each database connection is opened with, and refuse it (a driver
    error whose text quotes the password)."""
    import dpate.schemas.site_data._engine as engine

    seen = []

    def connect(loc, scheme, password):
        seen.append(password)
        raise RuntimeError(f"connection refused for password {password}")

    monkeypatch.setattr(engine, "_connect", connect)
    return seen


def test_password_from_a_prefect_secret_block(monkeypatch):
    import dpate.schemas.site_data._engine as engine

    names = []
    monkeypatch.setattr(engine, "secret_value", lambda name: names.append(name) or "hunter2")
    seen = _spy_connect(monkeypatch)
    text = error_text(
        "postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t", secret="site-db"
    )
    assert seen == ["hunter2"] and names == ["site-db"]
    assert "hunter2" not in text and "as sql" in text and "RuntimeError" in text


def test_secret_block_is_loaded_by_name_and_its_value_never_shown(monkeypatch):
    """``secret_value`` loads the Prefect Secret block named by the site (DPATE_DATA_SECRET or
    the site config's ``data_secret``); a block that cannot be loaded is named, its error's type
    only is kept, and the value never appears in a message."""
    from prefect.blocks.system import Secret

    from dpate.schemas.site_data import secret_value

    class Loaded:
        def get(self):
            return "hunter2-from-block"

    def load(name, *args, **kwargs):
        if name == "site-db":
            return Loaded()
        raise ValueError(f"Unable to find block document named {name}: hunter2-from-block")

    monkeypatch.setattr(Secret, "load", load)
    assert secret_value("site-db") == "hunter2-from-block"
    with pytest.raises(SiteDataError) as info:
        secret_value("absent-block")
    text = str(info.value)
    assert "'absent-block'" in text and "ValueError" in text and "DPATE_DATA_SECRET" in text
    assert "hunter2" not in text and info.value.__context__ is None
    # through a source: the connection gets the value, messages never do
    seen = _spy_connect(monkeypatch)
    monkeypatch.setenv("DPATE_DATA_SECRET", "site-db")
    text = error_text("postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t")
    assert seen == ["hunter2-from-block"] and "hunter2" not in text and "as sql" in text
    monkeypatch.setenv("DPATE_DATA_SECRET", "absent-block")
    text = error_text("postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t")
    assert "'absent-block'" in text and "hunter2" not in text


def test_source_kinds(tmp_path):
    needed = ["w", "y", "sex", "age"]
    frame = good_frame(10)
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_csv(tmp_path / "a.csv.gz", index=False)
    frame.to_parquet(tmp_path / "a.pq")
    (tmp_path / "ds").mkdir()
    frame.to_parquet(tmp_path / "ds" / "p.parquet")
    for name, kind in (
        ("a.csv", "csv"),
        ("a.csv.gz", "csv"),
        ("a.pq", "parquet"),
        ("ds", "parquet-dataset"),
    ):
        site = open_site_table(tmp_path / name, needed)
        assert (
            site.kind == kind and site.dialect == "duckdb" and repr(site).startswith("SiteTable(")
        )
        site.close()
    assert prepare_site_data(tmp_path / "a.csv.gz", make_spec()).n == 10
    d = make_spec().model_dump()
    d["sites"][0]["data"] = "site_a/"
    from dpate.schemas.spec import StudySpec

    assert StudySpec.from_dict(d).site("a").data_format == "parquet-dataset"


# ---------------------------------------------------------------------------------------------
# PostgreSQL: 10^6 generated rows, compared with the same data from Parquet


@pytest.fixture
def pg_table(tmp_path):
    why = _pg_reachable()
    if why:
        pytest.skip(why)
    import psycopg

    n = 1_000_000
    rng = np.random.default_rng(2026)
    frame = pd.DataFrame(
        {
            "id": np.arange(n),
            "w": rng.integers(0, 2, n).astype(np.int16),
            "y": rng.random(n),
            "sex": rng.choice(np.array(["f", "m"], dtype=object), n),
            "age": np.round(rng.uniform(0, 100, n), 3),
        }
    )
    frame["sex"] = frame["sex"].astype(object)
    frame.loc[rng.choice(n, 50, replace=False), "sex"] = None
    assert frame["sex"].isna().sum() == 50
    path = tmp_path / "pg.parquet"
    frame.drop(columns="id").to_parquet(path, row_group_size=100_000)
    schema = f"dpate_src_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.records (id bigint PRIMARY KEY, w smallint, "
            f"y double precision, sex text, age numeric(6, 3))"
        )
        with conn.cursor().copy(f"COPY {schema}.records FROM STDIN") as copy:
            for row in frame.itertuples(index=False):
                copy.write_row([None if v is None or v != v else v for v in row])
    try:
        yield schema, path, n
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.postgres
def test_postgres_million_rows_equal_parquet(pg_table, monkeypatch):
    schema, path, n = pg_table
    spec = make_spec(missing="drop", estimator="adjusted")
    ref = prepare_site_data(path, spec)
    assert ref.report.n_read == n and ref.report.dropped_missing == 50
    monkeypatch.setenv("DPATE_DATA_QUERY", f"SELECT * FROM {schema}.records ORDER BY id")
    assert_same(prepare_site_data(PG_URL, spec), ref)
    stats = site_statistics(PG_URL, spec)  # the release path
    want = cell_statistics(ref.w, ref.y, ref.x, domain_size=ref.domain_size, bound=ref.bound)
    for name in ("counts", "sums", "squares"):
        np.testing.assert_array_equal(getattr(stats.cells, name), getattr(want, name))
    assert stats.report == ref.report
    # reject: the 50 missing values are reported with positions in the query's order
    text = error_text(PG_URL, make_spec())
    assert "column 'sex': 50 row(s) missing or not finite" in text
    assert text == error_text(path, make_spec())


@pytest.mark.postgres
def test_postgres_password_from_the_environment_never_shown(monkeypatch):
    why = _pg_reachable()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("PGPASSWORD", "hunter2")  # trust auth ignores it; libpq reads it
    url = "postgresql+psycopg://postgres:hunter3@127.0.0.1:5432/test"
    text = error_text(url, make_spec(), query="SELECT * FROM dpate_no_such_table_x")
    assert "hunter" not in text and "as sql" in text
    assert pa is not None and pq is not None


@pytest.mark.postgres
def test_postgres_copy_keeps_null_empty_text_and_special_floats_apart():
    why = _pg_reachable()
    if why:
        pytest.skip(why)
    import psycopg

    table = f"dpate_src_{uuid.uuid4().hex[:12]}"
    rows = "(0, 0, 0.5, 'f', 30), (1, 1, 'NaN', 'm', 50), (2, 0, 0.2, '', 70), (3, 1, 0.4, NULL, 1)"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int, w int, y float8, sex text, age float8)")
        conn.execute(f"INSERT INTO {table} VALUES {rows}")
    try:
        # the query as written (no bind-parameter parsing of ':' or '%'); '' is not selected
        q = f"SELECT * FROM {table} WHERE sex LIKE '_%' OR sex = 'a:b' OR sex IS NULL ORDER BY id"
        stats = site_statistics(PG_URL, make_spec(estimator="adjusted", missing="drop"), query=q)
        assert stats.report.n_read == 3 and stats.n == 1  # the NaN outcome and the NULL sex dropped
        text = error_text(PG_URL, make_spec(), query=f"SELECT * FROM {table} ORDER BY id")
        assert (
            "column 'y': 1 row(s) missing or not finite (study policy missing = 'reject') (rows 1)"
            in text
        )
        assert "column 'sex': 1 row(s) missing or not finite" in text and "(rows 3)" in text
        assert (
            "column 'sex': 1 row(s) not one of the declared levels" in text and "(rows 2)" in text
        )
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")


def _outcome_frame(n: int, text: bool) -> pd.DataFrame:
    """``good_frame`` whose outcomes break every outcome rule in a few rows each: clipped below
    and above (finite), NaN, +-inf, missing, and (``text``) present but not a number."""
    f = good_frame(n, 5)
    y: list[object] = list(f["y"])
    for i, v in [(3, -0.5), (4, 1.5), (8, 1e300), (9, -1e300), (10, 0.0), (11, 1.0)]:
        y[i] = v
    for i, v in [(20, math.nan), (21, math.inf), (22, -math.inf), (23, None)]:
        y[i] = v
    if text:
        y = [None if v is None else repr(float(v)) for v in y]  # type: ignore[arg-type]
        y[30], y[31] = "abc", "1,5"
    f["y"] = y
    return f


def _pg_frame(frame: pd.DataFrame, y_type: str) -> str:
    import psycopg

    table = f"dpate_src_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int, w int, y {y_type}, sex text, age float8)")
        with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
            for row in frame.itertuples():
                if y_type == "text":  # pandas' text columns hold a missing value as NaN
                    row = tuple(None if isinstance(v, float) and v != v else v for v in row)
                copy.write_row(row)
    return table


def _release(source, spec, **kw) -> tuple | str:
    """What a release reads: the report and cell statistics, or the error's text."""
    try:
        got = site_statistics(source, spec, **kw)
    except SiteDataError as exc:
        return str(exc)
    cells = got.cells
    arrays = (cells.counts.tolist(), cells.sums.tolist(), cells.squares.tolist())
    return got.report, cells.k, cells.m, *arrays


@pytest.mark.postgres
@pytest.mark.parametrize("y_type", ["float8", "text"])
def test_postgres_outcome_counted_per_group_equals_duckdb(y_type):
    """PostgreSQL counts the outcome's codes per group of the other codes (a FILTER per kind of
    value) where DuckDB groups by them: the same counts, report, sums and errors, whichever
    rules the outcomes break (the missing ones dropped: their groups grouped again)."""
    why = _pg_reachable()
    if why:
        pytest.skip(why)
    import psycopg

    frame = _outcome_frame(400, text=y_type == "text")
    table = _pg_frame(frame, y_type)
    query = f"SELECT w, y, sex, age FROM {table} ORDER BY id"
    try:
        clean = frame.drop(index=[20, 21, 22, 23, 30, 31]).reset_index(drop=True)
        kept = f"{query[:-12]} WHERE id NOT IN (20, 21, 22, 23, 30, 31) ORDER BY id"
        drop = make_spec(estimator="adjusted", missing="drop")
        cases = [
            (drop, frame, query),  # missing outcomes dropped
            (drop, clean, kept),  # clipped only
            (make_spec(estimator="adjusted"), clean, kept),
        ]
        reject = make_spec(estimator="adjusted", outcome=REJECT)
        cases += [(make_spec(estimator="adjusted"), frame, query), (reject, frame, query)]
        results = [(_release(ref, spec), _release(PG_URL, spec, query=q)) for spec, ref, q in cases]
        for want, got in results:
            assert got == want
        # "nan" as text is not a number (refused); as a number, missing (dropped)
        assert isinstance(results[0][0], str) == (y_type == "text")
        assert all(isinstance(r[0], tuple) for r in results[1:3])
        assert all(isinstance(r[0], str) for r in results[3:])
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
