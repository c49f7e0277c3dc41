"""The site's own Prefect worker: runs only the installed ``site-release`` flow, in the worker's
own environment, whatever the (untrusted) coordinator put in the deployment. Built on Prefect's
public worker API only (``prefect.workers.base.BaseWorker`` and its documented ``run`` hook;
tests/test_prefect_public_api.py keeps private Prefect modules out of dpate).

A stock Prefect process worker executes what the deployment says: its ``command`` job variable
(any program), its ``env`` job variable (over the worker's environment: another
``DPATE_LEDGER_URL`` or ``DPATE_SITE_CONFIG``), its ``working_dir``, its pull steps and its
entrypoint (both run by ``python -m prefect.engine``, and the entrypoint also imported in the
worker itself for ``on_crashed`` / ``on_cancellation`` hooks). Whoever holds the Prefect auth
string (the coordinator) writes deployments. :class:`SiteWorker` keeps none of that:

* :class:`SiteJobConfiguration` discards ``env``, ``command`` and ``working_dir`` from the work
  pool's template, the deployment's and the flow run's job variables before Prefect adds its
  per-run variables, so the child's environment is the worker's own plus Prefect's
  (``PREFECT__FLOW_RUN_ID``, the API settings);
* :meth:`SiteWorker.run` (the hook every Prefect worker type implements) starts
  ``python -m dpate.deployments.site_runner`` (:func:`runner_argv`, never the configured
  command) in a new process group and a fresh temporary directory: the runner
  (:mod:`dpate.deployments.site_runner`) runs the installed
  ``dpate.flows.site_release:site_release`` after checking the flow name, the parameters and the
  site, never a deployment's pull steps or entrypoint. The worker loads no flow itself and runs
  no hooks.

While the run's process lives the worker supervises it from its own process:

* it sends the run's heartbeats (:func:`run_heartbeats`), so a run stuck holding its process's
  GIL does not look crashed while it still runs;
* it reads the run's state every ``PREFECT_WORKER_QUERY_SECONDS``: a run the coordinator
  cancels (set Cancelling, as Prefect's UI and ``prefect flow-run cancel`` do) has its process
  group killed and is set Cancelled (:meth:`SiteWorker.run`);
* when the worker stops (its task group is cancelled), it kills the process group and reports
  the run Crashed instead of leaving it Running until the server's zombie automation notices
  the missing heartbeats.

The process is killed (SIGKILL), not asked to stop: a Prefect engine that receives SIGTERM
without Prefect's private control channel reports its own run Crashed, which would race the
Cancelled state. A killed release is what the ledger's crash rule covers (docs/how-to/ledger.md): the
next run of that release finishes it without a second spend. A process that exits non-zero on
its own is reported Crashed by Prefect's ``BaseWorker`` (a refused run stays Failed: a final
state is never overwritten by Crashed).

:func:`serve` runs it until the first SIGTERM or SIGINT (Prefect's own worker needs two).
What the coordinator still sets and this worker still reads: ``stream_output``, the job's
``name`` and ``labels`` (cosmetic). Started by ``dpate site worker SITE``
(:mod:`dpate.cli.site.worker`), which sets ``DPATE_WORKER_SITE`` in its own environment: the
runner refuses a flow run for any other site.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.abc
from prefect.states import Cancelled, Crashed
from prefect.workers.base import BaseWorker
from prefect.workers.process import (
    ProcessJobConfiguration,
    ProcessVariables,
    ProcessWorkerResult,
)

from dpate.deployments.site_runner import REFUSED, refuse_if_not_allowed

if TYPE_CHECKING:
    from uuid import UUID

    from prefect.client.schemas.objects import Flow as APIFlow
    from prefect.client.schemas.objects import FlowRun, State, WorkPool
    from prefect.client.schemas.responses import DeploymentResponse

__all__ = [
    "RUNNER_MODULE",
    "SiteJobConfiguration",
    "SiteWorker",
    "cancellation_poll_seconds",
    "heartbeat_seconds",
    "run_heartbeats",
    "runner_argv",
    "serve",
    "site_command",
]

#: The module every flow run of a site worker executes (``python -m ...``).
RUNNER_MODULE = "dpate.deployments.site_runner"

#: Why a run ended with the worker (the Crashed state's message).
STOPPED = (
    "the site's worker stopped while this run was in progress; run it again: a release its "
    "ledger recorded is finished without a second spend"
)
#: Why a run the coordinator cancelled ended (the Cancelled state's message).
CANCELLED = (
    "cancelled: the site's worker killed this run's process; a release its ledger reserved is "
    "finished by the next run of that round without a second spend"
)


def runner_argv() -> list[str]:
    """The one program a site worker starts: this interpreter, ``-m`` the site runner."""
    return [sys.executable, "-m", RUNNER_MODULE]


def site_command() -> str:
    """:func:`runner_argv` as the job configuration's ``command`` string (what Prefect records)."""
    return shlex.join(runner_argv())


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
        # worker's Prefect settings and PREFECT__FLOW_RUN_ID under self.env;
        # ProcessJobConfiguration.prepare_for_flow_run puts os.environ (the worker's) under that.
        self.env = {}
        self.command = site_command()
        self.working_dir = None
        super().prepare_for_flow_run(
            flow_run, deployment, flow, work_pool, worker_name, worker_id=worker_id
        )

    def runner_env(self) -> dict[str, str]:
        """The runner's environment: :attr:`env` without the variables Prefect unset (None)."""
        return {k: v for k, v in self.env.items() if v is not None}


