"""``dpate site worker`` against a real Prefect server (SQLite): a deployment whose job variables
set another ledger (``env``), a shell command (``command``) and whose pull step runs a shell
script still runs only the installed ``site-release`` flow, in the worker's own environment,
through the site's own ledger; a run for another site is refused (Failed, naming the rule); the
one SIGTERM of its systemd unit stops the worker within seconds, and a release it was running
ends Crashed (not Running) before spending anything."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.topology.services import prefect_cli, start_site_worker, wait_for
from tests.topology.star import STUDY_ID, star_spec_toml, write_star_sites

pytestmark = [pytest.mark.services, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SITE = "rural"


def _unit_kill_signal() -> signal.Signals:
    """The stop signal of deployments/systemd/dpate-site-worker.service (no ExecStop there)."""
    unit = (REPO / "deployments" / "systemd" / "dpate-site-worker.service").read_text()
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("KillSignal=")]
    return signal.Signals[line.removeprefix("KillSignal=")]


def _events(url: str) -> list:
    from dpate.ledger import PrivacyLedger

    with PrivacyLedger(url) as ledger:
        return list(ledger.events(SITE))


def test_the_coordinator_cannot_steer_a_site_worker(prefect_server, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    root = tmp_path
    data = write_star_sites(root)
    spec = root / "star.toml"
    spec.write_text(star_spec_toml((SITE, "urban"), str(root / "spec-reports")))
    # a second study whose data (the site's `{study}` path) is a FIFO: reading it blocks, so its
    # release is still running when the worker is stopped
    stuck = root / "stuck.toml"
    stuck.write_text(
        spec.read_text().replace(f'study_id = "{STUDY_ID}"', 'study_id = "stuck-study"')
    )
    (root / "data").mkdir()
    os.symlink(data[SITE], root / "data" / f"{STUDY_ID}.parquet")
    os.mkfifo(root / "data" / "stuck-study.parquet")
    ledger = f"sqlite:///{root / 'site-ledger.sqlite'}"
    PrivacyLedger.init(ledger, SITE, PrivacyParams.of("20", "0")).close()
    before = len(_events(ledger))

    # what the coordinator writes into the deployment: another ledger, a command, a pull step
    other_ledger = root / "coordinator-ledger.sqlite"
    marker_cmd, marker_pull = root / "command-ran", root / "pull-step-ran"
    tag = uuid.uuid4().hex[:8]
    pool, name = f"site-{SITE}-{tag}", f"{SITE}-{tag}"
    prefect_cli(prefect_server, "work-pool", "create", pool, "--type", "process")
    deployment = {
        "name": "site-worker-test",
        "pull": [
            {"prefect.deployments.steps.run_shell_script": {"script": f"touch {marker_pull}"}}
        ],
        "deployments": [
            {
                "name": name,
                "entrypoint": "dpate.flows.site_release:site_release",
                "parameters": {"spec": str(spec), "site": SITE},
                "work_pool": {
                    "name": pool,
                    "job_variables": {
                        "env": {
                            "DPATE_LEDGER_URL": f"sqlite:///{other_ledger}",
                            "DPATE_SITE_CONFIG": str(root / "coordinator-site.toml"),
                        },
                        "command": f"sh -c 'touch {marker_cmd}'",
                        "working_dir": str(root),
                    },
                },
            }
        ],
    }
    (root / "prefect.yaml").write_text(json.dumps(deployment))
    prefect_cli(
        prefect_server, "deploy", "--all", "--prefect-file", str(root / "prefect.yaml"), cwd=REPO
    )

    site_env = {  # the site's own configuration (its worker.env)
        "DPATE_DATA_PATH": str(root / "data" / "{study}.parquet"),
        "DPATE_LEDGER_URL": ledger,
        "DPATE_STORAGE_URL": str(root / "published"),
        "DPATE_SITE_LOG": str(root / "operator.log"),
    }
    worker = start_site_worker(prefect_server, SITE, root / "logs", pool=pool, extra_env=site_env)
    try:
        wait_for(lambda: "started!" in worker.log_tail(), 120, "the site worker to start")
        with prefect_server.settings():
            run = run_deployment(
                f"site-release/{name}", parameters={"round": "guard"}, timeout=240, poll_interval=1
            )
            assert run.state.is_completed(), f"{run.state}\n{worker.log_tail()}"
            # the coordinator asks for another site's release on this site's pool: refused
            other = run_deployment(
                f"site-release/{name}",
                parameters={"site": "urban", "round": "guard"},
                timeout=120,
                poll_interval=1,
            )
        assert other.state.is_failed(), f"{other.state}\n{worker.log_tail()}"
        assert "runs only releases for site rural, not 'urban'" in (other.state.message or "")
        assert "refused" in (root / "operator.log").read_text()

        # the run went through the site's own ledger (RESERVE + COMMIT) and storage
        assert len(_events(ledger)) == before + 2
        assert list((root / "published").rglob("*.json"))
        assert not other_ledger.exists()
        assert not marker_cmd.exists() and not marker_pull.exists()

        # the worker is stopped while a release is running (blocked reading its data)
        with prefect_server.settings(), get_client(sync_client=True) as client:
            params = {"spec": str(stuck), "round": "stop"}
            run = run_deployment(f"site-release/{name}", parameters=params, timeout=0)
            wait_for(
                lambda: worker.log_tail().count("check-publication") == 2, 120, "the run to start"
            )
            time.sleep(1)  # in load-site-data, waiting on the FIFO
            assert client.read_flow_run(run.id).state.is_running()
            proc = worker.proc
            assert proc is not None
            t0 = time.monotonic()
            proc.send_signal(_unit_kill_signal())  # what systemd sends: once
            proc.wait(15)
            assert time.monotonic() - t0 < 15
            final = client.read_flow_run(run.id).state
        assert final.is_crashed(), f"{final}\n{worker.log_tail()}"
        assert "worker stopped while this run was in progress" in (final.message or "")
        assert len(_events(ledger)) == before + 2  # nothing reserved for the stopped release
    finally:
        worker.stop()
