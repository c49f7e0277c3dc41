"""The site's task logic through ``.fn``: load_site_data, plan_release, site_report_bytes, the
ledger totals a report carries (ledger_spend) and publish_site_report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpate.schemas.reports import ReportError, read_report
from dpate.schemas.site_data import SecureOrder
from dpate.settings import resolve_site
from dpate.site.plans import data_independent_order, record_order
from dpate.site.reports import ledger_spend, site_report_bytes
from dpate.tasks.site import load_site_data, plan_release

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
    """Algorithm 1 pairs records by rank: the site ranks each stratum's records by a fresh secure
    random order (never derived from the data or a fixed seed; docs/explanation/privacy.md, Record order),
    and the records path reorders its records by a fresh secure permutation."""
    order = data_independent_order(400)
    assert sorted(order.tolist()) == list(range(400))
    assert not np.array_equal(order, data_independent_order(400))
    first, second = record_order(400), record_order(400)
    assert isinstance(first, SecureOrder) and not first.needs_positions
    keys = first.keys(400, None)
    assert sorted(keys.tolist()) == list(range(400))
    assert not np.array_equal(keys, second.keys(400, None))
    assert not np.array_equal(keys, first.keys(400, None))  # fresh for every chunk too
    ctx = resolve_site(str(study.spec), "south")
    assert ctx.spec.estimator_info.order_dependent


def test_load_site_data_refuses_a_bad_file_naming_columns_not_values(tmp_path, monkeypatch):
    from dpate.site.operator_log import SiteDataRejected
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


def test_a_deployed_run_tells_the_coordinator_only_that_the_data_was_rejected(
    tmp_path, monkeypatch
):
    """Which column and rule failed (a value past the outcome bound, an unknown level) would
    let specs differing in one bound probe the records: a deployed run's refusal names neither;
    the site's operator log has both."""
    import dataclasses

    from dpate.site.operator_log import SiteDataRejected
    from tests.pipeline.studies import Site, write_study

    s = write_study(tmp_path / "bad", [Site("a", 80, bad_level="MARKER-7731")])
    for k, v in s.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    ctx = dataclasses.replace(resolve_site(str(s.spec), "a"), deployed=True)
    with pytest.raises(SiteDataRejected) as info:
        load_site_data.fn(ctx)
    assert str(info.value) == (
        "site a: site data rejected, see the site's log. Nothing was reserved or drawn"
    )
    assert "stratum" in s.operator_log("a").read_text()


def test_site_report_bytes_are_a_function_of_the_commit_row(study):
    ctx = resolve_site(str(study.spec), "north")
    committed = committed_release(ctx, seed=1)
    data = site_report_bytes(ctx, committed)
    assert data == site_report_bytes(ctx, committed)  # re-publication: identical bytes
    report = read_report(data, ctx.spec, site_id="north")
    assert report.release_id == ctx.rid
    assert report.estimate.model_dump(mode="json") == committed.payload["estimate"]
    assert report.ledger_head is not None and report.ledger_head.seq == committed.seq
    assert report.signature is not None  # signed by default, with the site's own key
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


# --- the ledger's lifetime spend in the published report -----------------------------------


def _release_with_ledger(ctx, seed: int = 0):
    """reserve -> draw (numpy: a test) -> commit, through the tasks, on the site's real ledger."""
    from dpate.tasks.site import commit_release, reserve_budget
    from dpate_core.release import draw_once

    reserve_budget.fn(ctx)
    plan = plan_release(ctx, load_site_data.fn(ctx))
    return commit_release.fn(ctx, plan.estimate(draw_once(plan, np.random.default_rng(seed))))


def _reserve_other(ctx, release_id: str, epsilon: str) -> None:
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    with PrivacyLedger(ctx.ledger_url) as ledger:
        ledger.reserve(
            release_id=release_id,
            study_id="other-study",
            site_id=ctx.site_id,
            spec_hash="0" * 64,
            round="1",
            privacy=PrivacyParams.of(epsilon),
            cap=ctx.spec.site(ctx.site_id).lifetime_cap.params,
        )


