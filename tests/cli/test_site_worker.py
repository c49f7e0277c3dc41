"""``dpate site worker`` without a Prefect server: the job configuration keeps none of the
coordinator's ``env`` / ``command`` / ``working_dir``; the worker kills the run's process when
the run is cancelled (and sets it Cancelled) or when the worker stops (and reports it Crashed);
the runner's rules (flow name, parameters, site) and its refusal path; the command refuses to
start without its server or its ledger.
The worker against a real server: tests/topology/test_site_worker.py."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.deployments import site_runner
from dpate.deployments.site_runner import FLOW_NAME, REFUSED, WORKER_SITE_ENV, refusal
from dpate.deployments.site_worker import SiteJobConfiguration, SiteWorker, site_command
from dpate.errors import ExitCode
from dpate.schemas.spec import load_spec

runner = CliRunner()
#: the example spec the deployment guide uploads (deployments/examples/star.toml)
STAR = Path(__file__).resolve().parents[2] / "deployments" / "examples" / "star.toml"


@pytest.fixture(autouse=True)
def _no_site_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    for name in (
        "DPATE_LEDGER_URL",
        "DPATE_SITE_CONFIG",
        "DPATE_SITES",
        "DPATE_SITE_LOG",
        "DPATE_SPECS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(WORKER_SITE_ENV, raising=False)
    monkeypatch.setenv("DPATE_SITE_KEY", str(tmp_path / "keys" / "{site}.ed25519.pem"))


def _keyed_star(tmp_path: Path) -> Path:
    """The shipped STAR spec as the coordinator uploads it once site rural sent its key (made
    here, where this site's DPATE_SITE_KEY names it: ``dpate site keygen``)."""
    from dpate.signing import ensure_private_key, with_public_key

    public = ensure_private_key(tmp_path / "keys" / "rural.ed25519.pem")
    path = tmp_path / "star.toml"
    path.write_text(with_public_key(STAR.read_text(), "rural", public), encoding="utf-8")
    return path


def _flow_run(**parameters: Any):
    from prefect.client.schemas.objects import FlowRun

    return FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name="run", parameters=parameters)


def test_the_job_configuration_keeps_none_of_the_coordinators_env_command_or_working_dir(
    monkeypatch, tmp_path
):
    import prefect.workers.base

    async def unchanged(template: Any, client: Any = None) -> Any:
        return template  # no block or variable references here: no server to ask

    for name in ("resolve_block_document_references", "resolve_variables"):
        monkeypatch.setattr(prefect.workers.base, name, unchanged)
    monkeypatch.setenv("DPATE_LEDGER_URL", "sqlite:////site/ledger.sqlite")
    template = SiteWorker.get_default_base_job_template()
    values = {
        "env": {"DPATE_LEDGER_URL": "sqlite:////coordinator.sqlite", "DPATE_SITE_CONFIG": "/x"},
        "command": "sh -c 'touch /tmp/owned'",
        "working_dir": str(tmp_path),
    }
    config = asyncio.run(  # a client is passed, so none is made (and no server started)
        SiteJobConfiguration.from_template_and_values(template, values, client=object())
    )
    assert config.command == values["command"]  # as Prefect resolved it, before the run
    flow_run = _flow_run(spec="s", site="rural")
    config.prepare_for_flow_run(flow_run)

    assert config.command == site_command()
    assert config.command.endswith("-m dpate.deployments.site_runner")
    assert sys.executable in config.command
    assert config.working_dir is None
    assert config.env["PREFECT__FLOW_RUN_ID"] == str(flow_run.id)
    assert config.env["DPATE_LEDGER_URL"] == "sqlite:////site/ledger.sqlite"  # the worker's
    assert "DPATE_SITE_CONFIG" not in config.env


def test_the_site_worker_does_not_replace_prefects_process_worker_type():
    from prefect.workers.base import BaseWorker
    from prefect.workers.process import ProcessWorker

    assert SiteWorker.type == "process"  # polls an ordinary process pool
    assert BaseWorker.get_worker_class_from_type("process") is ProcessWorker


