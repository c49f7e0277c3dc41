"""The ``study-deployed`` flow: a multi-site study run the production way.

Where ``flows/study.py:study`` runs every site in-process (the embedded default: one machine holds
every site's data), this flow never touches a site's data or ledger. It runs on the coordinator's
work pool and only *asks* each site to release:

1. triggers the ``site-release/<site>`` deployment of every site of the spec
   (``run_deployment``; each is bound to the site's own work pool, so only the worker running at
   the site can pick it up, with the site's local data path, ledger and storage credentials).
   A site with no such deployment releases on its own schedule (``dpate-release.timer``,
   docs/how-to/deploying.md): it is not triggered, and its report of the round is awaited in storage
   instead, within the same timeout (:func:`wait_for_sites`);
2. waits for them up to ``site_timeout_s`` (default 1 h); a site that has not finished by then is
   recorded as missing and its run, if it never started, is cancelled (a worker that comes back
   later does not release for a study that was already aggregated; re-running the study asks it
   again). A site whose machine dies mid-run does not hold the study to the deadline: its run
   stops sending heartbeats and the server's zombie automation (``deployments/automations.py``)
   sets it ``Crashed`` within about 90 s. The timeout therefore only bounds a worker that is down
   or a release that is slow; longer waits a maintenance window out, shorter publishes sooner
   (a late site is in the next run of the same round, spending nothing twice);
3. triggers the ``aggregate-study/<name>`` deployment, which reads whatever reports were published
   and records the missing sites (or fails if the spec says ``require_all_sites``);
4. returns the published result document and each site's run status.

Re-running a study is always safe: a site that already released returns its recorded release
from its ledger (no budget, no new noise) and re-publishes identical bytes. Trigger and wait are
idempotent within a flow run (``idempotency_key``), so a retried task never starts a second run.

Deployment: ``deployments/prefect.yaml`` (``study-deployed/<study>``). Parameters are public.
A site's run gets only ``spec``, ``site`` and ``round``: its data, ledger and publication root
are the site worker's own configuration (docs/how-to/deploying.md), so nothing the coordinator sends can
point a site at another ledger.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.states import Cancelled

from dpate.settings import StudyContext, resolve_study
from dpate.storage import Store
from dpate.tasks.aggregate import published_result

__all__ = ["resolve_round", "study_deployed", "trigger_site", "wait_for_sites"]

#: Site runs in these states have not started at the site: safe to cancel at the deadline.
_NOT_STARTED = {StateType.SCHEDULED, StateType.PENDING, StateType.PAUSED}
_FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}

_TASK: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


def resolve_round(
    round: str | None, round_format: str | None, scheduled: datetime | None
) -> str | None:
    """The release round: ``round`` if given; else ``round_format`` (a ``strftime`` pattern such as
    ``"%Y-%m"``) applied to the run's scheduled start time, so a monthly schedule releases once a
    month and a retry of the same scheduled run keeps its round; else the spec's ``release``."""
    if round:
        return round
    if round_format:
        when = scheduled or datetime.now(UTC)
        return when.strftime(round_format)
    return None


def _run_deployment(name: str, **options: Any) -> FlowRun:
    """``run_deployment`` from these synchronous tasks, where Prefect's ``async_dispatch``
    returns the flow run itself (its declared type also allows the coroutine of async callers)."""
    return cast(FlowRun, run_deployment(name, **options))


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    name = str(p["spec"]).rstrip("/").rsplit("/", 1)[-1].removesuffix(".toml")
    round = p.get("round") or (p.get("round_format") and "scheduled") or "spec"
    return f"study-{name}-round-{round}"


@task(
    name="trigger-site-release",
    task_run_name="trigger-site-release-{site}",
    retries=3,
    retry_delay_seconds=[2, 10, 30],
    **_TASK,
)
def trigger_site(
    ctx: StudyContext, site: str, site_deployment: str, study_run_id: str
) -> str | None:
    """Create the site's flow run (not waiting); returns its id. Idempotent per study run.
    The run names the spec by its hash: the site runs the copy its operator approved
    (``dpate site approve``, :mod:`dpate.site.approvals`), never a path or URL it is sent.

    None when the site has no such deployment: it releases on its own schedule, and its report
    is awaited in storage instead (:func:`wait_for_sites`)."""
    name = site_deployment.format(site=site, study=ctx.study_id)
    try:
        run = _run_deployment(
            name,
            parameters={"spec": ctx.spec.spec_hash, "site": site, "round": ctx.round},
            timeout=0,
            idempotency_key=f"{study_run_id}:{site}:{ctx.round}",
            tags=["dpate", f"study:{ctx.study_id}", f"site:{site}", f"round:{ctx.round}"],
        )
    except ObjectNotFound:
        get_run_logger().info(
            "site %s: no deployment %r, so it is not triggered; its report of round %s is awaited "
            "in storage (a site releasing on its own schedule)",
            site,
            name,
            ctx.round,
        )
        return None
    return str(run.id)