async def _start_runner(configuration: SiteJobConfiguration, cwd: str) -> anyio.abc.Process:
    """The site runner's process, leader of a new process group (its own children die with it),
    its output the worker's own (``stream_output``) or discarded."""
    output = None if configuration.stream_output else subprocess.DEVNULL
    return await anyio.open_process(
        runner_argv(),
        cwd=cwd,
        env=configuration.runner_env(),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
        start_new_session=True,
    )


async def _kill(process: anyio.abc.Process) -> None:
    """SIGKILL the process group of ``process`` (see the module's docstring) and reap it."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


# `abc.ABC` among the direct bases keeps Prefect's type registry from registering this class
# under its worker type (prefect/utilities/dispatch.py: the subclass hook `register_base_type`
# installs does not register abstract base classes): the type stays "process" (it polls an
# ordinary process pool, no pool-type mismatch), and `prefect worker start --type process` in a
# process that imported this module still starts Prefect's own ProcessWorker.
class SiteWorker(BaseWorker[SiteJobConfiguration, ProcessVariables, ProcessWorkerResult], abc.ABC):
    """A Prefect worker of type ``process`` that runs every flow run as the site runner."""

    type = "process"
    job_configuration = SiteJobConfiguration
    job_configuration_variables = ProcessVariables

    async def run(
        self,
        flow_run: FlowRun,
        configuration: SiteJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None = None,
    ) -> ProcessWorkerResult:
        """Run the flow run's process to its end and return its exit status. A run the
        coordinator cancels is killed and set Cancelled; when the worker stops meanwhile (this
        task is cancelled), the process is killed and the run reported Crashed."""
        started = anyio.TASK_STATUS_IGNORED if task_status is None else task_status
        # a run this site does not run is refused here, before any process starts for it (the
        # runner checks again before it loads the flow)
        flow_name = (await self.client.read_flow(flow_run.flow_id)).name
        if await anyio.to_thread.run_sync(refuse_if_not_allowed, flow_run, flow_name):
            started.started(0)  # no process: nothing for Prefect to record as the run's pid
            return ProcessWorkerResult(status_code=REFUSED, identifier="refused")
        with tempfile.TemporaryDirectory(prefix="dpate-run-") as cwd:
            process = await _start_runner(configuration, cwd)
            try:
                started.started(process.pid)
                status = await self._supervise(flow_run, process)
            except BaseException as exc:
                with anyio.CancelScope(shield=True):  # the client is still open: BaseWorker.setup
                    await _kill(process)
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        await self._report(flow_run, Crashed(message=STOPPED))
                raise
        return ProcessWorkerResult(status_code=status, identifier=str(process.pid))

    async def _supervise(self, flow_run: FlowRun, process: anyio.abc.Process) -> int:
        """Wait for ``process``, sending its run's heartbeats and ending it if it is cancelled."""
        finished = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(run_heartbeats, flow_run, process.pid, finished, heartbeat_seconds())
            group.start_soon(self._end_if_cancelled, flow_run, process, finished)
            try:
                status = await process.wait()
            finally:
                finished.set()
        return status

    async def _end_if_cancelled(
        self, flow_run: FlowRun, process: anyio.abc.Process, finished: anyio.Event
    ) -> None:
        """Every :func:`cancellation_poll_seconds` until ``finished``, read the run's state: once
        it is Cancelling (or already Cancelled), kill the process and set the run Cancelled.
        While a run is Cancelling the server accepts no other state from it, so the process
        cannot complete the run meanwhile."""
        every_s = cancellation_poll_seconds()
        while not finished.is_set():
            with anyio.move_on_after(every_s):
                await finished.wait()
            if finished.is_set():
                return
            try:
                state: State[Any] | None = (await self.client.read_flow_run(flow_run.id)).state
            except Exception:  # the server is unreachable for now: ask again next time
                self.get_flow_run_logger(flow_run).debug("reading the run's state", exc_info=True)
                continue
            if state is not None and (state.is_cancelling() or state.is_cancelled()):
                await _kill(process)
                if state.is_cancelling():
                    await self._report(flow_run, Cancelled(message=CANCELLED))
                return

    async def _report(self, flow_run: FlowRun, state: State[Any]) -> None:
        """Propose the run's ``state`` (not forced: a final state stays)."""
        logger = self.get_flow_run_logger(flow_run)
        try:
            result = await self.client.set_flow_run_state(flow_run.id, state)
        except Exception:
            logger.exception("could not report the run %s", state.type.value)
            return
        logger.info("reported the run %s (%s)", state.type.value, result.status.value)

    async def submit(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ad-hoc submission (``worker.submit(flow)``: a bundle of a flow from this process) is
        not a site worker's job: only deployed ``site-release`` runs are."""
        raise RuntimeError("a site worker runs only deployed site-release flow runs")


def heartbeat_seconds() -> int:
    """The interval of the worker's heartbeats for its runs: ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``
    (the site's ``worker.env`` sets 30, the zombie automation's third; Prefect's default 180)."""
    from prefect.settings import get_current_settings

    value = get_current_settings().flows.heartbeat_frequency
    return max(int(value or 30), 1)


def cancellation_poll_seconds() -> float:
    """How often the worker reads a running run's state for a cancellation: the worker's own
    polling interval, ``PREFECT_WORKER_QUERY_SECONDS`` (Prefect's default 10)."""
    from prefect.settings import get_current_settings

    return max(float(get_current_settings().worker.query_seconds), 0.1)


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
    (the worker kills the process), or the operator stops the worker."""
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
    signal cancels the worker's task: it stops polling, kills a flow run still running and
    reports it Crashed (:meth:`SiteWorker.run`; the ledger lets the next run finish it without a
    second spend), and returns."""
    asyncio.run(_serve(pool, name, limit))


async def _serve(pool: str, name: str | None, limit: int | None) -> None:
    from prefect.settings import get_current_settings

    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    settings = get_current_settings().worker
    worker = SiteWorker(
        name=name,
        work_pool_name=pool,
        limit=limit,
        prefetch_seconds=settings.prefetch_seconds,
        heartbeat_interval_seconds=int(settings.heartbeat_seconds),
    )
    try:
        await worker.start(printer=lambda *a, **k: print(*a, flush=True))
    except asyncio.CancelledError:
        print(f"Worker {worker.name!r} stopped!", flush=True)
