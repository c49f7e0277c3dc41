"""The 4-site STAR study deployed the production way, on real components: triggered through the
Prefect server's API (PostgreSQL-backed), each site's release executed by that site's own worker
(its data, ledger and S3 identity only), the aggregate by the coordinator's worker, everything
published to SeaweedFS through s3:// URLs (a site worker down, the object store and the Prefect
server failing: test_star_failures.py). Each test uses its own round, so each is a fresh release
at every site.

The topology is built by the guide's own commands (docs/how-to/deploying.md's marked blocks, with only
this test's folders, ports and hosts: tests/topology/guide.py), so the end-to-end study below is
the guide followed as written. The tests of a file share one topology (tests/topology/conftest.py
``star``, module scope): it is built for the file and stopped when the file ends, so its five
polling workers do not load the machine for the rest of the session; the two STAR files run on two
xdist workers at once."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest

from tests.topology.star import SITE_EPSILON, STUDY_ID, run_embedded

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: this file's topology is set up by docs/how-to/deploying.md's commands, as written (conftest.py ``star``)
STAR_BY_THE_GUIDE = True


def _site_rows(result: dict) -> dict[str, dict]:
    return {s["site_id"]: s for s in result["sites"]}


def test_prefect_server_on_postgresql_answers(star):
    """The STAR study's server, started by the guide's step 3, answers on loopback, its schema
    migrated into a scratch PostgreSQL database."""
    import psycopg

    with urllib.request.urlopen(f"{star.server.api_url}/health", timeout=10) as r:
        assert json.loads(r.read()) is True
    db = star.server.database_url.rsplit("/", 1)[1]
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

    # the guide's step 7, `dpate report` with the aggregator's key, beside the same study on
    # the embedded default (same sites, same public non-noise fields)
    coordinator = star.coordinator()
    coordinator.fill["round"] = "e2e"
    with ThreadPoolExecutor(max_workers=1) as pool:
        reported = pool.submit(coordinator.run, "coordinator-report")
        embedded_wall, embedded = run_embedded(
            star.root / "star.toml", star.root, tmp_path, "e2e", prefect_test_server.env
        )
        reported.result()
    page = coordinator.path("/var/lib/dpate/star-e2e.html").read_text()
    assert f"s3://dpate/studies/{STUDY_ID}/results/e2e.json" in page
    assert all(f"<td>{site}</td>" in page for site in star.sites)
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
