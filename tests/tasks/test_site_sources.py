"""Every estimator releases from every kind of source through one path (the site's engine:
``dpate.schemas.site_data``), and publishes exactly the bytes the records path publishes for the
same records, noise and record order: CSV, Parquet, a partitioned dataset and an in-memory table
here; PostgreSQL below (marked); Spark in tests/tasks/test_site_spark.py (marked). The site task
keeps statistics, never records, and refuses an infeasible site from them before reserving."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import dpate.site.plans
from dpate.ledger import Committed
from dpate.schemas.reports import software_version
from dpate.schemas.site_data import (
    PermutationOrder,
    SiteData,
    SiteStatistics,
    prepare_site_data,
    site_statistics,
)
from dpate.settings import SiteContext, resolve_site
from dpate.site.feasibility import FeasibilityError
from dpate.site.operator_log import SiteDataRejected
from dpate.site.plans import plan_from_records
from dpate.site.reports import site_report_bytes
from dpate.tasks.site import load_site_data, plan_release
from dpate_core.release import draw_once
from tests.pipeline.studies import Site, Study, write_study

from .helpers import COMMITTED_AT

ESTIMATORS = ("adjusted", "dim", "smooth_matching", "global_matching")
PG = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def as_estimator(study: Study, estimator: str, *, missing: str = "reject") -> None:
    text = study.spec.read_text(encoding="utf-8")
    text = text.replace('estimator = "smooth_matching"', f'estimator = "{estimator}"')
    text = text.replace('missing = "reject"', f'missing = "{missing}"')
    if estimator == "dim":  # a randomized trial with public arm sizes (the paper's setting)
        text = text.replace('design = "observational"', 'design = "randomized"')
        text = text.replace("[treatment]", "arm_sizes_public = true\n\n[treatment]")
    study.spec.write_text(text, encoding="utf-8")


def study_of(root: Path, monkeypatch: pytest.MonkeyPatch, estimator: str) -> Study:
    s = write_study(root, [Site("north", 400), Site("south", 90)])
    as_estimator(s, estimator, missing="drop")
    for k, v in s.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    return s


def with_missing_values(study: Study, site: str) -> pa.Table:
    """The site's records with a few missing outcomes and strata (dropped by ``missing =
    "drop"``), as an Arrow table."""
    table = pq.read_table(study.root / "sites" / site / "records.parquet")
    y = table.column("outcome").to_numpy().astype(object)
    y[[4, 50, 51, 200]] = None
    strata = table.column("stratum").to_pylist()
    for j in (7, 8, 333):
        strata[j] = None
    return pa.table(
        {"treated": table.column("treated"), "outcome": pa.array(list(y)), "stratum": strata}
    )


def write_as(study: Study, site: str, table: pa.Table, kind: str) -> str:
    """The site's records written as ``kind``, the spec's data path pointed at them."""
    folder = study.root / "sites" / site
    if kind == "csv":
        rel = f"sites/{site}/records.csv"
        pacsv.write_csv(table, folder / "records.csv")
    elif kind == "parquet":
        rel = f"sites/{site}/records-2.parquet"
        pq.write_table(table, folder / "records-2.parquet", row_group_size=64)
    else:  # a dataset of three files, read in path order
        rel = f"sites/{site}/dataset/"
        (folder / "dataset").mkdir()
        for i, (lo, hi) in enumerate(((0, 100), (100, 250), (250, table.num_rows))):
            pq.write_table(table.slice(lo, hi - lo), folder / "dataset" / f"part-{i}.parquet")
    text = study.spec.read_text(encoding="utf-8")
    study.spec.write_text(text.replace(f"sites/{site}/records.parquet", rel), encoding="utf-8")
    return rel


def report_bytes(ctx: SiteContext, data: SiteData | SiteStatistics, seed: int) -> bytes:
    plan = plan_release(ctx, data)
    estimate = plan.estimate(draw_once(plan, np.random.default_rng(seed)))
    payload = {"estimate": estimate.public_fields(), "software_version": software_version()}
    return site_report_bytes(ctx, Committed(ctx.rid, payload, COMMITTED_AT, f"{3:064x}", 3))


def seeded_orders(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The records path's order and the engine's, from one seeded permutation of the N records."""

    def permutation(n: int) -> np.ndarray:
        return np.random.default_rng([seed, n]).permutation(n)

    monkeypatch.setattr(dpate.site.plans, "data_independent_order", permutation)
    monkeypatch.setattr(
        dpate.site.plans, "record_order", lambda n: PermutationOrder(permutation(n))
    )


