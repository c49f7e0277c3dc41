"""The site's own Prefect worker: runs only the installed ``site-release`` flow, in the worker's
own environment, whatever the (untrusted) coordinator put in the deployment.

A stock Prefect 3.8.8 process worker executes what the deployment says: its ``command`` job
variable (any program), its ``env`` job variable (over the worker's environment: another
``DPATE_LEDGER_URL`` or ``DPATE_SITE_CONFIG``), its ``working_dir``, its pull steps and its
entrypoint (both run by ``python -m prefect.engine``, and the entrypoint also imported in the
worker itself for ``on_crashed`` / ``on_cancellation`` hooks). Whoever holds the Prefect auth
string (the coordinator) writes deployments. :class:`SiteWorker` keeps none of that:

* :class:`SiteJobConfiguration` discards ``env``, ``command`` and ``working_dir`` from the work
  pool's template, the deployment's and the flow run's job variables before Prefect adds its
  per-run variables, so the child's environment is the worker's own plus Prefect's
  (``PREFECT__FLOW_RUN_ID``, the API settings, the control channel) and its command is always
  ``python -m dpate.deployments.site_runner`` (:mod:`dpate.deployments.site_runner`: it runs
  the installed ``dpate.flows.site_release:site_release`` after checking the flow name, the
  parameters and the site, never a deployment's pull steps or entrypoint);
* :meth:`SiteWorker.run` is Prefect's ``ProcessWorker.run`` for a configured command with the
  hook runner's flow resolved to that same installed flow (it has no hooks), instead of
  ``load_flow_from_flow_run``; a run the worker's stop terminates is reported Crashed. A run the
  coordinator cancels (set Cancelling) goes through Prefect's own path in that code
  (``FlowRunExecutorContext``: its observer sees the Cancelling run, its cancellation manager
  signals and terminates the runner and sets the run Cancelled; tests/topology/test_site_worker.py).

:func:`serve` runs it until the first SIGTERM or SIGINT (Prefect's own worker needs two). While a
flow run's process lives, the worker sends that run's heartbeats itself (:func:`run_heartbeats`),
so a run stuck holding its process's GIL does not look crashed while it still runs.

What the coordinator still sets and this worker still reads: ``stream_output``, the job's
``name`` and ``labels`` (cosmetic). Started by ``dpate site worker SITE``
(:mod:`dpate.cli.site_worker`), which sets ``DPATE_WORKER_SITE`` in its own environment: the
runner refuses a flow run for any other site.
"""

from __future__ import annotations

import abc
import asyncio
import os
import signal
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from prefect.runner._flow_run_executor import FlowRunExecutionResult, FlowRunExecutorContext
from prefect.runner._process_manager import ProcessHandle
from prefect.runner._starter_engine import EngineCommandStarter
from prefect.utilities.processutils import command_to_string, get_sys_executable
from prefect.workers.process import (
    ProcessJobConfiguration,
    ProcessWorker,
    ProcessWorkerResult,
)

if TYPE_CHECKING:
    from uuid import UUID

    from prefect.client.schemas.objects import Flow as APIFlow
    from prefect.client.schemas.objects import FlowRun, WorkPool
    from prefect.client.schemas.responses import DeploymentResponse
    from prefect.flows import Flow

__all__ = [
    "RUNNER_MODULE",
    "SiteJobConfiguration",
    "SiteWorker",
    "heartbeat_seconds",
    "run_heartbeats",
    "serve",
    "site_command",
]

#: The module every flow run of a site worker executes (``python -m ...``).
RUNNER_MODULE = "dpate.deployments.site_runner"


def site_command() -> str:
    """The one command a site worker starts: this interpreter, ``-m`` the site runner (as
    ``ProcessJobConfiguration.prepare_for_flow_run`` builds ``python -m prefect.engine``)."""
    return command_to_string([get_sys_executable(), "-m", RUNNER_MODULE])