@task(name="wait-for-sites", **_TASK)
def wait_for_sites(
    runs: dict[str, str],
    timeout_s: float,
    poll_interval_s: float,
    ctx: StudyContext | None = None,
    awaited: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Poll the sites' runs until every one is final or ``timeout_s`` passes; cancel the runs that
    never started by then. Returns each site's status: ``completed``, ``failed`` (state name and
    message) or ``timed_out``.

    The ``awaited`` sites (no deployment: they release on their own schedule) are not runs here:
    their report of ``ctx``'s round is looked for in storage at each poll, within the same
    timeout, giving ``published`` or ``timed_out``. Only the object's existence is checked; the
    aggregate validates it like every report. Sites are returned in ``ctx``'s order."""
    log = get_run_logger()
    deadline = time.monotonic() + timeout_s
    status: dict[str, dict[str, Any]] = {}
    awaited = list(awaited or [])
    if awaited and ctx is None:
        raise ValueError("awaited sites need the study context (where their reports are)")
    store = Store(ctx.storage_url) if ctx is not None and awaited else None
    keys = {
        site: Store.site_report_key(ctx.study_id, site, ctx.release_id(site))
        for site in awaited
        if ctx is not None
    }
    client_cm: Any = get_client(sync_client=True) if runs else nullcontext(None)
    with client_cm as client:
        while True:
            pending = _poll_runs(client, runs, status, log)
            waiting = _poll_published(store, keys, awaited, status, log)
            if not (pending or waiting) or time.monotonic() >= deadline:
                break
            time.sleep(min(poll_interval_s, max(deadline - time.monotonic(), 0.05)))
        for site in pending:
            status[site] = _time_out_run(client, site, runs[site], timeout_s)
            log.warning("site %s: %s", site, status[site]["message"])
    for site in waiting:
        status[site] = {
            "site_id": site,
            "flow_run_id": None,
            "status": "timed_out",
            "state": "not published",
            "message": (
                f"no deployment, and no report published within {timeout_s:.0f} s; a later run "
                f"of the same round includes it once the site's own release has published"
            ),
        }
        log.warning("site %s: %s", site, status[site]["message"])
    order = ctx.site_ids if ctx is not None else list(runs)
    return {site: status[site] for site in order if site in status}


def _poll_runs(
    client: Any, runs: dict[str, str], status: dict[str, dict[str, Any]], log: Any
) -> list[str]:
    """Record each triggered site whose run reached a final state; the sites still pending."""
    pending = []
    for site, run_id in runs.items():
        if site in status:
            continue
        state = client.read_flow_run(UUID(run_id)).state
        if state is not None and state.type in _FINAL:
            ok = state.type == StateType.COMPLETED
            status[site] = {
                "site_id": site,
                "flow_run_id": run_id,
                "status": "completed" if ok else "failed",
                "state": state.name,
                **({} if ok else {"message": state.message or ""}),
            }
            log.info("site %s: run %s", site, state.name)
        else:
            pending.append(site)
    return pending


def _poll_published(
    store: Store | None,
    keys: dict[str, str],
    awaited: list[str],
    status: dict[str, dict[str, Any]],
    log: Any,
) -> list[str]:
    """Record each awaited site whose report is now in storage; the sites still waited for."""
    waiting = []
    for site in awaited:
        if site in status:
            continue
        if store is not None and store.exists(keys[site]):
            status[site] = {
                "site_id": site,
                "flow_run_id": None,
                "status": "published",
                "state": "published",
                "message": "no deployment: the site's own release published its report",
            }
            log.info("site %s: report published (released on its own schedule)", site)
        else:
            waiting.append(site)
    return waiting


