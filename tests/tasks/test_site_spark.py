"""Spark as a site's engine (local mode; a cluster is the same code with its master URL,
docs/how-to/deploying.md): every estimator releases the records path's bytes, the sums are the core
kernel's on adversarial values, and bad data gives DuckDB's redacted errors word for word. One
Spark session serves the module (starting one takes 15-40 s)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpate.schemas.site_data import SiteDataError, prepare_site_data, site_statistics
from dpate.settings import resolve_site
from tests.schemas.test_site_data import make_spec
from tests.schemas.test_site_exact_sums import adversarial, core_cells
from tests.schemas.test_sources import REJECT, bad_frame

from .test_site_sources import (
    ESTIMATORS,
    assert_releases_like_the_records,
    study_of,
    with_missing_values,
)

pytestmark = pytest.mark.spark

SPARK = "spark://local[2]"


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (17) on the PATH")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # the JVM's client compiler only and one GC thread: a test session's few short jobs
        # never reach the server compiler's pay-off (the JVM's CPU 41 s -> 23 s, measured)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def query_of(path) -> str:
    return f"SELECT * FROM parquet.`{path}`"


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_releases_from_spark_as_from_the_records(
    spark, tmp_path, monkeypatch, estimator
):
    s = study_of(tmp_path / estimator, monkeypatch, estimator)
    table = with_missing_values(s, "north")
    path = tmp_path / "north.parquet"
    pq.write_table(table, path)
    monkeypatch.setenv("DPATE_DATA_PATH", SPARK)
    monkeypatch.setenv("DPATE_DATA_QUERY", query_of(path))
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.data_location == SPARK
    # one seed (each Spark job costs seconds; the DuckDB tests show seeds change the bytes)
    records = prepare_site_data(table, ctx.spec)
    assert_releases_like_the_records(ctx, records, monkeypatch, seeds=(3,))


def test_spark_sums_equal_the_core_kernel_on_adversarial_values(spark, tmp_path):
    bound, offset = 1.0 / 3.0, -1.25
    frame = adversarial(bound, offset, True)
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    spec = make_spec(
        estimator="adjusted",
        outcome={"column": "y", "bound": bound, "offset": offset, "policy": "clip"},
    )
    got = site_statistics(SPARK, spec, query=query_of(path), matching=False).cells
    want = core_cells(frame, bound, offset, True)
    for name in ("counts", "sums", "squares"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_spark_gives_duckdbs_errors_word_for_word(spark, tmp_path):
    spec = make_spec(outcome=REJECT)
    path = tmp_path / "bad.parquet"
    bad_frame().astype({"w": str, "y": str}).to_parquet(path)
    texts = []
    for source, kw in ((path, {}), (SPARK, {"query": query_of(path)})):
        with pytest.raises(SiteDataError) as info:
            prepare_site_data(source, spec, **kw)
        texts.append(str(info.value))
    # and the release path (grouped codes, a query per rule for its positions)
    with pytest.raises(SiteDataError) as info:
        site_statistics(
            SPARK, make_spec(outcome=REJECT, estimator="adjusted"), query=query_of(path)
        )
    texts.append(str(info.value))
    assert texts[0] == texts[1] == texts[2]
    assert "13 row(s) outside [0, B]" in texts[1] and "(rows 3, 17, 41)" in texts[1]
