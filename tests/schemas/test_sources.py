"""Site data sources (schemas/sources.py, source_*.py, site_batches.py, site_statistics.py):
Parquet files and datasets, CSV and SQL read in batches
give what one pass gives, word for word in errors; credentials never appear in a message."""

from __future__ import annotations

import itertools
import sqlite3
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpate.schemas.site_batches import iter_site_batches, prepare_source
from dpate.schemas.site_errors import SiteDataError
from dpate.schemas.site_preparation import prepare_site_data
from dpate.schemas.site_reading import read_site_table
from dpate.schemas.site_statistics import stream_cell_statistics
from dpate.schemas.source_csv import CsvSource
from dpate.schemas.source_parquet import ParquetDatasetSource, ParquetFileSource
from dpate.schemas.source_redaction import is_sql_url, redact_location
from dpate.schemas.source_sql import SqlSource
from dpate.schemas.sources import open_source
from dpate_core.grid_sums import cell_statistics

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
    """A frame with problems spread over many rows (so over many small batches)."""
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
        prepare_source(source, spec, **kw)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# batches give what one pass gives


@pytest.mark.parametrize("fmt", ["csv", "parquet", "dataset"])
@pytest.mark.parametrize("missing", ["reject", "drop"])
def test_batches_equal_one_pass_in_data_and_in_errors(tmp_path, fmt, missing):
    spec = make_spec(missing=missing, outcome=REJECT)
    good, bad = good_frame(1000, 3), bad_frame()
    good.loc[[10, 500], "age"] = np.nan  # dropped, or refused
    paths = {}
    for name, frame in (("good", good), ("bad", bad)):
        if fmt == "csv":
            path = tmp_path / f"{name}.csv"
            frame.to_csv(path, index=False)
        elif fmt == "parquet":
            path = tmp_path / f"{name}.parquet"
            frame.astype({"w": str, "y": str, "age": str} if name == "bad" else {}).to_parquet(
                path, row_group_size=64
            )
        else:  # a directory of files read in path order
            path = tmp_path / name
            path.mkdir()
            cut = [0, 7, 300, len(frame)] if name == "good" else [0, 7, 30, len(frame)]
            for i, (a, b) in enumerate(itertools.pairwise(cut)):
                part = frame.iloc[a:b]
                part.astype({"w": str, "y": str, "age": str} if name == "bad" else {}).to_parquet(
                    path / f"part-{i}.parquet"
                )
        paths[name] = path
    # the pandas (in-memory) path is today's single pass
    if missing == "drop":
        one = prepare_site_data(good, spec)
        for rows in (7, 64, 10_000):
            assert_same(prepare_source(paths["good"], spec, batch_rows=rows), one)
        assert one.report.dropped_missing == 2
    else:
        text = error_text(paths["good"], spec, batch_rows=10_000)
        assert "2 row(s) missing or not finite" in text and "rows 10, 500" in text
        for rows in (7, 64):
            assert error_text(paths["good"], spec, batch_rows=rows) == text
    expected = error_text(paths["bad"], spec, batch_rows=10_000)
    for rows in (1, 2, 5, 16):
        assert error_text(paths["bad"], spec, batch_rows=rows) == expected
    assert "13 row(s) outside [0, B]" in expected and "rows 5, 6, 30, 31, 32, 33, 34" in expected


def test_prepare_site_data_reads_a_location_in_batches(tmp_path):
    spec = make_spec()
    frame = good_frame(3000, 5)
    path = tmp_path / "d.parquet"
    frame.to_parquet(path, row_group_size=500)
    data = prepare_site_data(path, spec)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    assert data.report.n_read == data.n == 3000
    batches = list(iter_site_batches(path, spec, batch_rows=700))
    assert all(0 < b.n <= 700 for b in batches) and batches[0].offset == 0
    assert [b.offset for b in batches[1:]] == list(np.cumsum([b.n for b in batches[:-1]]))
    assert "y=" not in repr(batches[0]) and repr(batches[0]).startswith("SiteBatch(offset=0")
    np.testing.assert_array_equal(np.concatenate([b.y for b in batches]), data.y)