@pytest.mark.parametrize(
    ("flow_name", "parameters", "worker_site", "rule"),
    [
        ("site-release", {"spec": "s", "site": "rural"}, None, "not started by a site worker"),
        ("evil", {"spec": "s", "site": "rural"}, "rural", "runs only the flow 'site-release'"),
        (
            "site-release",
            {"spec": "s", "site": "rural", "ledger": "x"},
            "rural",
            "accepts only the parameters ['spec', 'site', 'round'], not ['ledger']",
        ),
        ("site-release", {"spec": "s", "site": "ur ban"}, "rural", "refused the parameters"),
        ("site-release", {"site": "rural"}, "rural", "refused the parameters ['spec']"),
        ("site-release", {"spec": "s", "site": "urban"}, "rural", "not 'urban'"),
    ],
)
def test_the_runner_refuses_what_a_site_did_not_agree_to(flow_name, parameters, worker_site, rule):
    why = refusal(flow_name, parameters, worker_site)
    assert why is not None and rule in why


def _approved_star(tmp_path: Path) -> str:
    """The shipped STAR spec with rural's key, approved at site rural (``dpate site
    approve``); its hash."""
    res = runner.invoke(app, ["site", "approve", str(_keyed_star(tmp_path)), "--site", "rural"])
    assert res.exit_code == 0, res.output
    return res.stdout.strip().splitlines()[-1]


def test_the_runner_accepts_a_release_of_an_approved_spec_for_its_own_site(tmp_path):
    spec_hash = _approved_star(tmp_path)
    assert spec_hash == load_spec(_keyed_star(tmp_path)).spec_hash
    assert refusal(FLOW_NAME, {"spec": spec_hash, "site": "rural"}, "rural") is None
    params = {"spec": spec_hash, "site": "rural", "round": "2026-11"}
    assert refusal(FLOW_NAME, params, "rural") is None


@pytest.mark.parametrize(
    "spec",
    [
        "/etc/dpate/site.toml",
        "/work/data/rural.parquet",
        "file:///etc/passwd",
        "http://127.0.0.1:5432/",
        "s3://dpate/specs/star.toml",
        "../../ledger.sqlite",
    ],
)
def test_a_spec_named_by_path_or_url_is_refused_before_anything_is_read(
    spec, tmp_path, monkeypatch
):
    import builtins

    _approved_star(tmp_path)
    opened: list[Any] = []
    real_open = builtins.open
    monkeypatch.setattr(
        builtins, "open", lambda f, *a, **k: opened.append(f) or real_open(f, *a, **k)
    )
    why = refusal(FLOW_NAME, {"spec": spec, "site": "rural"}, "rural")
    assert why is not None and "names its study spec by hash" in why
    assert spec not in why and "/" not in why.replace("dpate site approve", "")
    assert opened == []


def test_an_unapproved_or_edited_spec_is_refused_naming_no_path(tmp_path, monkeypatch):
    from dpate.site.approvals import approved_specs_dir

    spec_hash = _approved_star(tmp_path)
    other = "0" * 64
    why = refusal(FLOW_NAME, {"spec": other, "site": "rural"}, "rural")
    assert why is not None and "is not approved at this site" in why
    assert str(tmp_path) not in why and "dpate site approve" in why
    # the approved copy edited in place (another budget): its content no longer has its hash
    path = approved_specs_dir("rural") / f"{spec_hash}.toml"
    path.chmod(0o644)
    path.write_text(path.read_text().replace('epsilon = "1"', 'epsilon = "2"', 1))
    why = refusal(FLOW_NAME, {"spec": spec_hash, "site": "rural"}, "rural")
    assert why is not None and "no longer hashes to its name" in why
    assert str(tmp_path) not in why


