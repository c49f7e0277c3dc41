"""The DP covariate-balance table at a site (``[balance]``): a release of its own, charged to the
site's ledger with its own epsilon before any of its noise is drawn, drawn once (a re-run returns
the recorded table), carried by the site's report (version 4), copied into the result document
and shown in the HTML report beside the forest plot."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from dpate.html_report import render_html
from dpate.ledger import PrivacyLedger
from dpate.schemas.reports import StudyResult, read_report
from dpate.schemas.spec import SpecError, load_spec
from dpate.settings import resolve_site, resolve_study
from dpate.storage import Store
from dpate.tasks.aggregate import collect_reports, combine_reports
from dpate.tasks.site import (
    commit_balance,
    commit_release,
    compute_balance,
    load_site_data,
    plan_release,
    publish_site_report,
    recorded_balance,
    reserve_balance,
    reserve_budget,
)
from dpate_core.release import draw_once

from .helpers import publish_site, resigned

BALANCE = '\n[balance]\nepsilon = "1/4"\n'


@pytest.fixture
def balanced(study):
    text = study.spec.read_text()
    head, sites = text.split("[[sites]]", 1)
    study.spec.write_text(head + BALANCE + "\n[[sites]]" + sites)
    return study


def _spent(ctx) -> Fraction:
    with PrivacyLedger(ctx.ledger_url) as ledger:
        return ledger.spend(ctx.site_id).spent.epsilon


def _release(ctx):
    reserve_budget.fn(ctx)
    plan = plan_release(ctx, load_site_data.fn(ctx))
    return commit_release.fn(ctx, plan.estimate(draw_once(plan, np.random.default_rng(0))))


def test_the_balance_table_is_its_own_release_recorded_once(balanced):
    balanced.init_ledgers("north")
    ctx = resolve_site(str(balanced.spec), "north")
    committed = _release(ctx)
    eps = ctx.spec.site("north").epsilon
    assert _spent(ctx) == eps
    assert recorded_balance.fn(ctx) is None
    held = reserve_balance.fn(ctx)
    assert held.new and held.release_id == ctx.balance_rid != ctx.rid
    assert held.privacy.epsilon == Fraction(1, 4) and held.privacy.delta == 0
    assert _spent(ctx) == eps + Fraction(1, 4)  # charged before any of its noise is drawn
    data = load_site_data.fn(ctx)
    table = compute_balance.fn(ctx, data, held)
    balance = commit_balance.fn(ctx, table)
    assert balance.payload["balance"] == table
    # a re-run: the recorded table, no new spend, no new draw
    assert recorded_balance.fn(ctx).payload == balance.payload
    again = reserve_balance.fn(ctx)
    assert not again.new and again.committed.payload == balance.payload
    assert _spent(ctx) == eps + Fraction(1, 4)
    # the table: one indicator row per stratum level, within strata 0 by construction
    assert table["epsilon"] == "1/4" and table["noise_scale"] == 8.0  # 2 p / eps, p = 1
    assert table["within"] == "by construction"
    assert [r["level"] for r in table["rows"]] == [str(k) for k in range(8)]
    assert all(r["smd_within"] == 0.0 for r in table["rows"])
    # its reservation is checked before the draw
    with pytest.raises(RuntimeError, match="does not match the reservation"):
        compute_balance.fn(ctx, data, reserve_budget.fn(ctx))

    summary = publish_site_report.fn(ctx, committed, balance)
    key = Store.site_report_key(ctx.study_id, "north", ctx.rid)
    published = Store(ctx.storage_url).read(key)
    report = read_report(published, ctx.spec, site_id="north")
    assert report.schema_version == 4 and report.balance is not None
    assert report.balance.to_dict() == table
    assert publish_site_report.fn(ctx, committed, balance)["status"] == "unchanged"
    assert summary["status"] == "written" and summary["balance"] == table


def test_a_report_whose_balance_table_is_not_the_specs_is_rejected(balanced):
    balanced.init_ledgers("north")
    ctx = resolve_site(str(balanced.spec), "north")
    committed = _release(ctx)
    held = reserve_balance.fn(ctx)
    table = compute_balance.fn(ctx, load_site_data.fn(ctx), held)
    balance = commit_balance.fn(ctx, table)
    publish_site_report.fn(ctx, committed, balance)
    data = Store(ctx.storage_url).read(Store.site_report_key(ctx.study_id, "north", ctx.rid))
    doc = json.loads(data)
    doc["balance"]["noise_scale"] = 1.0  # less noise than the spec's epsilon gives
    from dpate.schemas.reports import ReportError

    with pytest.raises(ReportError, match="signature"):  # edited: refused for its bytes
        read_report(json.dumps(doc), ctx.spec, site_id="north")
    with pytest.raises(ReportError, match="noise_scale"):  # signed by the site's own key
        read_report(resigned(doc, balanced.key_path("north")), ctx.spec, site_id="north")


def test_the_result_and_the_html_report_show_each_sites_balance(balanced):
    spec = str(balanced.spec)
    for site in ("north", "south", "east"):
        balanced.init_ledgers(site)
        ctx = resolve_site(spec, site)
        committed = _release(ctx)
        held = reserve_balance.fn(ctx)
        balance = commit_balance.fn(ctx, compute_balance.fn(ctx, load_site_data.fn(ctx), held))
        publish_site_report.fn(ctx, committed, balance)
    sctx = resolve_study(spec)
    result = combine_reports.fn(sctx, collect_reports.fn(sctx))
    for s in result["sites"]:
        assert s["balance"]["schema"] == "dpate.balance" and len(s["balance"]["rows"]) == 8
    typed = StudyResult.of(result)
    assert typed.to_document() == result
    sites, rows = typed.balance_rows()
    assert sites == ["north", "south", "east"] and len(rows) == 8
    page = render_html(typed, "x/results/1.json", {})
    assert "Covariate balance (DP)" in page
    forest, balance = page.index('alt="forest plot"'), page.index("Covariate balance (DP)")
    assert page.index('<div class="plots"') < forest < balance < page.index("<h2>Sites</h2>")
    north = result["sites"][0]["balance"]["rows"][0]
    assert f"{north['smd_before']:+.2f} / +0.00" in page


def test_a_study_without_balance_publishes_what_it_did(study):
    publish_site(str(study.spec), "north")
    ctx = resolve_site(str(study.spec), "north")
    data = Store(ctx.storage_url).read(Store.site_report_key(ctx.study_id, "north", ctx.rid))
    assert json.loads(data)["schema_version"] == 3 and b"balance" not in data


def test_the_spec_refuses_a_balance_table_past_the_cap_or_without_covariates(balanced):
    text = balanced.spec.read_text()
    balanced.spec.write_text(text.replace('epsilon = "1/4"', 'epsilon = "5/2"'))
    with pytest.raises(SpecError, match="plus the balance table's 5/2"):
        load_spec(balanced.spec)
    balanced.spec.write_text(text.replace('epsilon = "1/4"', 'epsilon = "0"'))
    with pytest.raises(SpecError, match="must be positive"):
        load_spec(balanced.spec)
    many = ", ".join(f'"{k}"' for k in range(201))  # a table too long for a report
    levels = next(line for line in text.splitlines() if line.startswith("levels = "))
    balanced.spec.write_text(text.replace(levels, f"levels = [{many}]"))
    with pytest.raises(SpecError, match="balance table of 201 rows, more than the 200"):
        load_spec(balanced.spec)


def test_an_estimator_with_public_bands_gets_a_released_within_column(balanced):
    """Room for an estimator whose strata are coarser than the covariates' cells (propensity
    bands): its ``balance_bands`` gives the band of every stratum from the committed record,
    and the table's within column is released within those bands; without it (no record, or a
    record without a band definition), no within column (never a 0 that construction does not
    give)."""
    import dataclasses

    import dpate_core.mechanisms as mechanisms
    from dpate.schemas.spec import StudySpec
    from dpate.site.plans import balance_plan

    def toy_bands(record, options, inputs):
        if "released" not in record:
            return None
        return np.arange(inputs.domain_size) // 4, 2

    banded = dataclasses.replace(
        mechanisms.estimator_of("smooth_matching"),
        name="banded_toy",
        covariate_strata=False,
        balance_bands=toy_bands,
    )
    mechanisms.register(banded)
    try:
        ctx = resolve_site(str(balanced.spec), "north")
        spec = StudySpec.from_dict({**ctx.spec.canonical_dict(), "estimator": "banded_toy"})
        data = load_site_data.fn(ctx)
        assert spec.balance_within == "none"
        assert balance_plan(spec, data).within == "none"
        plan = balance_plan(spec, data, {"estimate": {}, "released": {}})
        assert plan.within == "released" and plan.n_bands == 2
        table = plan.draw(np.random.default_rng(0)).as_dict()
        assert table["bands"] == 2
        assert all(r["smd_within"] is not None for r in table["rows"])
        unbanded = balance_plan(spec, data, {"estimate": {}})
        assert unbanded.within == "none" and "bands" not in unbanded.draw().as_dict()
    finally:
        mechanisms.unregister("banded_toy")
    assert mechanisms.estimator_of("propensity").covariate_strata is False
