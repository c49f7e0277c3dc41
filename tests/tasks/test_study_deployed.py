"""The ``study-deployed`` flow's trigger and wait logic through ``.fn`` (no Prefect server): a
site without a ``site-release`` deployment (it releases on its own timer, docs/how-to/deploying.md) is
not triggered, and its report of the round is awaited in storage within the study's timeout.
The deployed topology itself is tested in tests/topology."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from prefect.exceptions import ObjectNotFound

import dpate.deployments.orchestrate as orchestrate
from dpate.settings import resolve_study
from dpate.storage import Store

from .helpers import publish_site


def test_a_site_without_a_deployment_is_not_triggered(study, monkeypatch):
    ctx = resolve_study(str(study.spec))
    calls = []
    run_id = uuid.uuid4()

    def fake_run_deployment(name, **kw):
        calls.append((name, kw["parameters"]))
        if name == "site-release/east":
            raise ObjectNotFound(http_exc=RuntimeError("404"))
        return SimpleNamespace(id=run_id)

    monkeypatch.setattr(orchestrate, "run_deployment", fake_run_deployment)
    got = {
        s: orchestrate.trigger_site.fn(ctx, s, "site-release/{site}", "study-run")
        for s in ctx.site_ids
    }
    assert got == {"north": str(run_id), "south": str(run_id), "east": None}
    assert [c[0] for c in calls] == [f"site-release/{s}" for s in ctx.site_ids]
    # the site is sent the spec's hash, never a path (it runs its approved copy)
    assert calls[0][1] == {"spec": ctx.spec.spec_hash, "site": "north", "round": ctx.round}


def test_other_trigger_errors_still_fail(study, monkeypatch):
    ctx = resolve_study(str(study.spec))

    def down(name, **kw):
        raise ConnectionError("Prefect API unreachable")

    monkeypatch.setattr(orchestrate, "run_deployment", down)
    with pytest.raises(ConnectionError):
        orchestrate.trigger_site.fn(ctx, "north", "site-release/{site}", "r")


def test_awaited_sites_are_found_in_storage_or_time_out(study):
    publish_site(str(study.spec), "north")
    ctx = resolve_study(str(study.spec))
    got = orchestrate.wait_for_sites.fn({}, 0.2, 0.05, ctx, ["east", "north"])
    assert list(got) == ["north", "east"]  # the spec's order
    assert got["north"]["status"] == "published" and got["north"]["flow_run_id"] is None
    assert got["east"]["status"] == "timed_out"
    assert "no deployment, and no report published within" in got["east"]["message"]


def test_a_report_that_arrives_while_waiting_ends_the_wait(study, monkeypatch):
    """The timer's release publishes on the third poll: the wait ends then, published."""
    ctx = resolve_study(str(study.spec))
    key = Store.site_report_key(ctx.study_id, "south", ctx.release_id("south"))
    polls = []

    def exists(self, k):
        polls.append(k)
        return k == key and len(polls) >= 3

    monkeypatch.setattr(Store, "exists", exists)
    monkeypatch.setattr(orchestrate.time, "sleep", lambda s: None)
    got = orchestrate.wait_for_sites.fn({}, 3600.0, 5.0, ctx, ["south"])
    assert got["south"]["status"] == "published"
    assert len(polls) == 3  # not until the timeout


def test_awaited_sites_need_the_study_context():
    with pytest.raises(ValueError, match="need the study context"):
        orchestrate.wait_for_sites.fn({}, 1.0, 0.1, None, ["north"])


def test_no_site_deployment_at_all_fails_at_once(study, monkeypatch):
    """Not one site found under the pattern (a misspelt ``site_deployment``): the study fails
    at once, naming the pattern, instead of waiting ``site_timeout_s`` for every site."""

    def not_found(name, **kw):
        raise ObjectNotFound(http_exc=RuntimeError("404"))

    def never_wait(*a, **kw):
        raise AssertionError("waited for sites")

    monkeypatch.setattr(orchestrate, "run_deployment", not_found)
    monkeypatch.setattr(orchestrate, "wait_for_sites", never_wait)
    with pytest.raises(RuntimeError, match=r"no site has a deployment named by site_deployment="):
        orchestrate.study_deployed.fn(str(study.spec), site_deployment="site-relase/{site}")