def test_published_report_carries_the_ledgers_spend_right_after_the_release(study):
    from fractions import Fraction

    from dpate.ledger import PrivacyLedger
    from dpate.storage import Store
    from dpate.tasks.site import publish_site_report

    study.init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    site = ctx.spec.site("north")
    _reserve_other(ctx, "other-study:1:north", "1/4")  # an earlier release of another study
    committed = _release_with_ledger(ctx)
    summary = publish_site_report.fn(ctx, committed)
    assert summary["status"] == "written"
    key = Store.site_report_key(ctx.study_id, "north", ctx.rid)
    data = Store(ctx.storage_url).read(key)
    report = read_report(data, ctx.spec, site_id="north")
    assert report.schema_version == 3 and report.lifetime_spend is not None
    spend = report.lifetime_spend
    assert spend.spent.params.epsilon == Fraction(1, 4) + site.privacy.epsilon
    assert spend.spent.params.delta == ctx.spec.release_cost("north").delta
    assert spend.cap.params == site.lifetime_cap.params
    with PrivacyLedger(ctx.ledger_url) as ledger:
        assert ledger.spend("north").spent == spend.spent.params  # the ledger's own total
    assert json.loads(data)["lifetime_spend"]["cap"] == site.lifetime_cap.params.as_strings()

    # a later release at the site: re-publishing this one gives the same amounts, same bytes
    _reserve_other(ctx, "other-study:2:north", "1/4")
    assert ledger_spend(ctx, committed) == spend
    assert publish_site_report.fn(ctx, committed)["status"] == "unchanged"
    assert Store(ctx.storage_url).read(key) == data
    assert site_report_bytes(ctx, committed, ledger_spend(ctx, committed)) == data


def test_spend_at_reservation_needs_the_releases_reservation(study):
    from dpate.ledger import LedgerError, PrivacyLedger
    from dpate.site.reports import spend_at_reservation

    study.init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    _reserve_other(ctx, "other-study:1:north", "1/4")
    with PrivacyLedger(ctx.ledger_url) as ledger:
        events = ledger.events("north")
    assert spend_at_reservation(events, "other-study:1:north").spent.epsilon == "1/4"
    with pytest.raises(LedgerError, match="no reservation under a cap for release"):
        spend_at_reservation(events, ctx.rid)


@pytest.mark.parametrize("version", [1, 2])
def test_a_release_published_by_an_earlier_version_is_left_as_it_is(study, version):
    """Re-publishing a release whose version-1 (no lifetime spend) or version-2 report an
    earlier software already wrote is not a conflict: the published bytes stay; other bytes
    still conflict."""
    from dpate.storage import PublicationConflictError, Store
    from dpate.tasks.site import publish_site_report

    study.init_ledgers("north")
    ctx = resolve_site(str(study.spec), "north")
    committed = _release_with_ledger(ctx)
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, "north", ctx.rid)
    spend = ledger_spend(ctx, committed) if version == 2 else None
    old = site_report_bytes(ctx, committed, spend, schema_version=version)
    assert json.loads(old)["schema_version"] == version
    assert (b"lifetime_spend" in old) == (version == 2)
    store.publish(key, old)
    assert publish_site_report.fn(ctx, committed)["status"] == "unchanged"
    assert store.read(key) == old
    assert read_report(old, ctx.spec, site_id="north").schema_version == version

    other = resolve_site(str(study.spec), "south")
    study.init_ledgers("south")
    committed_south = _release_with_ledger(other)
    key_south = Store.site_report_key(other.study_id, "south", other.rid)
    store.publish(key_south, b"{}")  # something else at the key: still a conflict
    with pytest.raises(PublicationConflictError):
        publish_site_report.fn(other, committed_south)


# --- a ledger restored from an older copy ---------------------------------------------------


def test_a_ledger_restored_from_an_older_copy_refuses_to_spend(study):
    """A copy taken after round 1, restored after round 2 was released and published: the next
    reservation is refused (the site published a row the copy does not have), nothing is
    reserved; the newest copy spends again."""
    import shutil
    from pathlib import Path

    from dpate.ledger import LedgerBehindError, PrivacyLedger
    from dpate.tasks.site import publish_site_report, reserve_budget

    study.init_ledgers("north")
    spec = str(study.spec)
    path = Path(resolve_site(spec, "north", "r1").ledger_url.removeprefix("sqlite:///"))
    publish_site_report.fn(
        resolve_site(spec, "north", "r1"), _release_with_ledger(resolve_site(spec, "north", "r1"))
    )
    backup = path.with_suffix(".backup")
    shutil.copyfile(path, backup)  # the operator's backup, at 1 release spent
    ctx2 = resolve_site(spec, "north", "r2")
    publish_site_report.fn(ctx2, _release_with_ledger(ctx2))
    newest = path.with_suffix(".newest")
    shutil.copyfile(path, newest)

    shutil.copyfile(backup, path)  # the restore
    with PrivacyLedger(f"sqlite:///{path}") as ledger:
        assert ledger.verify().ok  # the copy is consistent in itself
        rows = len(ledger.events())
    with pytest.raises(LedgerBehindError, match="the ledger ends at row 3") as info:
        reserve_budget.fn(resolve_site(spec, "north", "r3"))
    assert str(path) not in str(info.value)
    with PrivacyLedger(f"sqlite:///{path}") as ledger:
        assert len(ledger.events()) == rows  # nothing reserved

    shutil.copyfile(newest, path)  # the newest copy restored: it spends again
    assert reserve_budget.fn(resolve_site(spec, "north", "r3")).new