def test_approve_refuses_a_spec_not_naming_the_site_or_its_key_or_not_its_content_address(
    tmp_path,
):
    from dpate.signing import ensure_private_key, with_public_key

    res = runner.invoke(app, ["site", "approve", str(STAR), "--site", "nowhere"])
    assert res.exit_code == ExitCode.SPEC, res.output
    renamed = tmp_path / f"{'a' * 64}.toml"  # a content-addressed key whose content was replaced
    renamed.write_text(STAR.read_text())
    res = runner.invoke(app, ["site", "approve", str(renamed), "--site", "rural"])
    assert res.exit_code == ExitCode.SPEC, res.output
    assert "was replaced after it was published" in res.output
    # reports are signed by default: a spec without the site's key, or with another, is refused
    res = runner.invoke(app, ["site", "approve", str(STAR), "--site", "rural"])
    assert res.exit_code == ExitCode.SETTINGS and "signed by default" in res.output, res.output
    keyed = _keyed_star(tmp_path)
    forger = tmp_path / "forged.toml"
    other = ensure_private_key(tmp_path / "other.ed25519.pem")
    forger.write_text(with_public_key(STAR.read_text(), "rural", other), encoding="utf-8")
    res = runner.invoke(app, ["site", "approve", str(forger), "--site", "rural"])
    assert res.exit_code == ExitCode.SETTINGS and "but the spec lists" in res.output, res.output
    again = runner.invoke(app, ["site", "approve", str(keyed), "--site", "rural"])
    assert "approved" in again.output and again.exit_code == 0
    assert (
        "already approved"
        in runner.invoke(app, ["site", "approve", str(keyed), "--site", "rural"]).output
    )


class _SyncClient:
    """Prefect's sync client as a refusal uses it: the states set, recorded."""

    def __init__(self) -> None:
        self.states: list[tuple[Any, Any, bool]] = []

    def __enter__(self) -> _SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def set_flow_run_state(self, flow_run_id: Any, state: Any, force: bool = False) -> None:
        self.states.append((flow_run_id, state, force))


def test_a_refused_run_is_failed_logged_at_the_site_and_never_run(monkeypatch, tmp_path):
    import prefect.client.orchestration
    import prefect.flow_engine
    import prefect.logging.loggers

    flow_run = _flow_run(spec="s", site="urban")
    client = _SyncClient()

    def never(*a: Any, **k: Any) -> None:
        raise AssertionError("a refused flow run must not run")

    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", str(flow_run.id))
    monkeypatch.setenv(WORKER_SITE_ENV, "rural")
    monkeypatch.setenv("DPATE_SITE_LOG", str(tmp_path / "rural.log"))
    monkeypatch.setattr(prefect.flow_engine, "load_flow_run", lambda flow_run_id: flow_run)
    monkeypatch.setattr(prefect.flow_engine, "run_flow", never)
    # the run's log lines would go to the API: a plain logger here (no server)
    monkeypatch.setattr(
        prefect.logging.loggers, "flow_run_logger", lambda **k: logging.getLogger("run")
    )
    monkeypatch.setattr(site_runner, "_flow_name", lambda fr: FLOW_NAME)
    monkeypatch.setattr(prefect.client.orchestration, "get_client", lambda **k: client)

    assert site_runner.main() == REFUSED
    ((run_id, state, force),) = client.states
    assert run_id == flow_run.id and force and state.is_failed()
    assert "runs only releases for site rural, not 'urban'" in state.message
    assert "not 'urban'" in (tmp_path / "rural.log").read_text()


