"""``dpate site worker`` against a real Prefect server (SQLite): a deployment whose job variables
set another ledger (``env``), a shell command (``command``) and whose pull step runs a shell
script still runs only the installed ``site-release`` flow, in the worker's own environment,
through the site's own ledger; a run for another site, or for a spec named by a path or URL
instead of an approved hash, is refused (Failed, naming the rule and no path); a
release the coordinator cancels after its reservation and its draw, while it waits to commit,
ends Cancelled, its runner process gone, the reservation standing and nothing committed, and the
next run of that round finishes it on the same worker without a second reservation; the one
SIGTERM of its systemd unit stops the worker within seconds, and a release it was running ends
Crashed (not Running) before spending anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from dpate.schemas.spec import load_spec
from tests.topology.services import (
    create_process_pools,
    prefect_cli,
    start_site_worker,
    wait_for,
)
from tests.topology.star import (
    STUDY_ID,
    site_key,
    star_spec_toml,
    with_site_keys,
    write_star_sites,
)

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.postgres]

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


class _AppendLock:
    """The ledger's own append lock (``PrivacyLedger._append_tx``: on PostgreSQL a
    transaction-scoped advisory lock), taken in a thread of the test and held until
    :meth:`release`. PostgreSQL grants a lock to its waiters in the order they queued."""

    def __init__(self, url: str) -> None:
        self.acquired, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(url,), daemon=True)
        self._thread.start()

    def _hold(self, url: str) -> None:
        from dpate.ledger import PrivacyLedger

        with PrivacyLedger(url) as ledger, ledger._append_tx():
            self.acquired.set()
            self._release.wait(300)

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)


def _lock_waiters(engine) -> int:
    """Transactions of the ledger's database waiting for an advisory lock (its append lock)."""
    import sqlalchemy as sa

    query = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND "
        "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    with engine.connect() as conn:
        return int(conn.execute(sa.text(query)).scalar_one())


def _runner_pids(worker) -> list[int]:
    """The worker's flow-run processes (``python -m dpate.deployments.site_runner``)."""
    from dpate.deployments.site_worker import RUNNER_MODULE

    pids = []
    for pid in worker.descendants():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if RUNNER_MODULE.encode() in argv:
            pids.append(pid)
    return pids


def _task_running(client, run_id, task: str) -> bool:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return any(t.name.startswith(task) and t.state and t.state.is_running() for t in runs)


def _cancel_between_reserve_and_commit(prefect_server, worker, deployment: str, ledger: str):
    """The coordinator cancels a release (as Prefect's UI and ``prefect flow-run cancel`` do:
    the run set Cancelling) after its RESERVE and its draw, while it waits for the ledger's append
    lock to COMMIT. Returns the seconds from the cancel request to the run's Cancelled state."""
    import sqlalchemy as sa
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment
    from prefect.states import Cancelling

    before = _events(ledger)
    params = {"round": "cancelled"}
    engine = sa.create_engine(ledger)
    first = _AppendLock(ledger)
    second: _AppendLock | None = None
    try:
        assert first.acquired.wait(30)
        with prefect_server.settings(), get_client(sync_client=True) as client:
            run = run_deployment(f"site-release/{deployment}", parameters=params, timeout=0)
            wait_for(lambda: _lock_waiters(engine) == 1, 120, "the release to wait to reserve")
            assert client.read_flow_run(run.id).state.is_running(), worker.log_tail()
            # queue behind the release: when it has reserved, the lock is ours again, and its
            # commit (after the draw: commit-release takes compute-release's output) waits
            second = _AppendLock(ledger)
            wait_for(lambda: _lock_waiters(engine) == 2, 30, "the test to queue for the lock")
            first.release()
            wait_for(
                lambda: len(_events(ledger)) == len(before) + 1 and _lock_waiters(engine) == 1,
                60,
                "the release to reserve and wait to commit",
            )
            assert second.acquired.is_set()
            (runner,) = _runner_pids(worker)
            t0 = time.monotonic()
            set_state = client.set_flow_run_state(run.id, Cancelling(message="by the coordinator"))
            assert set_state.status.value == "ACCEPT", set_state
            final = wait_for(
                lambda: (s := client.read_flow_run(run.id).state) and s.is_final() and s,
                90,
                "the cancelled run's final state",
            )
            cancel_s = time.monotonic() - t0
            assert final.type == StateType.CANCELLED, f"{final}\n{worker.log_tail()}"
            wait_for(lambda: not Path(f"/proc/{runner}").exists(), 15, "the runner to exit")
            assert worker.running and not _runner_pids(worker)
        second.release()
        second = None
        # the reservation stands and nothing was committed (docs/how-to/ledger.md, the crash rule 4)
        (reserved,) = _events(ledger)[len(before) :]
        assert reserved.kind == "RESERVE" and reserved.round == "cancelled"

        # the next run of that round, on the same worker: no second reservation, one commit
        with prefect_server.settings():
            again = run_deployment(
                f"site-release/{deployment}", parameters=params, timeout=240, poll_interval=1
            )
        assert again.state.is_completed(), f"{again.state}\n{worker.log_tail()}"
        after = _events(ledger)[len(before) :]
        assert [e.kind for e in after] == ["RESERVE", "COMMIT"]
        assert {e.release_id for e in after} == {reserved.release_id}
        return cancel_s
    finally:
        first.release()
        if second is not None:
            second.release()
        engine.dispose()