def assert_releases_like_the_records(
    ctx: SiteContext,
    records: SiteData,
    monkeypatch: pytest.MonkeyPatch,
    seeds: tuple[int, ...] = (0, 1),
) -> SiteStatistics:
    """The site task's release (statistics from the engine) publishes the records path's bytes
    for each seed of noise and order; different seeds give different bytes (the test can fail)."""
    published = []
    for seed in seeds:
        seeded_orders(monkeypatch, seed)
        stats = load_site_data.fn(ctx)
        assert isinstance(stats, SiteStatistics)  # no record kept
        assert stats.report == records.report and stats.n == records.n
        engine = report_bytes(ctx, stats, seed)
        assert engine == report_bytes(ctx, records, seed)
        published.append(engine)
    assert len(set(published)) == len(published)
    return stats


@pytest.mark.parametrize("kind", ["csv", "parquet", "dataset"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_releases_from_every_file_source_as_from_the_records(
    tmp_path, monkeypatch, estimator, kind
):
    s = study_of(tmp_path / estimator, monkeypatch, estimator)
    table = with_missing_values(s, "north")
    write_as(s, "north", table, kind)
    ctx = resolve_site(str(s.spec), "north")
    records = prepare_site_data(table, ctx.spec)  # the records path, from memory
    assert records.n == 400 - 7
    stats = assert_releases_like_the_records(ctx, records, monkeypatch)
    assert stats.cells.centred == (estimator != "dim")
    assert (stats.matching is not None) == ctx.spec.estimator_info.order_dependent
    assert "cells" in repr(stats) and str(stats.n) not in repr(stats)


@pytest.fixture
def pg_table(tmp_path):
    try:
        import psycopg

        with psycopg.connect(PG, connect_timeout=3):
            pass
    except Exception as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432/test is unreachable ({type(exc).__name__})")
    schema = f"dpate_rel_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def to_postgres(table: pa.Table, name: str) -> None:
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {name} (id int PRIMARY KEY, treated smallint, outcome double precision, "
            "stratum text)"
        )
        cols = table.to_pydict()
        rows = zip(cols["treated"], cols["outcome"], cols["stratum"], strict=True)
        with conn.cursor().copy(f"COPY {name} FROM STDIN") as copy:
            for i, row in enumerate(rows):
                copy.write_row([i, *row])


@pytest.mark.postgres
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_releases_from_postgres_as_from_the_records(
    tmp_path, monkeypatch, pg_table, estimator
):
    s = study_of(tmp_path / estimator, monkeypatch, estimator)
    table = with_missing_values(s, "north")
    to_postgres(table, f"{pg_table}.records")
    monkeypatch.setenv("DPATE_DATA_PATH", PG_URL)
    monkeypatch.setenv("DPATE_DATA_QUERY", f"SELECT * FROM {pg_table}.records ORDER BY id")
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.data_location == PG_URL
    assert_releases_like_the_records(ctx, prepare_site_data(table, ctx.spec), monkeypatch)


def rewrite(study: Study, site: str, w: np.ndarray | None = None, strata=None) -> None:
    path = study.root / "sites" / site / "records.parquet"
    t = pq.read_table(path)
    if w is not None:
        t = t.set_column(0, "treated", pa.array(w.astype(np.int8)))
    if strata is not None:
        t = t.set_column(2, "stratum", pa.array(strata))
    pq.write_table(t, path)


def test_an_infeasible_site_is_refused_from_its_statistics_before_reserving(tmp_path, monkeypatch):
    """Too few records (N is public) is a refusal, in the rules' own words on the records."""
    s = study_of(tmp_path / "adj", monkeypatch, "adjusted")
    t = pq.read_table(s.root / "sites" / "south" / "records.parquet").slice(0, 1)
    pq.write_table(t, s.root / "sites" / "south" / "records.parquet")
    ctx = resolve_site(str(s.spec), "south")
    with pytest.raises(FeasibilityError) as info:
        load_site_data.fn(ctx)
    assert "too few records" in str(info.value) and "nothing was reserved" in str(info.value)
    from dpate.site.feasibility import feasibility_problems

    records = prepare_site_data(ctx.data_location, ctx.spec)
    assert info.value.problems == feasibility_problems(records, ctx.spec)
    assert "release not feasible" in s.operator_log("south").read_text()


@pytest.mark.parametrize("estimator", ["adjusted", "smooth_matching"])
@pytest.mark.parametrize(
    ("case", "rule"),
    [("no control", "empty control arm"), ("disjoint strata", "no common support")],
)
def test_a_data_dependent_problem_is_no_refusal_the_release_goes_ahead(
    tmp_path, monkeypatch, case, rule, estimator
):
    """An empty arm or no common support would tell the coordinator something about the records
    if it refused: the release goes ahead (uninformative, DP on any records; matching by
    Algorithm 1's convention) and the rule is in the operator's log only."""
    from dpate.tasks.site import plan_release
    from dpate_core.release import draw_once

    s = study_of(tmp_path / "adj", monkeypatch, estimator)
    n = 90
    if case == "no control":
        rewrite(s, "south", w=np.ones(n))
    else:  # treated only in strata 0-3, control only in 4-7
        w = np.arange(n) % 2
        strata = [str((j % 4) + 4 * (1 - w[j])) for j in range(n)]
        rewrite(s, "south", w=w, strata=strata)
    ctx = resolve_site(str(s.spec), "south")
    data = load_site_data.fn(ctx)
    log = s.operator_log("south").read_text()
    assert rule in log and "goes ahead but will be uninformative" in log
    plan = plan_release(ctx, data)  # the mechanism releases on these records (numpy: a test)
    estimate = plan.estimate(draw_once(plan, np.random.default_rng(0)))
    assert estimate.n == n


def test_sql_query_and_secret_come_from_the_site_context(tmp_path, monkeypatch):
    """A SQL data location: the site config's query and Secret block name reach the engine."""
    import sqlite3

    import dpate.schemas.site_data._engine as engine

    s = study_of(tmp_path / "adj", monkeypatch, "adjusted")
    t = pq.read_table(s.root / "sites" / "north" / "records.parquet").to_pandas()
    db = tmp_path / "site.db"
    with sqlite3.connect(db) as conn:
        t.to_sql("records", conn, index=False)
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'data = "sqlite:///{db}"\ndata_query = "SELECT * FROM records"\n', encoding="utf-8"
    )
    monkeypatch.setenv("DPATE_SITE_CONFIG", str(cfg))
    for name in ("DPATE_DATA_QUERY", "DPATE_DATA_SECRET"):
        monkeypatch.delenv(name, raising=False)
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.data_query == "SELECT * FROM records" and ctx.data_secret is None
    data = load_site_data.fn(ctx)
    assert isinstance(data, SiteStatistics) and data.n == 400

    # a Secret block named in the site config is loaded at the site and handed to the
    # connection: its value is never shown or logged
    monkeypatch.setattr(engine, "secret_value", lambda block: f"pw-of-{block}-hunter2")
    seen = []
    real = engine._connect

    def connect(loc, scheme, password):
        seen.append(password)
        raise RuntimeError(f"refused: {password}")

    monkeypatch.setattr(engine, "_connect", connect)
    cfg.write_text(cfg.read_text() + 'data_secret = "site-db-password"\n', encoding="utf-8")
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.data_secret == "site-db-password"
    with pytest.raises(SiteDataRejected) as info:
        load_site_data.fn(ctx)
    assert seen == ["pw-of-site-db-password-hunter2"] and real is not connect
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in s.operator_log("north").read_text()


@pytest.mark.parametrize("estimator", ["dim", "adjusted", "propensity"])
def test_binary_outcome_is_checked_and_released_as_from_the_records(
    tmp_path, monkeypatch, estimator
):
    """``outcome.binary`` (dim, adjusted, propensity): an outcome other than 0 or B is refused before
    anything is reserved, and on 0/B outcomes the release publishes the records path's bytes,
    without sums of squares."""

    s = study_of(tmp_path / "bin", monkeypatch, estimator)
    text = s.spec.read_text(encoding="utf-8")
    s.spec.write_text(text.replace('policy = "clip"', 'policy = "clip"\nbinary = true'), "utf-8")
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.spec.outcome.binary
    with pytest.raises(SiteDataRejected, match="Nothing was reserved"):
        load_site_data.fn(ctx)
    assert "binary outcome must be exactly 0 or B" in s.operator_log("north").read_text()
    path = s.root / "sites" / "north" / "records.parquet"
    t = pq.read_table(path)
    y = (t.column("outcome").to_numpy() > 0.5).astype(np.float64)
    pq.write_table(t.set_column(1, "outcome", pa.array(y)), path)
    stats = load_site_data.fn(ctx)
    assert isinstance(stats, SiteStatistics)
    records = prepare_site_data(path, ctx.spec)
    plan = plan_release(ctx, stats)
    if estimator == "dim":
        assert not stats.cells.centred
        assert [sp.name for sp in plan.noise] == ["sum_treated", "sum_control"]
    elif estimator == "adjusted":  # the cells' counts and sums: no squares
        assert [sp.name for sp in plan.noise] == ["histogram"]
    else:  # the model, then the band cells' counts and sums: no squares
        assert [sp.name for sp in plan.noise] == ["model"]
        assert [sp.name for sp in plan.stages[0].sites] == ["histogram"]
        assert len(plan.shares.shares) == 2
    for seed in (0, 1):
        assert report_bytes(ctx, stats, seed) == report_bytes(ctx, records, seed)
    assert plan_from_records is not None and site_statistics is not None
