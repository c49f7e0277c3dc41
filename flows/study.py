"""The ``study`` flow: every site's release in parallel (subflows), then the aggregation.

Deployment entrypoint: ``dpate.flows.study:study``. On the embedded default every site runs here
(one thread per site, each a ``site_release`` subflow); a site that fails after its retries is
recorded and the aggregation proceeds with the others, unless the spec requires all sites.
Parameters: ``spec`` and ``round`` only. Ledgers, data and the publication root come from this
process's site configuration (``dpate run --ledger/--storage`` sets it; docs/reference/pipeline.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prefect import flow, task, unmapped
from prefect.client.schemas.objects import State
from prefect.exceptions import MissingResult
from prefect.task_runners import ThreadPoolTaskRunner

from dpate.flows.aggregate import aggregate_study
from dpate.flows.site_release import site_release
from dpate.settings import StudyContext, load_study_spec, resolve_site
from dpate.site.reports import published_site
from dpate.study_check import not_ready_error
from dpate.tasks.aggregate import StudyIncompleteError, published_result, resolve_study_context
from dpate.tasks.common import NO_RETRY_TASK
from dpate.tasks.preflight import check_study_sites


def state_output(state: State, fallback: Callable[[], Any]) -> Any:
    """A completed run's return value; ``fallback()`` (read the published document) when Prefect
    hands back a state without its data (results are never persisted, by design)."""
    try:
        return state.result()
    except MissingResult:
        return fallback()


def state_error(state: State) -> str:
    """A failed run's public message (exception type and text: dpate errors hold no values)."""
    return (state.message or state.name or "failed").removeprefix(
        "Flow run encountered an exception: "
    )


def release_one_site(spec: str, site: str, round: str | None) -> dict[str, Any]:
    """Run one site's ``site_release`` flow; its published summary, or a failure with its public
    message (``ok`` says which). Shared by the ``study`` flow and ``dpate site-release``."""
    state = site_release(spec=spec, site=site, round=round, return_state=True)
    if not state.is_completed():
        return {"site_id": site, "ok": False, "error": state_error(state)}
    return {
        "site_id": site,
        "ok": True,
        **state_output(state, lambda: published_site(resolve_site(spec, site, round))),
    }


@task(name="run-site", task_run_name="release-{site}-round-{round}", **NO_RETRY_TASK)
def run_site(spec: str, site: str, round: str) -> dict[str, Any]:
    """One site's ``site_release`` subflow; a failure is returned (public message), not raised."""
    return release_one_site(spec, site, round)


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    try:  # the study's id and round, as the spec names them
        study = load_study_spec(str(p["spec"]))
        return f"study-{study.study_id}-round-{p.get('round') or study.release}"
    except Exception:  # an unreadable spec fails in the flow itself, with its message
        name = str(p["spec"]).rstrip("/").rsplit("/", 1)[-1].removesuffix(".toml")
        return f"study-{name}-round-{p.get('round') or 'default'}"


PARALLEL_SITES_ENV = "DPATE_PARALLEL_SITES"


def parallel_sites() -> int:
    """Sites released at once on this machine: ``DPATE_PARALLEL_SITES`` (default 4), read when a
    study run starts. The embedded Prefect server keeps its state in SQLite, which refuses
    concurrent writers under load ("database is locked", then client retries with backoff);
    against a PostgreSQL-backed server raise it to the number of sites."""
    raw = os.environ.get(PARALLEL_SITES_ENV, "").strip() or "4"
    if not (raw.isdigit() and int(raw) >= 1):
        raise ValueError(
            f"{PARALLEL_SITES_ENV} ({raw!r}) must be a whole number of sites, at least 1"
        )
    return int(raw)


class _SiteThreads(ThreadPoolTaskRunner):  # type: ignore[type-arg]
    """One thread per site released at once, sized by :func:`parallel_sites` when each study run
    starts (Prefect runs every flow run on a :meth:`duplicate` of the flow's runner), not when
    this module is imported."""

    def __init__(self, max_workers: int | None = None) -> None:
        super().__init__(max_workers=parallel_sites() if max_workers is None else max_workers)

    def duplicate(self) -> _SiteThreads:
        return type(self)()


@flow(
    name="study",
    flow_run_name=_run_name,
    # Prefect declares the parameter invariant in the future type (TaskRunner[PrefectFuture]);
    # its thread-pool runner is a TaskRunner[PrefectConcurrentFuture]
    task_runner=_SiteThreads(max_workers=4),  # type: ignore[arg-type]
    persist_result=False,
)
def study(spec: str, round: str | None = None) -> dict[str, Any]:
    """Check every site (:func:`dpate.study_check.check_study`: ledger, publication path, data,
    feasibility, the round's history) before any site reserves; then ``site_release`` for every
    site in parallel, then ``aggregate_study``. A study that cannot complete spends nothing."""
    ctx = resolve_study_context(spec, round, None)
    checked = check_study_sites(spec, ctx.round)
    if not checked.can_run:  # before any site reserves: a study that cannot complete spends nothing
        raise not_ready_error(checked)
    runs = run_site.map(spec, ctx.site_ids, unmapped(ctx.round))
    sites = [r.result() for r in runs]
    state = aggregate_study(spec, ctx.round, None, return_state=True)
    if not state.is_completed():
        raise StudyIncompleteError(f"study {ctx.study_id}: {state_error(state)}", sites=sites)
    return {"sites": sites, "result": state_output(state, lambda: _published(ctx))}


def _published(ctx: StudyContext) -> dict[str, Any]:
    """The round's published result document (what a completed aggregate wrote)."""
    found = published_result(ctx)
    if found is None:
        raise StudyIncompleteError(f"study {ctx.study_id}: no result of round {ctx.round} found")
    return found[1]
