"""The ``site_release`` flow: one site's private release, run at the site.

Deployment entrypoint: ``dpate.flows.site_release:site_release``. Its only parameters are what the
(untrusted) coordinator may choose: ``spec``, ``site`` and ``round`` (validated as a
:class:`dpate.settings.SiteRun`). The site's data, ledger, publication root and operator log come
only from the site's own configuration (the worker's environment or ``DPATE_SITE_CONFIG``; see
:mod:`dpate.settings` and docs/reference/pipeline.md), never from a parameter or the spec in a deployed run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from dpate.settings import Identifier, SiteRun, load_study_spec
from dpate.tasks.site import (
    check_publication,
    commit_balance,
    commit_release,
    compute_balance,
    compute_release,
    load_site_data,
    publish_site_report,
    recorded_balance,
    recorded_release,
    reserve_balance,
    reserve_budget,
    resolve_site_context,
    show_site_report,
    show_site_spend,
)


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    round = p.get("round")
    if not round:
        try:  # the spec's round label
            round = load_study_spec(str(p["spec"])).release
        except Exception:  # an unreadable spec fails in the flow itself, with its message
            round = "default"
    return f"release-{p.get('site')}-round-{round}"


@flow(name="site-release", flow_run_name=_run_name, persist_result=False, validate_parameters=True)
def site_release(spec: str, site: Identifier, round: Identifier | None = None) -> dict[str, Any]:
    """Validate -> reserve (ledger) -> one secure draw -> commit (ledger) -> publish the report;
    with the spec's ``[balance]``, the covariate-balance table is a second release of its own
    (reserve -> one draw -> commit) before the report that carries it is published.

    A committed release is re-published from the ledger (no budget, no noise); a reserved but
    uncommitted one draws once under its standing reservation (docs/how-to/ledger.md). A report already
    published for this release without a COMMIT in this site's ledger is refused before reserving.
    """
    ctx = resolve_site_context(SiteRun(spec=spec, site=site, round=round))
    committed = recorded_release(ctx)
    data = None
    if committed is None:
        check_publication(ctx)
        data = load_site_data(ctx)
        reservation = reserve_budget(ctx)
        committed = reservation.committed or commit_release(
            ctx, compute_release(ctx, data, reservation)
        )
    balance = None
    if ctx.spec.balance is not None:  # the covariate-balance table: a release of its own
        balance = recorded_balance(ctx)
        if balance is None:
            data = data if data is not None else load_site_data(ctx)
            held = reserve_balance(ctx)
            balance = held.committed or commit_balance(
                ctx, compute_balance(ctx, data, held, committed)
            )
    del data
    published = publish_site_report(ctx, committed, balance)
    show_site_report(ctx, published)
    show_site_spend(ctx)
    return published
