"""The flow-run process of a site worker: ``python -m dpate.deployments.site_runner``.

Started by :class:`dpate.deployments.site_worker.SiteWorker` (``dpate site worker SITE``) in the
worker's own environment with Prefect's per-run variables (``PREFECT__FLOW_RUN_ID``, the API
settings). It runs the flow run with Prefect's public flow engine, as ``python -m
prefect.engine`` does (the flow run id from the environment, ``handle_engine_signals``,
``prefect.flow_engine.load_flow_run`` and ``run_flow``), except that it never calls
``load_flow``: no deployment pull step runs and no deployment entrypoint is imported. The flow is
always the installed ``dpate.flows.site_release.site_release``, and only after these rules hold
(:func:`refusal`):

1. the process was started by a site worker: ``DPATE_WORKER_SITE`` names the worker's site;
2. the flow run is a run of the flow ``site-release``;
3. its parameters are only ``spec``, ``site`` and ``round`` (:class:`dpate.settings.SiteRun`);
4. its ``site`` is the worker's site;
5. its ``spec`` is the hash of a spec the site's operator approved (``dpate site approve``,
   :mod:`dpate.site.approvals`): a path or URL, or an unapproved hash, is refused before
   anything is read, with a message naming no local path.

A refused run is set Failed with a message naming the rule, the message goes to the site's
operator log (``DPATE_SITE_LOG`` or the site config's ``log``, else
``$DPATE_HOME/logs/<site>.log``) and to stderr, and the process exits with status 3.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ValidationError

from dpate.settings import IDENTIFIER, SettingsError, SiteRun, dpate_home, site_config

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun

__all__ = ["FLOW_NAME", "REFUSED", "WORKER_SITE_ENV", "main", "refusal", "refuse_if_not_allowed"]

#: The environment variable ``dpate site worker SITE`` sets in its own process (the runner
#: inherits it; a deployment's ``env`` job variable never reaches the runner).
WORKER_SITE_ENV = "DPATE_WORKER_SITE"
#: The only flow a site worker runs (``@flow(name=...)`` of dpate.flows.site_release).
FLOW_NAME = "site-release"
#: Exit status of a refused flow run.
REFUSED = 3

_PARAMETERS = ("spec", "site", "round")


def refusal(flow_name: str, parameters: dict[str, Any], worker_site: str | None) -> str | None:
    """Why a site worker must not run this flow run (the rule, and what to do), or None.
    Names only what the coordinator chose (flow name, parameter names, site ids): public."""
    if not worker_site or not re.fullmatch(IDENTIFIER, worker_site):
        return (
            f"this process was not started by a site worker ({WORKER_SITE_ENV} is not set to a "
            f"site id): start the site's worker with `dpate site worker SITE`"
        )
    if flow_name != FLOW_NAME:
        return (
            f"site {worker_site}'s worker runs only the flow {FLOW_NAME!r}, not {flow_name!r}: "
            f"refused (deploy dpate.flows.site_release:site_release on this site's pool)"
        )
    extra = sorted(set(parameters) - set(_PARAMETERS))
    if extra:
        return (
            f"site {worker_site}'s worker accepts only the parameters {list(_PARAMETERS)}, "
            f"not {extra}: refused"
        )
    try:
        run = SiteRun(**parameters)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        return (
            f"site {worker_site}'s worker refused the parameters {fields}: spec must be a "
            f"non-empty string, site and round identifiers"
        )
    if run.site != worker_site:
        return (
            f"site {worker_site}'s worker runs only releases for site {worker_site}, not "
            f"{run.site!r}: refused (each site's deployment belongs on that site's pool)"
        )
    return _unapproved(run.spec, worker_site)


def _unapproved(spec: str, site: str) -> str | None:
    """Why ``spec`` is not a spec ``site``'s operator approved (rule 5), or None. The message
    names the hash and what to do, never a local path."""
    from dpate.site.approvals import load_approved_spec

    try:
        load_approved_spec(spec, site=site)
    except SettingsError as exc:
        return str(exc)
    return None


def _site_log(site: str) -> logging.Logger | None:
    """The site's operator log file (:func:`dpate.site.operator_log.site_file_logger`), when its path
    does not depend on the study (a refused run has no study)."""
    from dpate.site.operator_log import site_file_logger

    try:
        cfg = site_config(site, "{study}")
    except SettingsError:
        return None
    path = cfg.site_log or str(dpate_home() / "logs" / f"{site}.log")
    if "{study}" in path:
        return None
    return site_file_logger(site, path)


def _refuse(flow_run: FlowRun, message: str, site: str | None) -> None:
    """Set the run Failed with ``message``, and log it at the site."""
    from prefect.client.orchestration import get_client
    from prefect.states import Failed

    print(f"dpate site worker: flow run {flow_run.id}: {message}", file=sys.stderr, flush=True)
    log = _site_log(site) if site and re.fullmatch(IDENTIFIER, site) else None
    if log is not None:
        log.error("flow run %s (%s) refused: %s", flow_run.id, flow_run.name, message)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, Failed(message=message), force=True)


def refuse_if_not_allowed(flow_run: FlowRun, flow_name: str) -> str | None:
    """Refuse the run (:func:`refusal` for this process's worker site): set it Failed with the
    reason, log it at the site, and return the reason; None when the run may go on. The worker
    calls it before it starts a process for the run, the runner again before it loads the flow."""
    worker_site = os.environ.get(WORKER_SITE_ENV, "").strip() or None
    why = refusal(flow_name, dict(flow_run.parameters), worker_site)
    if why is not None:
        _refuse(flow_run, why, worker_site)
    return why


def _flow_name(flow_run: FlowRun) -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow(flow_run.flow_id).name


def main() -> int:
    """Run the flow run ``PREFECT__FLOW_RUN_ID`` as the installed ``site_release``, or refuse it."""
    from prefect.engine import engine_logger, handle_engine_signals

    try:
        flow_run_id = UUID(os.environ.get("PREFECT__FLOW_RUN_ID", ""))
    except ValueError:
        engine_logger.error("Invalid flow run id: PREFECT__FLOW_RUN_ID is not set to one")
        return 1

    with handle_engine_signals(flow_run_id):
        from prefect.flow_engine import load_flow_run, run_flow
        from prefect.logging.loggers import flow_run_logger

        flow_run = load_flow_run(flow_run_id=flow_run_id)
        run_logger = flow_run_logger(flow_run=flow_run)
        why = refuse_if_not_allowed(flow_run, _flow_name(flow_run))
        if why is not None:
            run_logger.error(why)
            return REFUSED

        from dpate.flows.site_release import site_release

        # engine.py passes the run's logger adapter as its error_logger too
        run_flow(site_release, flow_run=flow_run, error_logger=run_logger)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
