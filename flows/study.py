"""The ``study`` flow: every site's release in parallel (subflows), then the aggregation.

Deployment entrypoint: ``flows/study.py:study``. On the embedded default every site runs here
(one thread per site, each a ``site_release`` subflow); a site that fails after its retries is
recorded and the aggregation proceeds with the others, unless the spec requires all sites.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task, unmapped
from prefect.task_runners import ThreadPoolTaskRunner

from flows.aggregate import aggregate_study
from flows.site_release import site_release
from tasks.aggregate import resolve_study_context
from tasks.common import PUBLIC_TASK


@task(name="run-site", **PUBLIC_TASK)
def run_site(
    spec: str, site: str, round: str, ledger_url: str | None, storage_url: str | None
) -> dict[str, Any]:
    """One site's ``site_release`` subflow; a failure is returned (public message), not raised."""
    state = site_release(
        spec=spec,
        site=site,
        round=round,
        ledger_url=ledger_url,
        storage_url=storage_url,
        return_state=True,
    )
    if state.is_completed():
        return {"site_id": site, "ok": True, **state.result()}
    exc = state.result(raise_on_failure=False)
    why = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else state.message
    return {"site_id": site, "ok": False, "error": why}


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    return f"study-{str(p['spec']).rstrip('/').rsplit('/', 1)[-1].removesuffix('.toml')}"


@flow(
    name="study",
    flow_run_name=_run_name,
    task_runner=ThreadPoolTaskRunner(max_workers=8),
    persist_result=False,
)
def study(
    spec: str,
    round: str | None = None,
    storage_url: str | None = None,
    ledger_url: str | None = None,
) -> dict[str, Any]:
    """Run ``site_release`` for every site of the spec in parallel, then ``aggregate_study``."""
    ctx = resolve_study_context(spec, round, storage_url)
    runs = run_site.map(
        spec, ctx.site_ids, unmapped(ctx.round), unmapped(ledger_url), unmapped(storage_url)
    )
    sites = [r.result() for r in runs]
    result = aggregate_study(spec, ctx.round, storage_url)
    return {"sites": sites, "result": result}
