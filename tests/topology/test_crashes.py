"""Crashes that heal themselves, against a real Prefect server (SQLite) and process workers: the
server refuses clients without its auth string; a run whose machine dies is set Crashed by the
zombie automation of deployments/automations.py; the stop sequence of
deployments/systemd/dpate-worker.service stops an idle worker; no deployment holds a
concurrency slot."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.topology.services import create_process_pools, prefect_cli, start_worker, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deployments" / "systemd" / "dpate-worker.service"
#: The zombie automation's window in the crash test: above the 30 s heartbeat interval with
#: margin, shorter than production's 90 s (the delay is this window plus the same overheads).
WITHIN_S = 50


def test_prefect_server_on_sqlite_answers(prefect_server):
    """The fixture's server answers on loopback, on its SQLite database."""
    with urllib.request.urlopen(f"{prefect_server.api_url}/health", timeout=10) as r:
        assert json.loads(r.read()) is True
    assert prefect_server.database_url is None
    assert (prefect_server.home / "prefect.db").exists()


def _post(url: str, auth: str | None) -> int:
    req = urllib.request.Request(
        url, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    if auth:
        import base64

        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_server_refuses_clients_without_the_auth_string(prefect_server):
    url = f"{prefect_server.api_url}/flow_runs/filter"
    assert _post(url, None) == 401
    assert _post(url, "dpate:wrong") == 401
    assert _post(url, prefect_server.auth_string) == 200
    # the Prefect CLI without the auth string is refused too
    env = {**os.environ, **prefect_server.client_env}
    env.pop("PREFECT_API_AUTH_STRING")
    res = subprocess.run(
        [str(Path(prefect_server.service.argv[0])), "--no-prompt", "work-pool", "ls"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    assert "401" in res.stdout + res.stderr or "nauthorized" in res.stdout + res.stderr


def _exec_stop() -> list[str]:
    (line,) = [ln for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStop=")]
    return shlex.split(line.removeprefix("ExecStop="))


def _idle_worker(server, pool: str, tmp_path: Path):
    worker = start_worker(server, pool, tmp_path, name=f"{pool}-{time.monotonic_ns()}")
    wait_for(lambda: "started!" in worker.log_tail(), 120, f"worker {pool} to start")
    return worker


def test_the_units_stop_sequence_stops_an_idle_worker(prefect_server, tmp_path):
    """Prefect 3.8.8's idle worker, once in its polling loop, was seen ignoring one SIGINT for
    more than 30 s (docs/how-to/deploying.md); the unit's ExecStop (SIGINT, 2 s, SIGINT) stops it."""
    pool = "stop-test"
    create_process_pools(prefect_server, pool)
    worker = _idle_worker(prefect_server, pool, tmp_path)
    proc = worker.proc
    time.sleep(5)  # well into its idle polling loop
    try:
        subprocess.run(
            _exec_stop(), env={**os.environ, "MAINPID": str(proc.pid)}, check=True, timeout=30
        )
        wait_for(lambda: proc.poll() is not None, 30, "the worker to exit")
    finally:
        worker.kill()


def _heartbeats(client, flow_run_id) -> bool:
    """Whether the server has recorded a heartbeat event of this flow run."""
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    page = client.read_events(
        EventFilter(
            event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
        ),
        limit=1,  # the client's default (100) is above the server's maximum (50)
    )
    return bool(page.events)


def _last_heartbeat(client, flow_run_id):
    """When the newest heartbeat event of this flow run occurred (the sender's clock)."""
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    page = client.read_events(
        EventFilter(
            event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
        ),
        limit=50,
    )
    return max(e.occurred for e in page.events)


def test_a_run_whose_machine_dies_is_set_crashed(prefect_server, tmp_path):
    """SIGKILL of the worker's whole process group mid-run (the site machine dies): the run
    stops sending heartbeats and the zombie automation sets it Crashed, never before ``within``
    has passed since the last heartbeat (docs/how-to/deploying.md, "Crashes": what sets the delay).
    Prints the delays, from the last heartbeat and from the kill, for the guide's figures."""
    from datetime import UTC, datetime

    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from dpate.deployments.automations import ensure_zombie_automation

    pool = "zombie-test"
    create_process_pools(prefect_server, pool)
    spec = tmp_path / "prefect.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "zombie-test",
                "pull": [
                    {"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}
                ],
                "deployments": [
                    {
                        "name": "zombie",
                        "entrypoint": "tests/topology/sleeper.py:sleeper",
                        "work_pool": {
                            "name": pool,
                            "job_variables": {"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}},
                        },
                    }
                ],
            }
        )
    )
    prefect_cli(prefect_server, "deploy", "--all", "--prefect-file", str(spec), cwd=REPO)
    with prefect_server.settings():
        ensure_zombie_automation(within_s=WITHIN_S)
        worker = start_worker(prefect_server, pool, tmp_path, cwd=REPO)
        try:
            run = run_deployment("sleeper/zombie", parameters={"seconds": 900}, timeout=0)
            with get_client(sync_client=True) as client:

                def state():
                    return client.read_flow_run(run.id).state

                started = wait_for(
                    lambda: ((s := state()).is_running() or s.is_final()) and s,
                    180,
                    "the run to start",
                )
                assert started.is_running(), f"{started}\n{worker.log_tail()}"
                # the run's first heartbeat (sent as it starts) has reached the server
                wait_for(lambda: _heartbeats(client, run.id), 120, "the run's first heartbeat", 1)
                killed_at = datetime.now(UTC)
                worker.kill()  # the machine dies: worker and flow run, no clean shutdown
                assert state().is_running()  # nobody told the server
                final = wait_for(
                    lambda: (s := state()).is_final() and s, 360, "the run to be set Crashed", 2
                )
                last_beat = _last_heartbeat(client, run.id)
        finally:
            worker.kill()
    assert final.is_crashed(), final
    assert "heartbeat" in (final.message or ""), final.message
    # a proactive trigger fires only once its window after the last heartbeat has closed
    after_beat = (final.timestamp - last_beat).total_seconds()
    assert after_beat >= WITHIN_S, (last_beat, final.timestamp)
    after_kill = (final.timestamp - killed_at).total_seconds()
    print(
        f"\nCrashed {after_beat:.1f} s after the last heartbeat (within {WITHIN_S} s,"
        f" heartbeat every 30 s), {after_kill:.1f} s after the kill"
    )
