"""The 4-site STAR study deployed the production way, on real components: triggered through the
Prefect server's API (PostgreSQL-backed), each site's release executed by that site's own worker
(its data, ledger and S3 identity only), the aggregate by the coordinator's worker, everything
published to SeaweedFS through s3:// URLs; then the failures a deployed study must ride out: a
site worker down, the object store down when the sites start, the Prefect server restarted
mid-study. Each test uses its own round, so each is a fresh release at every site.

All of them share one topology (tests/topology/conftest.py ``star``, module scope): it is built
once for this file and stopped when the file ends, so its five polling workers do not load the
machine for the rest of the session."""

from __future__ import annotations

import json
import time
import urllib.request
from fractions import Fraction

import pytest

from tests.topology.services import wait_for
from tests.topology.star import SITE_EPSILON, STUDY_ID, run_embedded
from tests.topology.study_events import committed_anywhere, events, round_spend, site_runs

pytestmark = [pytest.mark.services, pytest.mark.slow]

PUBLIC_NON_NOISE = ("site_id", "status", "n", "epsilon", "delta")


def _site_rows(result: dict) -> dict[str, dict]:
    return {s["site_id"]: s for s in result["sites"]}


def test_prefect_server_on_postgresql_answers(prefect_server_pg):
    """The STAR study's server answers on loopback, its schema migrated into a scratch
    PostgreSQL database."""
    import psycopg

    with urllib.request.urlopen(f"{prefect_server_pg.api_url}/health", timeout=10) as r:
        assert json.loads(r.read()) is True
    db = prefect_server_pg.database_url.rsplit("/", 1)[1]
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{db}") as conn:
        tables = {r[0] for r in conn.execute("select tablename from pg_tables")}
    assert "flow_run" in tables  # Prefect migrated its schema into the scratch database


def test_deployed_study_runs_end_to_end_and_matches_embedded_run(
    star, tmp_path, prefect_test_server
):
    t0 = time.perf_counter()
    run = star.run_study("e2e")
    deployed_wall = time.perf_counter() - t0
    assert run.state.is_completed(), run.state

    # every site ran on its own pool, by its own worker
    site_runs = star.flow_runs()
    by_site = {}
    for fr in site_runs:
        if fr.parameters.get("round") == "e2e" and "site" in fr.parameters:
            by_site.setdefault(fr.parameters["site"], []).append(fr)
    assert sorted(by_site) == sorted(star.sites)
    for site, runs in by_site.items():
        assert len(runs) == 1 and runs[0].state.is_completed()
        assert runs[0].work_pool_name == f"site-{site}"

    result = star.result("e2e")
    assert result is not None and result["complete"]
    assert result["study_id"] == STUDY_ID
    rows = _site_rows(result)
    assert sorted(rows) == sorted(star.sites)
    for site in star.sites:
        assert rows[site]["status"] in ("used", "excluded", "not_used")
        assert Fraction(rows[site]["epsilon"]) == Fraction(SITE_EPSILON[site])
        # the site's ledger spent exactly its release, once
        spend = star.spend(site)
        assert spend.spent.epsilon == Fraction(SITE_EPSILON[site])
        reports = star.site_reports(site)
        assert len(reports) == 1
        report = json.loads(next(iter(reports.values())))
        assert report["site_id"] == site

    # the same study on the embedded default: same sites, same public non-noise fields
    embedded_wall, embedded = run_embedded(
        star.root / "star.toml", star.root, tmp_path, "e2e", prefect_test_server.env
    )
    for key in ("study_id", "spec_hash", "round", "aggregator", "complete"):
        assert embedded[key] == result[key], key
    erows = _site_rows(embedded)
    assert sorted(erows) == sorted(rows)
    for site in star.sites:
        for key in ("site_id", "n", "epsilon", "delta", "release_id"):
            assert erows[site][key] == rows[site][key], (site, key)
    # secure noise differs between the two runs; both estimates sit near the same value
    assert (
        abs(embedded["estimate"] - result["estimate"])
        < 8 * max(embedded["variance"], result["variance"]) ** 0.5
    )
    print(f"\nSTAR 4 sites: deployed {deployed_wall:.1f} s, embedded {embedded_wall:.1f} s")


def test_deployments_declare_pools_parameters_and_schedule(star):
    from prefect.client.orchestration import get_client

    with star.server.settings():
        with get_client(sync_client=True) as client:
            names = {}
            for d in client.read_deployments():
                names[f"{client.read_flow(d.flow_id).name}/{d.name}"] = d
    for site in star.sites:
        d = names[f"site-release/{site}"]
        assert d.work_pool_name == f"site-{site}"
        assert d.parameters == {"site": site}
        # no concurrency slot: the ledger serialises releases (deployments/prefect.yaml)
        assert d.global_concurrency_limit is None
        assert d.job_variables["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    assert names["aggregate-study/aggregate"].work_pool_name == "dpate-server"
    study = names["study-deployed/star"]
    assert study.work_pool_name == "dpate-server"
    assert study.parameters["spec"] == "s3://dpate/specs/star.toml"
    assert study.parameters["round_format"] == "%Y-%m"
    assert [s.schedule.cron for s in study.schedules] == ["0 6 1 * *"]
    assert study.parameters["site_timeout_s"] == 3600


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