class SiteJobConfiguration(ProcessJobConfiguration):
    """A process job whose environment, command and working directory are the site's, never
    the work pool's, the deployment's or the flow run's."""

    def prepare_for_flow_run(
        self,
        flow_run: FlowRun,
        deployment: DeploymentResponse | None = None,
        flow: APIFlow | None = None,
        work_pool: WorkPool | None = None,
        worker_name: str | None = None,
        worker_id: UUID | None = None,
    ) -> None:
        # Whatever the template and job variables resolved to is dropped here, before the
        # parents add what they add: BaseJobConfiguration.prepare_for_flow_run puts the
        # worker's Prefect settings, PREFECT__FLOW_RUN_ID and attribution under self.env;
        # ProcessJobConfiguration.prepare_for_flow_run puts os.environ (the worker's) under that
        # and keeps a command that is set (its `_command_configured`, so ProcessWorker.run takes
        # the EngineCommandStarter path, not the workspace-resolving one).
        self.env = {}
        self.command = site_command()
        self.working_dir = None
        super().prepare_for_flow_run(
            flow_run, deployment, flow, work_pool, worker_name, worker_id=worker_id
        )


async def _installed_site_release(flow_run: FlowRun) -> Flow[..., Any]:
    """The flow the hook runner sees: always the installed ``site_release`` (no hooks), never
    ``load_flow_from_flow_run`` (the deployment's pull steps and entrypoint, in the worker)."""
    from dpate.flows.site_release import site_release

    return site_release


