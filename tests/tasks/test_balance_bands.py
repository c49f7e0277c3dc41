"""The covariate-balance table of a propensity study (``estimator = "propensity"`` with
``[balance]``): its within column is released within the propensity bands of the committed
release's own noisy model (recorded with the estimate in the site's ledger: a DP output, so
banding by it is post-processing), never a refit or a new draw; the bands are exactly those the
estimate used; a re-run returns the recorded table; a study without ``[balance]`` records
nothing more than it did."""

from __future__ import annotations

import numpy as np
import pytest

from dpate.html_report import render_html
from dpate.ledger import PrivacyLedger
from dpate.schemas.reports import StudyResult, read_report
from dpate.settings import resolve_site, resolve_study
from dpate.site.plans import balance_plan
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
from dpate_core.mechanisms.propensity import BANDS
from dpate_core.release import draw_once

from .helpers import release_every_site_and_combine, with_estimator_options


def _propensity(study, balance: bool = True):
    text = study.spec.read_text().replace(
        'estimator = "smooth_matching"', 'estimator = "propensity"'
    )
    if balance:
        head, sites = text.split("[[sites]]", 1)
        text = head + '\n[balance]\nepsilon = "1/4"\n\n[[sites]]' + sites
    study.spec.write_text(text)
    return study


def _release(ctx, seed: int = 0):
    reserve_budget.fn(ctx)
    plan = plan_release(ctx, load_site_data.fn(ctx))
    return plan, commit_release.fn(ctx, plan.drawn(draw_once(plan, np.random.default_rng(seed))))


def _balance(ctx, committed):
    held = reserve_balance.fn(ctx)
    return commit_balance.fn(ctx, compute_balance.fn(ctx, load_site_data.fn(ctx), held, committed))


def test_a_propensity_study_releases_its_within_band_column(study):
    _propensity(study).init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    plan, committed = _release(ctx)
    model = committed.payload["released"]["model"]  # the draw's noisy model, in the ledger
    assert len(model) == plan.noise[0].loc.size and all(np.isfinite(model))
    assert "released" not in committed.payload["estimate"]  # not an estimate field
    balance = _balance(ctx, committed)
    table = balance.payload["balance"]
    assert table["within"] == "released" and table["bands"] == BANDS
    assert table["noise_scale"] == 8.0  # 2 p / eps, p = 1: the bands cost nothing more
    assert any(r["smd_within"] is not None for r in table["rows"])
    with PrivacyLedger(ctx.ledger_url) as ledger:
        spent = ledger.spend("north").spent.epsilon
    assert spent == ctx.spec.site("north").epsilon + ctx.spec.balance.epsilon
    # a re-run: the recorded table, nothing more spent
    assert recorded_balance.fn(ctx).payload == balance.payload
    assert reserve_balance.fn(ctx).committed.payload == balance.payload
    # the published report carries it and is accepted
    publish_site_report.fn(ctx, committed, balance)
    data = Store(ctx.storage_url).read(Store.site_report_key(ctx.study_id, "north", ctx.rid))
    report = read_report(data, ctx.spec, site_id="north")
    assert report.balance is not None and report.balance.to_dict() == table


def _band_counts(plan, model) -> np.ndarray:
    """The band cells' counts the release noises, (band, arm): its two-end histogram's two ends'
    sum (each record's mass is 1)."""
    from dpate_core.statistics import histogram_cells

    site = plan.stages[0].sites[0]
    h = plan.stages[0].locs({"model": model})[site.name] * site.unit
    return histogram_cells(h, 1.0)["counts"].reshape(BANDS, 2)


def test_the_within_bands_are_the_bands_the_estimate_used(study):
    """The balance query's (band, arm) counts, summed over the covariate's levels, are the band
    cell counts the estimate's second stage counted under the same noisy model: the same band
    for every record."""
    _propensity(study).init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    plan, committed = _release(ctx, seed=3)
    data = load_site_data.fn(ctx)
    model = np.asarray(committed.payload["released"]["model"])
    cells = _band_counts(plan, model)
    query = balance_plan(ctx.spec, data, committed.payload)
    levels = ctx.spec.balance_layout.sizes[0]
    by_band = query.counts.reshape(BANDS, levels, 2).sum(axis=1)
    assert np.array_equal(by_band, cells.astype(np.int64))
    assert (by_band.sum(axis=1) > 0).sum() >= 2  # more than one band holds records
    # the bands follow the recorded model (post-processing of the record, not a refit on the
    # records): another draw's model, put in the record, bands as that draw's stage 2 did
    other = np.asarray(plan.drawn(draw_once(plan, np.random.default_rng(4))).kept["model"])
    assert not np.array_equal(other, model)
    moved = balance_plan(
        ctx.spec, data, {**committed.payload, "released": {"model": other.tolist()}}
    )
    cells = _band_counts(plan, other)
    assert np.array_equal(moved.counts.reshape(BANDS, levels, 2).sum(axis=1), cells)


def test_without_a_recorded_model_there_is_no_within_column(study):
    _propensity(study).init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    _, committed = _release(ctx)
    data = load_site_data.fn(ctx)
    record = {k: v for k, v in committed.payload.items() if k != "released"}
    plan = balance_plan(ctx.spec, data, record)
    assert plan.within == "none" and plan.n_bands == 1
    assert all(r["smd_within"] is None for r in plan.draw().as_dict()["rows"])


def test_a_propensity_study_without_balance_records_no_model(study):
    _propensity(study, balance=False).init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    _, committed = _release(ctx)
    assert set(committed.payload) == {"estimate", "software_version"}


@pytest.mark.parametrize("site", ["south"])
def test_the_html_report_says_within_propensity_bands(study, site):
    _propensity(study)
    spec = str(study.spec)
    for s in ("north", "south", "east"):
        study.init_ledgers(s)
        ctx = resolve_site(spec, s)
        _, committed = _release(ctx)
        publish_site_report.fn(ctx, committed, _balance(ctx, committed))
    sctx = resolve_study(spec)
    typed = StudyResult.of(combine_reports.fn(sctx, collect_reports.fn(sctx)))
    assert typed.balance_rows()[0] == ["north", "south", "east"]
    page = render_html(typed, "x/results/1.json", {})
    assert "within propensity bands" in page and f"each of the {BANDS} bands" in page
    row = next(s for s in typed.sites if s.site_id == site).balance["rows"][0]
    shown = f"{row['smd_before']:+.2f} / " + (
        "n/a" if row["smd_within"] is None else f"{row['smd_within']:+.2f}"
    )
    assert shown in page


def test_a_study_with_the_weighted_sum_releases_once_and_the_server_combines_it(study):
    """``weighted_sum = true``: every site releases the three stages from its engine's
    statistics, the ledger's record carries the four-part split, a re-run returns the recorded
    estimate (nothing drawn, nothing spent), and the server combines the reports. The sites are
    below ``N x epsilon`` 1,500: the band squares are one sum, in the stage after the histogram
    beside the weighted sum."""
    spec = with_estimator_options(study, "propensity", "weighted_sum = true")
    typed = release_every_site_and_combine(
        study, spec, ("north", "south", "east"),
        ["model", "histogram", "common_squares", "weighted_sum"], 4,
    )  # fmt: skip
    assert typed.status == "answered" and typed.estimate is not None
    assert sorted(s.status for s in typed.sites) == ["used"] * 3
