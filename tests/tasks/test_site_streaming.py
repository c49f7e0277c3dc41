"""The streamed release (tasks/site.py, STREAMED_ESTIMATORS): the adjusted estimator's and the
difference in means' site task keeps per-cell statistics instead of the records, refuses an
infeasible site from them before anything is reserved, and publishes exactly the bytes the
materialising path publishes."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpate.ledger import Committed
from dpate.schemas.preflight import FeasibilityError
from dpate.schemas.report import software_version
from dpate.schemas.site_preparation import SiteData, prepare_site_data
from dpate.schemas.site_statistics import stream_cell_statistics
from dpate.settings import SiteContext, resolve_site
from dpate.site_plans import plan_from_records
from dpate.site_reports import site_report_bytes
from dpate.tasks.site import (
    STREAMED_ESTIMATORS,
    SiteStatistics,
    load_site_data,
    plan_release,
)
from dpate_core.release import draw_once
from tests.pipeline.studies import Site, Study, write_study

from .helpers import COMMITTED_AT


def _as_estimator(study: Study, estimator: str, *, missing: str = "reject") -> None:
    text = study.spec.read_text(encoding="utf-8")
    text = text.replace('estimator = "smooth_matching"', f'estimator = "{estimator}"')
    text = text.replace('missing = "reject"', f'missing = "{missing}"')
    if estimator == "dim":  # a randomized trial with public arm sizes (the paper's setting)
        text = text.replace('design = "observational"', 'design = "randomized"')
        text = text.replace("[treatment]", "arm_sizes_public = true\n\n[treatment]")
    study.spec.write_text(text, encoding="utf-8")


def _streamed_study(root: Path, monkeypatch: pytest.MonkeyPatch, estimator: str) -> Study:
    s = write_study(root, [Site("north", 400), Site("south", 90)])
    _as_estimator(s, estimator, missing="drop")
    for k, v in s.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    return s


@pytest.fixture
def adjusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Study:
    return _streamed_study(tmp_path / "adj", monkeypatch, "adjusted")


@pytest.fixture(params=["adjusted", "dim"])
def streamed(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Study:
    return _streamed_study(tmp_path / request.param, monkeypatch, request.param)


def _bytes(ctx: SiteContext, data: SiteData | SiteStatistics, seed: int) -> bytes:
    plan = plan_release(ctx, data)
    estimate = plan.estimate(draw_once(plan, np.random.default_rng(seed)))
    payload = {"estimate": estimate.public_fields(), "software_version": software_version()}
    return site_report_bytes(ctx, Committed(ctx.rid, payload, COMMITTED_AT, f"{3:064x}", 3))


def _with_missing_values_as_csv(study: Study, site: str) -> Path:
    """The site's records as a CSV file with a few missing outcomes and covariates (dropped by
    ``missing = "drop"``); the spec's data path is pointed at it."""
    folder = study.root / "sites" / site
    table = pq.read_table(folder / "records.parquet")
    y = table.column("outcome").to_numpy().astype(object)
    y[[4, 50, 51, 200]] = None
    strata = table.column("stratum").to_pylist()
    for j in (7, 8, 333):
        strata[j] = None
    table = pa.table(
        {"treated": table.column("treated"), "outcome": pa.array(list(y)), "stratum": strata}
    )
    path = folder / "records.csv"
    pacsv.write_csv(table, path)
    text = study.spec.read_text(encoding="utf-8")
    study.spec.write_text(
        text.replace(f"sites/{site}/records.parquet", f"sites/{site}/records.csv"),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("batch_rows", [None, 37])
def test_streamed_report_bytes_equal_the_materialising_paths(streamed, monkeypatch, batch_rows):
    """Same file, same noise draw: the streamed release publishes the materialising release's
    bytes, also when the file is read in many small batches and rows are dropped as missing
    (for each streamed estimator: the adjusted estimator and the difference in means)."""
    adjusted = streamed
    path = _with_missing_values_as_csv(adjusted, "north")
    if batch_rows is not None:
        import dpate.schemas.site_statistics

        monkeypatch.setattr(
            dpate.schemas.site_statistics,
            "stream_cell_statistics",
            functools.partial(stream_cell_statistics, batch_rows=batch_rows),
        )
    ctx = resolve_site(str(adjusted.spec), "north")
    assert ctx.spec.estimator in STREAMED_ESTIMATORS
    streamed = load_site_data.fn(ctx)
    assert streamed.cells.centred == (ctx.spec.estimator == "adjusted")
    assert isinstance(streamed, SiteStatistics)  # no record kept
    assert "cells" in repr(streamed) and str(streamed.n) not in repr(streamed)
    records = prepare_site_data(path, ctx.spec)  # the materialising path
    assert records.n == streamed.n == 400 - 7 and streamed.report == records.report
    a, b = plan_release(ctx, streamed), plan_from_records(ctx.spec, "north", records)
    assert [(s.name, s.scale) for s in a.noise] == [(s.name, s.scale) for s in b.noise]
    for sa, sb in zip(a.noise, b.noise, strict=True):
        np.testing.assert_array_equal(sa.loc, sb.loc)
    for seed in (0, 1):
        assert _bytes(ctx, streamed, seed) == _bytes(ctx, records, seed)
    assert _bytes(ctx, streamed, 0) != _bytes(ctx, streamed, 1)  # the test can fail


def test_materialising_estimators_keep_the_records(study):
    ctx = resolve_site(str(study.spec), "north")
    assert ctx.spec.estimator_info.order_dependent
    assert ctx.spec.estimator not in STREAMED_ESTIMATORS
    from dpate.site_plans import _FROM_STATISTICS

    assert set(_FROM_STATISTICS) == set(STREAMED_ESTIMATORS)  # every streamed one has its plan
    assert isinstance(load_site_data.fn(ctx), SiteData)
    with pytest.raises(ValueError, match="planned from the records"):
        plan_from_records(ctx.spec, "north", SiteStatistics(*_cells(ctx)))


def _cells(ctx: SiteContext):
    from dpate.schemas.site_statistics import stream_cell_statistics as stream

    return stream(ctx.data_location, ctx.spec)


def _rewrite(study: Study, site: str, w: np.ndarray | None = None, strata=None) -> None:
    path = study.root / "sites" / site / "records.parquet"
    t = pq.read_table(path)
    if w is not None:
        t = t.set_column(0, "treated", pa.array(w.astype(np.int8)))
    if strata is not None:
        t = t.set_column(2, "stratum", pa.array(strata))
    pq.write_table(t, path)


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("one record", "too few records"),
        ("no control", "empty control arm"),
        ("disjoint strata", "no common support"),
    ],
)
def test_streamed_release_is_refused_from_its_statistics_before_reserving(adjusted, case, rule):
    n = 90
    if case == "one record":
        t = pq.read_table(adjusted.root / "sites" / "south" / "records.parquet").slice(0, 1)
        pq.write_table(t, adjusted.root / "sites" / "south" / "records.parquet")
    elif case == "no control":
        _rewrite(adjusted, "south", w=np.ones(n))
    else:  # treated only in strata 0-3, control only in 4-7
        w = np.arange(n) % 2
        strata = [str((j % 4) + 4 * (1 - w[j])) for j in range(n)]
        _rewrite(adjusted, "south", w=w, strata=strata)
    ctx = resolve_site(str(adjusted.spec), "south")
    with pytest.raises(FeasibilityError) as info:
        load_site_data.fn(ctx)
    assert rule in str(info.value) and "nothing was reserved" in str(info.value)
    # the same words as the rules on the records (dpate check, the materialising path)
    from dpate.schemas.preflight import feasibility_problems

    records = prepare_site_data(ctx.data_location, ctx.spec)
    assert info.value.problems == feasibility_problems(records, ctx.spec)
    assert "release not feasible" in adjusted.operator_log("south").read_text()