def test_iter_site_batches_stops_at_the_first_bad_batch_and_reports_every_problem(tmp_path):
    spec = make_spec(outcome=REJECT)
    frame = good_frame(100, 2)
    frame.loc[[15, 95], "y"] = 5.0
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    seen = []
    with pytest.raises(SiteDataError) as info:
        for b in iter_site_batches(path, spec, batch_rows=10):
            seen.append(b.offset)
    assert seen == [0]  # the batch at 10 failed: nothing after it is yielded
    assert "2 row(s) outside [0, B]" in str(info.value) and "(rows 15, 95)" in str(info.value)
    assert info.value.n_rows == 100


def test_hive_partitioned_dataset(tmp_path):
    spec = make_spec()
    frame = good_frame(2000, 7)
    frame["year"] = np.where(np.arange(2000) < 1200, 2023, 2024)
    root = tmp_path / "ds"
    for year, part in frame.groupby("year"):
        (root / f"year={year}").mkdir(parents=True)
        part.drop(columns="year").to_parquet(root / f"year={year}" / "part-0.parquet")
    src = open_source(root, spec)
    assert isinstance(src, ParquetDatasetSource) and src.count_rows() == 2000
    data = prepare_source(root, spec, batch_rows=256)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    np.testing.assert_array_equal(data.y, frame["y"].to_numpy())
    # a partition key may be a study column: the treatment here
    spec2 = make_spec(treatment={"column": "arm"})
    root2 = tmp_path / "ds2"
    for arm, part in frame.groupby("w"):
        (root2 / f"arm={arm}").mkdir(parents=True)
        part.drop(columns=["w", "year"]).to_parquet(root2 / f"arm={arm}" / "p.parquet")
    data2 = prepare_source(root2, spec2, fmt="parquet-dataset")
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


def test_an_unknown_level_only_in_dropped_rows_is_not_an_error():
    # (binning used to require an 'other' level for any unknown category in the column)
    spec = make_spec(missing="drop")
    f = pd.DataFrame(
        {"w": [0, 1, 1, 0], "y": [0.5, np.nan, 0.2, 0.3], "sex": ["f", "zz", "m", "f"]}
        | {"age": [10.0, 20.0, 30.0, 40.0]}
    )
    data = prepare_site_data(f, spec)
    assert data.n == 3 and data.report.mapped_to_other == {}


@pytest.mark.parametrize("later", ["stable", "widens", "text"])
def test_csv_streams_only_when_it_gives_one_reads_types(tmp_path, later):
    spec = make_spec(outcome=REJECT)
    frame = good_frame(6000, 8)
    frame["age"] = np.floor(frame["age"]).astype(np.int64).astype(object)  # ints in every block
    if later == "widens":
        frame.loc[5000, "age"] = 12.5  # one read widens the column to float64; a stream fails
    elif later == "text":
        frame.loc[[5000, 5500], "age"] = "abc"  # one read: strings, 'not a number' at 5000, 5500
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    src = CsvSource(str(path), block_size=4096)
    assert src._streams(spec) is (later == "stable")
    one = None
    try:
        one = prepare_site_data(read_site_table(path, spec), spec)  # the single read
    except SiteDataError as exc:
        one_text = str(exc)
    if later == "text":
        assert one is None and "2 row(s) not a number (rows 5000, 5500)" in one_text
        assert error_text(src, spec, batch_rows=1000) == one_text
    else:
        assert_same(prepare_source(src, spec, batch_rows=1000), one)
        assert src.count_rows() == (6000 if later == "stable" else None)  # the parsing pass's
        if later == "widens":
            assert prepare_source(src, spec).x[5000] == one.x[5000]


# ---------------------------------------------------------------------------------------------
# streaming sufficient statistics