def _time_out_run(client: Any, site: str, run_id: str, timeout_s: float) -> dict[str, Any]:
    """A site's run still not final at the deadline: cancelled if it never started."""
    state = client.read_flow_run(UUID(run_id)).state
    started = state is not None and state.type not in _NOT_STARTED
    if not started:
        client.set_flow_run_state(
            UUID(run_id),
            Cancelled(message=f"site did not start within the study's {timeout_s:.0f} s"),
            force=True,
        )
    return {
        "site_id": site,
        "flow_run_id": run_id,
        "status": "timed_out",
        "state": state.name if state else "unknown",
        "message": (
            f"no result within {timeout_s:.0f} s; "
            + ("still running at the site" if started else "never started: cancelled")
        ),
    }


@task(name="run-aggregate", retries=2, retry_delay_seconds=[5, 30], **_TASK)
def run_aggregate(
    ctx: StudyContext, spec: str, aggregate_deployment: str, timeout_s: float, study_run_id: str
) -> dict[str, Any]:
    """Run the aggregate deployment and wait for it; its state, never its (unpersisted) result."""
    run = _run_deployment(
        aggregate_deployment.format(study=ctx.study_id),
        parameters={"spec": spec, "round": ctx.round},
        timeout=timeout_s,
        idempotency_key=f"{study_run_id}:aggregate:{ctx.round}",
        tags=["dpate", f"study:{ctx.study_id}", f"round:{ctx.round}"],
    )
    state = run.state
    return {
        "flow_run_id": str(run.id),
        "state": state.name if state else "unknown",
        "completed": bool(state and state.type == StateType.COMPLETED),
        "message": (state.message or "") if state else "",
    }


@flow(name="study-deployed", flow_run_name=_run_name, persist_result=False)
def study_deployed(
    spec: str,
    round: str | None = None,
    round_format: str | None = None,
    site_timeout_s: float = 3600,
    aggregate_timeout_s: float = 3600,
    site_deployment: str = "site-release/{site}",
    aggregate_deployment: str = "aggregate-study/aggregate",
    poll_interval_s: float = 5.0,
) -> dict[str, Any]:
    """Ask every site to release (its own deployment), wait up to ``site_timeout_s``, aggregate.
    A site without a deployment is not asked: its report is awaited in storage (it releases on
    its own schedule), within the same timeout.

    ``spec`` must be readable by the coordinator's worker (an ``s3://`` or ``https://`` URL, or
    a path on its machine); each site is asked for the spec's hash and runs the copy its
    operator approved with ``dpate site approve`` (a site that has not approved it refuses the
    run). ``site_deployment`` and ``aggregate_deployment`` may contain ``{site}`` and
    ``{study}``.
    """
    from prefect.runtime import flow_run

    round = resolve_round(round, round_format, flow_run.scheduled_start_time)
    ctx = resolve_study(spec, round)
    me = str(flow_run.id)
    triggered = {s: trigger_site(ctx, s, site_deployment, me) for s in ctx.site_ids}
    runs = {s: run_id for s, run_id in triggered.items() if run_id is not None}
    awaited = [s for s, run_id in triggered.items() if run_id is None]
    if not runs:
        # not one site deployment found: far likelier a misspelt pattern than a study whose every
        # site releases on its own timer; say so now rather than wait site_timeout_s for nothing
        raise RuntimeError(
            f"no site has a deployment named by site_deployment={site_deployment!r} (e.g. "
            f"{site_deployment.format(site=ctx.site_ids[0], study=ctx.study_id)!r}): check the "
            "pattern, or run `dpate aggregate` once the sites' own releases have published"
        )
    sites = wait_for_sites(runs, site_timeout_s, poll_interval_s, ctx, awaited)
    agg = run_aggregate(ctx, spec, aggregate_deployment, aggregate_timeout_s, me)
    if not agg["completed"]:
        raise RuntimeError(
            f"study {ctx.study_id} round {ctx.round}: the aggregate run {agg['flow_run_id']} "
            f"ended {agg['state']} ({agg['message']}); site runs: "
            + ", ".join(f"{s} {v['status']}" for s, v in sites.items())
            + ". Re-run the study: sites that released spend nothing again"
        )
    published = published_result(ctx)
    uri, result = published if published else (None, None)
    return {
        "study_id": ctx.study_id,
        "round": ctx.round,
        "sites": list(sites.values()),
        "aggregate": agg,
        "result_uri": uri,
        "result": result,
    }