def test_sql_query_and_secret_come_from_the_site_context(adjusted, tmp_path, monkeypatch):
    """A SQL data location: the site config's query and Secret block name reach the source."""
    import sqlite3

    import dpate.tasks.site

    t = pq.read_table(adjusted.root / "sites" / "north" / "records.parquet").to_pandas()
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
    seen = []
    import dpate.schemas.site_statistics
    import dpate.schemas.source_sql

    real = dpate.schemas.site_statistics.open_source

    def spy(*args, **kwargs):
        src = real(*args, **kwargs)
        seen.append(src)
        return src

    monkeypatch.setattr(dpate.schemas.site_statistics, "open_source", spy)
    ctx = resolve_site(str(adjusted.spec), "north")
    assert ctx.data_query == "SELECT * FROM records" and ctx.data_secret is None
    data = load_site_data.fn(ctx)
    assert isinstance(data, SiteStatistics) and data.n == 400
    assert seen[-1].query == "SELECT * FROM records" and seen[-1].secret is None

    # a Secret block named in the site config is loaded at the site and set as the password
    # (SQLite takes none, so the connection is refused): its value is never shown or logged
    monkeypatch.setattr(
        dpate.schemas.source_sql, "_secret_value", lambda block: f"pw-of-{block}-hunter2"
    )
    cfg.write_text(cfg.read_text() + 'data_secret = "site-db-password"\n', encoding="utf-8")
    ctx = resolve_site(str(adjusted.spec), "north")
    assert ctx.data_secret == "site-db-password"
    with pytest.raises(dpate.tasks.site.SiteDataRejected) as info:
        load_site_data.fn(ctx)
    assert seen[-1].secret == "site-db-password"
    assert "hunter2" not in str(info.value) and "hunter2" not in repr(seen[-1])
    assert "hunter2" not in adjusted.operator_log("north").read_text()


def test_streamed_binary_outcome_is_checked_and_released_as_from_the_records(tmp_path, monkeypatch):
    """dim with ``outcome.binary``: the stream refuses an outcome other than 0 or B before
    anything is reserved, and on 0/B outcomes publishes the materialising path's bytes."""
    import dpate.tasks.site

    s = _streamed_study(tmp_path / "bin", monkeypatch, "dim")
    text = s.spec.read_text(encoding="utf-8")
    s.spec.write_text(text.replace('policy = "clip"', 'policy = "clip"\nbinary = true'), "utf-8")
    ctx = resolve_site(str(s.spec), "north")
    assert ctx.spec.outcome.binary
    with pytest.raises(dpate.tasks.site.SiteDataRejected, match="Nothing was reserved"):
        load_site_data.fn(ctx)
    assert "binary outcome must be exactly 0 or B" in s.operator_log("north").read_text()
    path = s.root / "sites" / "north" / "records.parquet"
    t = pq.read_table(path)
    y = (t.column("outcome").to_numpy() > 0.5).astype(np.float64)
    pq.write_table(t.set_column(1, "outcome", pa.array(y)), path)
    streamed = load_site_data.fn(ctx)
    assert isinstance(streamed, SiteStatistics) and not streamed.cells.centred
    records = prepare_site_data(path, ctx.spec)
    plan = plan_release(ctx, streamed)
    assert [sp.name for sp in plan.noise] == ["sum_treated", "sum_control"]
    for seed in (0, 1):
        assert _bytes(ctx, streamed, seed) == _bytes(ctx, records, seed)
