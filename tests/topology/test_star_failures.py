"""Failures a deployed STAR study must ride out, on real components (the topology of
test_star_study.py, built for this file): a site's worker down during a study, the object store
down when the sites start, the Prefect server restarted mid-study. Each test uses its own round,
so each is a fresh release at every site."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest

from tests.topology.services import wait_for
from tests.topology.star import SITE_EPSILON, STUDY_ID
from tests.topology.study_events import committed_anywhere, events, round_spend, site_runs

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: two of the study's four sites (a rural and an urban hospital): every failure here is one that
#: each site rides out on its own, so two show it as well as four, at half the flow runs and
#: workers (the four-site study runs end to end in test_star_study.py)
STAR_SITES_USED = ("rural", "urban")


def test_storage_down_when_the_sites_start_finishes_once(star):
    """The object store is down when the sites start: their storage tasks (check-publication,
    before any budget is reserved) fail and retry with backoff; the store comes back within the
    retries and every site then releases and publishes exactly once, holding the ledger's
    recorded release (write-once), and the study completes."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    round = "storage-restart"
    # same spec text (same hash); readable while S3 is down
    local_spec = str(star.root / "star.toml")

    def retrying(client) -> bool:
        run_ids = {fr.id for runs in site_runs(star, round).values() for fr in runs}
        return any(
            tr.flow_run_id in run_ids and tr.state is not None and tr.state.name == "AwaitingRetry"
            for tr in client.read_task_runs()
        )

    star.s3.stop()
    try:
        with star.server.settings(), get_client(sync_client=True) as client:
            flow_run = run_deployment(
                "study-deployed/star",
                parameters={
                    "spec": local_spec,
                    "round": round,
                    "poll_interval_s": 1.0,
                    "site_timeout_s": 300,
                },
                timeout=0,
            )
            wait_for(lambda: retrying(client), 300, "a site's storage task to retry", 1)
            time.sleep(5)
    finally:
        star.s3.start()
    with star.server.settings(), get_client(sync_client=True) as client:
        final = wait_for(
            lambda: (s := client.read_flow_run(flow_run.id).state).is_final() and s,
            900,
            "the study run to finish",
            interval=1,
        )
        assert final.is_completed(), final
        site_run_ids = {fr.id for runs in site_runs(star, round).values() for fr in runs}
        retried = [
            tr
            for tr in client.read_task_runs()
            if tr.flow_run_id in site_run_ids and tr.run_count > 1
        ]
    assert retried, "no site task retried: the outage did not hit the sites"
    result = star.result(round)
    assert result["complete"]
    for site in star.sites:
        (commit,) = events(star, site, round, "COMMIT")
        rows = [r for r in result["sites"] if r["site_id"] == site]
        assert rows[0]["release_id"] == commit.release_id
        reports = star.site_reports(site)
        (raw,) = [v for k, v in reports.items() if k.startswith(commit.release_id)]
        recorded = json.loads(commit.payload)
        assert json.loads(raw)["estimate"] == recorded["estimate"]
        assert len(events(star, site, round, "RESERVE")) == 1


def test_prefect_server_restarted_mid_study_rerun_completes_without_double_spending(star):
    from prefect.deployments import run_deployment

    round = "server-restart"
    with star.server.settings():
        run_deployment(
            "study-deployed/star",
            parameters={"round": round, "poll_interval_s": 1.0, "site_timeout_s": 240},
            timeout=0,
        )
    wait_for(lambda: committed_anywhere(star, round), 600, "a site to commit its release")
    star.server.restart()
    for name, worker in star.workers.items():  # workers ride out a server restart
        assert worker.running, f"worker {name} died with the server:\n{worker.log_tail()}"

    run = star.run_study(round, site_timeout_s=300)
    assert run.state.is_completed(), run.state
    # no site run lost a concurrency lease to the restart (the deployments hold none)
    for runs in site_runs(star, round).values():
        for fr in runs:
            assert "lease" not in (fr.state.message or "").lower(), fr.state
    result = star.result(round)
    assert result["complete"]
    for site in star.sites:
        assert len(events(star, site, round, "RESERVE")) == 1
        assert len(events(star, site, round, "COMMIT")) == 1
        assert round_spend(star, site, round) == Fraction(SITE_EPSILON[site])
    assert result["study_id"] == STUDY_ID


def test_site_worker_down_study_aggregates_the_others_and_rerun_spends_nothing_again(star):
    down, round = "urban", "worker-down"
    star.stop_site_worker(down)
    try:
        run = star.run_study(round, site_timeout_s=60)
        assert run.state.is_completed(), run.state
        partial = star.result(round)
        assert partial is not None and not partial["complete"]
        rows = {s["site_id"]: s for s in partial["sites"]}
        assert rows[down]["status"] == "missing"
        released = [s for s in star.sites if events(star, s, round, "COMMIT")]
        assert down not in released and released, "no site released while one worker was down"
        for s in released:
            assert rows[s]["status"] in ("used", "excluded", "not_used")
        # the down site's run never started: cancelled, so a returning worker does not run it
        (down_run,) = site_runs(star, round)[down]
        assert down_run.state.is_cancelled()
        assert not events(star, down, round, "RESERVE")
        spent_before = {s: star.spend(s).spent for s in star.sites}
        reports_before = {s: star.site_reports(s) for s in released}
    finally:
        star.start_site_worker(down)

    run = star.run_study(round, site_timeout_s=300)
    assert run.state.is_completed(), run.state
    result = star.result(round)
    assert result["complete"], result
    for s in released:  # already released: nothing spent again, the same bytes published
        assert star.spend(s).spent == spent_before[s]
        assert star.site_reports(s) == reports_before[s]
        assert len(events(star, s, round, "RESERVE")) == 1
    assert star.spend(down).spent.epsilon == spent_before[down].epsilon + Fraction(
        SITE_EPSILON[down]
    )
    assert len(events(star, down, round, "COMMIT")) == 1