@pytest.mark.parametrize("missing", ["reject", "drop"])
def test_stream_cell_statistics_equal_one_pass(tmp_path, missing):
    spec = make_spec(missing=missing, estimator="adjusted")
    frame = good_frame(5000, 11)
    if missing == "drop":
        frame.loc[np.arange(0, 5000, 3), "age"] = np.nan  # 1667 dropped: N 3333 needs another grid
    path = tmp_path / "d.parquet"
    frame.to_parquet(path, row_group_size=1000)
    data = prepare_site_data(path, spec)
    ref = cell_statistics(data.w, data.y, data.x, domain_size=data.domain_size, bound=data.bound)
    for hint in (None, 10, 5000, 10**9):
        stats, report = stream_cell_statistics(path, spec, batch_rows=333, n_hint=hint)
        assert (stats.k, stats.m) == (ref.k, ref.m)
        for name in ("counts", "sums", "squares"):
            np.testing.assert_array_equal(getattr(stats, name), getattr(ref, name))
        assert report == data.report


def test_stream_cell_statistics_refuses_bad_data(tmp_path):
    spec = make_spec(estimator="adjusted", outcome=REJECT)
    frame = good_frame(100)
    frame.loc[99, "y"] = 2.0
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    with pytest.raises(SiteDataError, match=r"1 row\(s\) outside \[0, B\].*rows 99"):
        stream_cell_statistics(path, spec, batch_rows=10)


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
    ref = prepare_source(tmp_path / "d.parquet", make_spec(missing="drop"))
    src = open_source(url, spec, "csv", query="SELECT * FROM records ORDER BY id")
    assert isinstance(src, SqlSource)  # a database URL whatever the spec's format says
    assert_same(prepare_source(src, make_spec(missing="drop"), batch_rows=512), ref)
    monkeypatch.setenv("DPATE_DATA_QUERY", "records")
    assert_same(prepare_source(url, make_spec(missing="drop"), batch_rows=1000), ref)
    text = error_text(url, spec, batch_rows=100)
    assert "column 'sex': 2 row(s) missing or not finite" in text and "(rows 7, 2500)" in text
    monkeypatch.setenv("DPATE_DATA_QUERY", "SELECT w, y, age FROM records")
    assert "lacks the column(s) ['sex']" in error_text(url, spec)


def test_sql_query_text_is_sent_as_written(tmp_path):
    # no bind-parameter parsing of ':' or '%' in the site's query
    spec = make_spec()
    frame = good_frame(50, 6)
    url = _sqlite(tmp_path, frame)
    q = "SELECT * FROM records WHERE sex LIKE '%' OR sex = 'a:b' ORDER BY id"
    data = prepare_source(url, spec, query=q)
    np.testing.assert_array_equal(data.x, expected_strata(frame))
    stats, _ = stream_cell_statistics(url, make_spec(estimator="adjusted"), query=q)
    assert stats.n == 50


def test_sql_source_needs_a_query(tmp_path, monkeypatch):
    monkeypatch.delenv("DPATE_DATA_QUERY", raising=False)
    with pytest.raises(SiteDataError, match="DPATE_DATA_QUERY"):
        open_source("postgresql+psycopg://u:hunter2@db.example/x", make_spec())


def test_sql_text_labels_and_nulls(tmp_path):
    spec = make_spec(treatment={"column": "arm", "treated": "drug", "control": "placebo"})
    frame = good_frame(300, 9)
    frame["arm"] = np.where(frame["w"] == 1, "drug", "placebo")
    url = _sqlite(tmp_path, frame)
    data = prepare_source(url, spec, query="SELECT * FROM records ORDER BY id", batch_rows=64)
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
    src = open_source(url, make_spec(), query="SELECT * FROM t")
    assert "hunter2" not in repr(src) and "hunter2" not in src.name


def test_file_urls_lose_passwords_and_secret_query_values():
    shown = redact_location("s3://key:hunter2@bucket/d.parquet?X-Amz-Signature=hunter2&v=1")
    assert "hunter2" not in shown and "v=1" in shown and "s3://key:***@bucket/d.parquet" in shown
    assert redact_location("/data/site.parquet") == "/data/site.parquet"
    assert not is_sql_url("s3://bucket/x.parquet") and not is_sql_url("/tmp/a.csv")