def _approve(spec: Path, env: dict[str, str]) -> None:
    """``dpate site approve SPEC --site rural`` in the site's environment."""
    subprocess.run(
        [sys.executable, "-m", "dpate.cli", "site", "approve", str(spec), "--site", SITE],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )


def test_the_coordinator_cannot_steer_a_site_worker(prefect_server, pg_database, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    root = tmp_path
    data = write_star_sites(root)
    spec = root / "star.toml"
    sites = (SITE, "urban")
    spec.write_text(with_site_keys(star_spec_toml(sites, str(root / "spec-reports")), root, sites))
    # a second study whose data (the site's `{study}` path) is a FIFO: reading it blocks, so its
    # release is still running when the worker is stopped
    stuck = root / "stuck.toml"
    stuck.write_text(
        spec.read_text().replace(f'study_id = "{STUDY_ID}"', 'study_id = "stuck-study"')
    )
    (root / "data").mkdir()
    os.symlink(data[SITE], root / "data" / f"{STUDY_ID}.parquet")
    os.mkfifo(root / "data" / "stuck-study.parquet")
    ledger = pg_database  # PostgreSQL: its advisory lock queues waiters in order (the cancel)
    PrivacyLedger.init(ledger, SITE, PrivacyParams.of("20", "0")).close()
    before = len(_events(ledger))

    # what the coordinator writes into the deployment: another ledger, a command, a pull step
    other_ledger = root / "coordinator-ledger.sqlite"
    marker_cmd, marker_pull = root / "command-ran", root / "pull-step-ran"
    tag = uuid.uuid4().hex[:8]
    pool, name = f"site-{SITE}-{tag}", f"{SITE}-{tag}"
    create_process_pools(prefect_server, pool)
    deployment = {
        "name": "site-worker-test",
        "pull": [
            {"prefect.deployments.steps.run_shell_script": {"script": f"touch {marker_pull}"}}
        ],
        "deployments": [
            {
                "name": name,
                "entrypoint": "dpate.flows.site_release:site_release",
                "parameters": {"spec": load_spec(spec).spec_hash, "site": SITE},
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
        "DPATE_SPECS": str(root / "approved"),
        "DPATE_SITE_KEY": str(site_key(root, SITE)),
    }
    for approved in (spec, stuck):  # the site's operator approves both specs by hash
        _approve(approved, site_env)
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
        # the coordinator points the spec parameter at the site's own records: refused before
        # anything is read, naming no path (the other kinds of probe, a log's path and a URL,
        # would each be a flow run through the server and the worker here; the same rule
        # refuses them in-process: tests/cli/test_site_worker.py, tests/pipeline/test_settings.py)
        with prefect_server.settings():
            probed = run_deployment(
                f"site-release/{name}",
                parameters={"spec": str(data[SITE]), "round": "probe"},
                timeout=120,
                poll_interval=1,
            )
        message = probed.state.message or ""
        assert probed.state.is_failed() and "names its study spec by hash" in message
        assert str(root) not in message
        assert "refused" in (root / "operator.log").read_text()

        # the run went through the site's own ledger (RESERVE + COMMIT) and storage
        assert len(_events(ledger)) == before + 2
        assert list((root / "published").rglob("*.json"))
        assert not other_ledger.exists()
        assert not marker_cmd.exists() and not marker_pull.exists()

        # the coordinator cancels a release between its reservation and its commit
        cancel_s = _cancel_between_reserve_and_commit(prefect_server, worker, name, ledger)
        print(f"cancel request to Cancelled: {cancel_s:.1f} s")
        spent = len(_events(ledger))

        # the worker is stopped while a release is running (blocked reading its data)
        with prefect_server.settings(), get_client(sync_client=True) as client:
            params = {"spec": load_spec(stuck).spec_hash, "round": "stop"}
            run = run_deployment(f"site-release/{name}", parameters=params, timeout=0)
            wait_for(
                lambda: _task_running(client, run.id, "load-site-data"), 120, "the run to start"
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
        assert len(_events(ledger)) == spent  # nothing reserved for the stopped release
    finally:
        worker.stop()