# `abc.ABC` among the direct bases keeps Prefect's type registry from registering this class
# under its worker type (prefect/utilities/dispatch.py, `_register_subclass_of_base_type`: "Do
# not register abstract base classes"): the type stays "process" (it polls an ordinary process
# pool, no pool-type mismatch), and `prefect worker start --type process` in a process that
# imported this module still starts Prefect's own ProcessWorker.
class SiteWorker(ProcessWorker, abc.ABC):
    """Prefect's process worker with :class:`SiteJobConfiguration` and the installed flow for
    crash / cancellation hooks."""

    type = "process"
    job_configuration = SiteJobConfiguration
    _description = "A dpate site's worker: runs only the installed site-release flow."
    _display_name = "dpate site"

    async def run(
        self,
        flow_run: FlowRun,
        configuration: ProcessJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None = None,
    ) -> ProcessWorkerResult:
        """Run the flow run's process; when the worker stops meanwhile (its task group is
        cancelled: the process is terminated), report the run Crashed instead of leaving it
        Running until the server's zombie automation notices the missing heartbeats."""
        try:
            return await self._run_process(flow_run, configuration, task_status)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the client is still open: see BaseWorker.setup
                await self._propose_crashed_state(
                    flow_run,
                    "the site's worker stopped while this run was in progress; run it again: "
                    "a release its ledger recorded is finished without a second spend",
                )
            raise

    async def _run_process(
        self,
        flow_run: FlowRun,
        configuration: ProcessJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None,
    ) -> ProcessWorkerResult:
        """``ProcessWorker.run`` (prefect/workers/process.py, 3.8.8) for a configured command
        (its ``if configuration._command_configured:`` branch, always taken here), with
        ``resolve_flow=_installed_site_release`` in place of ``load_flow_from_flow_run``."""
        if task_status is None:
            task_status = anyio.TASK_STATUS_IGNORED
        if configuration.command != site_command():  # prepare_for_flow_run sets it: never
            raise RuntimeError("a site worker runs only the site runner")
        with (
            tempfile.TemporaryDirectory(suffix="prefect") as working_dir,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", DeprecationWarning)
            async with FlowRunExecutorContext() as ctx:
                starter = EngineCommandStarter(
                    command=configuration.command,
                    cwd=Path(working_dir).resolve(),
                    env=configuration.env,
                    stream_output=configuration.stream_output,
                    control_channel=ctx.control_channel,
                )
                executor = ctx.create_executor(
                    flow_run,
                    starter,
                    resolve_flow=_installed_site_release,
                    propose_submitting=False,
                )
                execution: FlowRunExecutionResult | None = None
                finished = anyio.Event()

                async def execute(
                    *, task_status: anyio.abc.TaskStatus[ProcessHandle] = anyio.TASK_STATUS_IGNORED
                ) -> None:
                    nonlocal execution
                    try:
                        execution = await executor.submit(task_status=task_status)
                    finally:
                        finished.set()

                async with anyio.create_task_group() as task_group:
                    handle = await task_group.start(execute)
                    if handle.pid is None:
                        raise RuntimeError("Flow run process has no PID")
                    task_status.started(handle.pid)
                    task_group.start_soon(
                        run_heartbeats, flow_run, handle.pid, finished, heartbeat_seconds()
                    )

        if execution is None or execution.status_code is None:
            raise RuntimeError("Failed to start flow run process.")
        return ProcessWorkerResult(
            status_code=execution.status_code, identifier=str(execution.handle.pid)
        )

    async def _submit_adhoc_run(self, *args: Any, **kwargs: Any) -> None:
        """Ad-hoc submission (``worker.submit(flow)``: a bundle of a flow from this process) is
        not a site worker's job: only deployed ``site-release`` runs are."""
        raise RuntimeError("a site worker runs only deployed site-release flow runs")


def heartbeat_seconds() -> int:
    """The interval of the worker's heartbeats for its runs: ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``
    (the site's ``worker.env`` sets 30, the zombie automation's third; Prefect's default 180)."""
    from prefect.settings import get_current_settings

    value = get_current_settings().flows.heartbeat_frequency
    return max(int(value or 30), 1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process: it exists
        return True
    return True


async def run_heartbeats(
    flow_run: FlowRun, pid: int, finished: anyio.Event, every_s: float
) -> None:
    """Send the flow run's heartbeat (``prefect.flow-run.heartbeat``, as the flow engine does)
    from the worker every ``every_s`` seconds while its process ``pid`` is alive, until
    ``finished``.

    The engine's own heartbeat thread runs in the flow-run process and needs its GIL: a release
    stuck in one long C-level computation (a huge integer power, say) sends none, and the
    server's zombie automation would set the run Crashed while it still runs. The worker is
    another process, so its heartbeats continue exactly as long as the run's process lives: a run
    is reported Crashed only when that process (or the worker's machine) is gone. A stuck run
    still holds the site's one slot (``dpate site worker --limit``): the coordinator cancels it
    (the worker terminates the process), or the operator stops the worker."""
    from prefect.events import emit_event

    resource = {
        "prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
        "prefect.resource.name": flow_run.name or "",
    }
    while not finished.is_set():
        with anyio.move_on_after(every_s):
            await finished.wait()
        if finished.is_set() or not _alive(pid):
            return
        emit_event(event="prefect.flow-run.heartbeat", resource=resource)


def serve(pool: str, *, name: str | None = None, limit: int | None = None) -> None:
    """Run a :class:`SiteWorker` on ``pool`` until the first SIGTERM or SIGINT.

    As ``prefect worker start`` (prefect/cli/worker.py) builds and starts its worker, without its
    signal handlers: Prefect's first SIGINT/SIGTERM only stops taking new runs (an idle worker
    was seen running on for more than 30 s) and its second SIGKILLs the worker. Here the first
    signal cancels the worker's task: it stops polling, terminates a flow run still running and
    reports it Crashed (:meth:`SiteWorker.run`; the ledger lets the next run finish it without a
    second spend), and returns."""
    asyncio.run(_serve(pool, name, limit))


async def _serve(pool: str, name: str | None, limit: int | None) -> None:
    from prefect.settings import PREFECT_WORKER_HEARTBEAT_SECONDS, PREFECT_WORKER_PREFETCH_SECONDS

    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    worker = SiteWorker(
        name=name,
        work_pool_name=pool,
        limit=limit,
        prefetch_seconds=PREFECT_WORKER_PREFETCH_SECONDS.value(),
        heartbeat_interval_seconds=int(PREFECT_WORKER_HEARTBEAT_SECONDS.value()),
    )
    try:
        await worker.start(printer=lambda *a, **k: print(*a, flush=True))
    except asyncio.CancelledError:
        print(f"Worker {worker.name!r} stopped!", flush=True)
