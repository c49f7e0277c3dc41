"""The site's task logic through ``.fn``: load_site_data, plan_release, site_report_bytes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schemas.report import ReportError, read_report
from tasks.settings import resolve_site
from tasks.site import data_independent_order, load_site_data, plan_release, site_report_bytes

from .helpers import COMMITTED_AT, committed_release


def test_plan_release_is_the_specs_mechanism_at_the_sites_budget(study):
    ctx = resolve_site(str(study.spec), "north")
    data = load_site_data.fn(ctx)
    plan = plan_release(ctx, data)
    assert plan.estimator == ctx.spec.estimator == "smooth_matching"
    assert plan.n == data.n == 400
    assert plan.total == ctx.spec.site("north").privacy
    assert plan.shares == ctx.spec.budget_split("north")
    assert [s.name for s in plan.noise]  # something to draw
    # the noise scales depend on public values and per-stratum counts only, not on record order
    again = plan_release(ctx, data)
    assert [(s.name, s.scale) for s in again.noise] == [(s.name, s.scale) for s in plan.noise]


def test_plan_release_presents_records_in_a_data_independent_order(study):
    """Algorithm 1 pairs records by rank: the site reorders its records by a fresh secure random
    permutation (never derived from the data or a fixed seed; docs/privacy.md, Record order)."""
    order = data_independent_order(400)
    assert sorted(order.tolist()) == list(range(400))
    assert not np.array_equal(order, data_independent_order(400))
    ctx = resolve_site(str(study.spec), "south")
    assert ctx.spec.estimator_info.order_dependent


def test_load_site_data_refuses_a_bad_file_naming_columns_not_values(tmp_path, monkeypatch):
    from tasks.site import SiteDataRejected
    from tests.pipeline.studies import Site, write_study

    s = write_study(tmp_path / "bad", [Site("a", 80, bad_level="MARKER-7731")])
    for k, v in s.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    ctx = resolve_site(str(s.spec), "a")
    with pytest.raises(SiteDataRejected) as info:
        load_site_data.fn(ctx)
    assert "stratum" in str(info.value)
    assert "MARKER-7731" not in str(info.value)
    # the full text (counts, positions) goes to the site's operator log only
    assert "does not satisfy the study spec" in s.operator_log("a").read_text()


def test_site_report_bytes_are_a_function_of_the_commit_row(study):
    ctx = resolve_site(str(study.spec), "north")
    committed = committed_release(ctx, seed=1)
    data = site_report_bytes(ctx, committed)
    assert data == site_report_bytes(ctx, committed)  # re-publication: identical bytes
    report = read_report(data, ctx.spec, site_id="north")
    assert report.release_id == ctx.rid
    assert report.estimate.model_dump(mode="json") == committed.payload["estimate"]
    assert report.ledger_head is not None and report.ledger_head.seq == committed.seq
    assert report.signature is None  # no key configured, none listed in the spec
    doc = json.loads(data)
    assert doc["created_at"].startswith(COMMITTED_AT[:19])
    assert doc["spec_hash"] == ctx.spec.spec_hash


def test_site_report_bytes_refuse_a_payload_the_spec_cannot_produce(study):
    ctx = resolve_site(str(study.spec), "north")
    committed = committed_release(ctx)
    bad = dict(committed.payload)
    bad["estimate"] = dict(bad["estimate"], epsilon="2")  # not what the spec spends here
    with pytest.raises(ReportError, match="privacy"):
        site_report_bytes(ctx, type(committed)(**{**committed.__dict__, "payload": bad}))