def test_password_from_a_prefect_secret_block(tmp_path, monkeypatch):
    import dpate.schemas.source_sql as source_sql

    seen = {}

    def fake_secret(name):
        seen["name"] = name
        return "hunter2"

    monkeypatch.setattr(source_sql, "_secret_value", fake_secret)
    src = open_source(
        "postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t", secret="site-db"
    )
    engine = src._engine()
    assert engine.url.password == "hunter2" and seen == {"name": "site-db"}
    text = error_text(src, make_spec())
    assert "hunter2" not in text


def test_secret_block_is_loaded_by_name_and_its_value_never_shown(monkeypatch):
    """``_secret_value`` loads the Prefect Secret block named by the site (DPATE_DATA_SECRET or
    the site config's ``data_secret``); a block that cannot be loaded is named, its error's type
    only is kept, and the value never appears in a message."""
    from prefect.blocks.system import Secret

    import dpate.schemas.source_sql as source_sql

    class Loaded:
        def get(self):
            return "hunter2-from-block"

    def load(name, *args, **kwargs):
        if name == "site-db":
            return Loaded()
        raise ValueError(f"Unable to find block document named {name}: hunter2-from-block")

    monkeypatch.setattr(Secret, "load", load)
    assert source_sql._secret_value("site-db") == "hunter2-from-block"
    with pytest.raises(SiteDataError) as info:
        source_sql._secret_value("absent-block")
    text = str(info.value)
    assert "'absent-block'" in text and "ValueError" in text and "DPATE_DATA_SECRET" in text
    assert "hunter2" not in text and info.value.__context__ is None
    # through a source: the engine's URL carries the value, messages never do
    monkeypatch.setenv("DPATE_DATA_SECRET", "site-db")
    src = open_source("postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t")
    assert src.secret == "site-db" and src._engine().url.password == "hunter2-from-block"
    text = error_text(src, make_spec())
    assert "hunter2" not in text and "as sql" in text
    monkeypatch.setenv("DPATE_DATA_SECRET", "absent-block")
    text = error_text(
        open_source("postgresql+psycopg://alice@127.0.0.1:1/test", make_spec(), query="t"),
        make_spec(),
    )
    assert "'absent-block'" in text and "hunter2" not in text


def test_source_kinds():
    spec = make_spec()
    assert isinstance(open_source("a.csv.gz", spec), CsvSource)
    assert isinstance(open_source("a.pq", spec), ParquetFileSource)
    assert isinstance(open_source("s3://bucket/site/", spec), ParquetDatasetSource)
    assert isinstance(open_source("s3://b/x", spec, "parquet-dataset"), ParquetDatasetSource)
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
    ref = prepare_source(path, spec)
    assert ref.report.n_read == n and ref.report.dropped_missing == 50
    monkeypatch.setenv("DPATE_DATA_QUERY", f"SELECT * FROM {schema}.records ORDER BY id")
    got = prepare_site_data(PG_URL, spec)  # the release path
    assert_same(got, ref)
    stats, report = stream_cell_statistics(PG_URL, spec, batch_rows=200_000)
    want = cell_statistics(ref.w, ref.y, ref.x, domain_size=ref.domain_size, bound=ref.bound)
    np.testing.assert_array_equal(stats.sums, want.sums)
    np.testing.assert_array_equal(stats.counts, want.counts)
    assert report == ref.report
    # reject: the 50 missing values are reported with positions in the query's order
    text = error_text(PG_URL, make_spec(), batch_rows=300_000)
    assert "column 'sex': 50 row(s) missing or not finite" in text
    assert text == error_text(path, make_spec(), batch_rows=1 << 20)


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
        stats, report = stream_cell_statistics(
            PG_URL, make_spec(estimator="adjusted", missing="drop"), query=q
        )
        assert report.n_read == 3 and stats.n == 1  # the NaN outcome and the NULL sex dropped
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