def test_the_worker_needs_the_coordinators_server(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    res = runner.invoke(app, ["site", "worker", "rural"])
    assert res.exit_code == ExitCode.SETTINGS, res.output
    assert "PREFECT_API_URL" in res.output


def test_the_worker_refuses_to_start_without_the_sites_ledger(monkeypatch, tmp_path):
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # never contacted
    res = runner.invoke(app, ["site", "worker", "rural"])
    assert res.exit_code == ExitCode.SETTINGS, res.output
    assert "DPATE_LEDGER_URL" in res.output

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    monkeypatch.setenv("DPATE_LEDGER_URL", url)
    res = runner.invoke(app, ["site", "worker", "rural"])
    assert res.exit_code == ExitCode.LEDGER, res.output
    assert "dpate ledger init rural" in res.output
    assert not (tmp_path / "ledger.sqlite").exists()  # never created

    PrivacyLedger.init(url, "urban", PrivacyParams.of("1", "0")).close()
    res = runner.invoke(app, ["site", "worker", "rural"])
    assert res.exit_code == ExitCode.LEDGER, res.output
    assert "no lifetime cap for this site" in res.output

    monkeypatch.setenv("DPATE_SITES", "urban")
    res = runner.invoke(app, ["site", "worker", "rural"])
    assert res.exit_code == ExitCode.SETTINGS, res.output
    assert "serves sites ['urban']" in res.output


def test_the_worker_starts_when_the_ledger_is_there(monkeypatch, tmp_path):
    from dpate.deployments import site_worker
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    PrivacyLedger.init(url, "rural", PrivacyParams.of("1", "0")).close()
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setenv("DPATE_LEDGER_URL", url)
    served: list[Any] = []

    def serve(pool: str, **options: Any) -> None:
        served.append(SimpleNamespace(pool=pool, site=os.environ.get(WORKER_SITE_ENV), **options))

    monkeypatch.setattr(site_worker, "serve", serve)
    res = runner.invoke(app, ["site", "worker", "rural", "--name", "w1"])
    assert res.exit_code == 0, res.output
    (s,) = served
    assert (s.pool, s.site, s.name) == ("site-rural", "rural", "w1")
    assert s.limit == 1  # one release at a time per site unless the operator raises it


def test_the_worker_sends_a_runs_heartbeats_while_its_process_lives(monkeypatch):
    """The flow-run process's own heartbeat thread needs its GIL; the worker's do not: they go
    out while the process lives and stop when it ends or the run finishes."""
    import subprocess

    import anyio
    import prefect.events

    from dpate.deployments.site_worker import run_heartbeats

    flow_run = _flow_run(spec="0" * 64, site="rural")
    sent: list[dict[str, Any]] = []

    async def beats(pid: int, stop_after: int) -> None:
        finished = anyio.Event()

        def emit_event(**event: Any) -> None:
            sent.append(event)
            if len(sent) >= stop_after:
                finished.set()

        monkeypatch.setattr(prefect.events, "emit_event", emit_event)
        await run_heartbeats(flow_run, pid, finished, 0.01)

    # a process stuck in one C-level computation holding its GIL: the worker still beats for it
    stuck = subprocess.Popen([sys.executable, "-c", "x = 3 ** (10 ** 9)"])
    try:
        anyio.run(beats, stuck.pid, 3)
    finally:
        stuck.kill()
        stuck.wait()
    assert len(sent) == 3
    assert {e["event"] for e in sent} == {"prefect.flow-run.heartbeat"}
    assert sent[0]["resource"]["prefect.resource.id"] == f"prefect.flow-run.{flow_run.id}"
    # its process gone: no heartbeat, so the server's zombie automation can set it Crashed
    sent.clear()
    anyio.run(beats, stuck.pid, 1)
    assert sent == []


class _Server:
    """The worker's client: the run's state as the server would answer, the states proposed."""

    def __init__(self, states: list[Any]) -> None:
        self.states, self.proposed = states, []

    async def read_flow_run(self, flow_run_id: uuid.UUID) -> Any:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return _flow_run(spec="s", site="rural").model_copy(update={"state": state})

    async def set_flow_run_state(self, flow_run_id: uuid.UUID, state: Any) -> Any:
        self.proposed.append(state)
        return SimpleNamespace(status=SimpleNamespace(value="ACCEPT"))

    async def read_flow(self, flow_id: uuid.UUID) -> Any:
        return SimpleNamespace(name=FLOW_NAME)


def _offline_worker(monkeypatch, server: _Server, argv: list[str]) -> SiteWorker:
    """A site worker talking to ``server``, whose runs start ``argv``, polling every 50 ms."""
    from dpate.deployments import site_worker

    monkeypatch.setattr(site_worker, "runner_argv", lambda: argv)
    monkeypatch.setattr(site_worker, "cancellation_poll_seconds", lambda: 0.05)
    monkeypatch.setattr(site_worker, "heartbeat_seconds", lambda: 3600)
    monkeypatch.setattr(SiteWorker, "client", property(lambda self: server))
    monkeypatch.setattr(SiteWorker, "get_flow_run_logger", lambda self, fr: logging.getLogger("w"))
    monkeypatch.setattr(site_worker, "refuse_if_not_allowed", lambda flow_run, name: None)
    return SiteWorker(work_pool_name="site-rural")


def _configuration(flow_run: Any) -> SiteJobConfiguration:
    config = SiteJobConfiguration(stream_output=False)
    config.prepare_for_flow_run(flow_run)
    return config


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_cancelled_run_has_its_process_killed_and_is_set_cancelled(monkeypatch):
    from prefect.states import Cancelling, Running

    server = _Server([Running(), Running(), Cancelling()])
    worker = _offline_worker(monkeypatch, server, SLEEPER)
    flow_run = _flow_run(spec="s", site="rural")
    result = asyncio.run(worker.run(flow_run, _configuration(flow_run)))

    assert result.status_code == -9  # SIGKILL: the release stops where it is (the crash rule)
    assert _gone(int(result.identifier))
    (state,) = server.proposed
    assert state.is_cancelled() and "killed this run's process" in (state.message or "")


def test_a_run_that_ends_is_left_to_its_own_state(monkeypatch):
    from prefect.states import Running

    server = _Server([Running()])
    worker = _offline_worker(monkeypatch, server, [sys.executable, "-c", "raise SystemExit(3)"])
    flow_run = _flow_run(spec="s", site="rural")
    result = asyncio.run(worker.run(flow_run, _configuration(flow_run)))
    assert result.status_code == 3  # Prefect's BaseWorker reports a non-zero exit Crashed
    assert server.proposed == []


def test_a_worker_that_stops_kills_the_run_and_reports_it_crashed(monkeypatch):
    import anyio
    from prefect.states import Running

    server = _Server([Running()])
    worker = _offline_worker(monkeypatch, server, SLEEPER)
    flow_run = _flow_run(spec="s", site="rural")

    async def stop_while_running() -> int:
        async with anyio.create_task_group() as group:
            pid = await group.start(worker.run, flow_run, _configuration(flow_run))
            group.cancel_scope.cancel()  # what the first SIGTERM does to the worker's task
        return int(pid)

    pid = anyio.run(stop_while_running)
    assert _gone(pid)
    (state,) = server.proposed
    assert state.is_crashed() and "worker stopped while this run was in progress" in state.message


def test_a_site_worker_refuses_ad_hoc_submission():
    """``worker.submit(flow)`` would run a serialised flow of the caller's: never at a site."""
    from dpate.flows.site_release import site_release

    with pytest.raises(RuntimeError, match="only deployed site-release flow runs"):
        asyncio.run(SiteWorker(work_pool_name="site-rural").submit(site_release))


def test_the_worker_refuses_a_run_before_starting_any_process_for_it(monkeypatch, tmp_path):
    """A run for another site is refused by the worker itself (Failed, logged at the site): no
    process starts for it, so nothing of the release's code runs."""
    import prefect.client.orchestration
    from prefect.states import Running

    from dpate.deployments import site_worker

    server = _Server([Running()])
    marker = tmp_path / "started"
    worker = _offline_worker(
        monkeypatch, server, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    )
    monkeypatch.setattr(site_worker, "refuse_if_not_allowed", site_runner.refuse_if_not_allowed)
    client = _SyncClient()
    monkeypatch.setenv(WORKER_SITE_ENV, "rural")
    monkeypatch.setenv("DPATE_SITE_LOG", str(tmp_path / "rural.log"))
    monkeypatch.setattr(prefect.client.orchestration, "get_client", lambda **k: client)
    flow_run = _flow_run(spec="s", site="urban")
    result = asyncio.run(worker.run(flow_run, _configuration(flow_run)))

    assert result.status_code == REFUSED and result.identifier == "refused"
    assert not marker.exists()
    ((_, state, force),) = client.states
    assert force
    assert state.is_failed() and "runs only releases for site rural, not 'urban'" in state.message
    assert "not 'urban'" in (tmp_path / "rural.log").read_text()
