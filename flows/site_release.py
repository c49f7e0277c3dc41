"""The ``site_release`` flow: one site's private release, run at the site.

Deployment entrypoint: ``flows/site_release.py:site_release``. Parameters are public settings and
paths, never data; site-local settings default to the worker's environment (``DPATE_DATA_PATH``,
``DPATE_LEDGER_URL``, ``DPATE_STORAGE_URL``; see :mod:`tasks.settings`).
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from tasks.site import (
    commit_release,
    compute_release,
    load_site_data,
    publish_site_report,
    recorded_release,
    reserve_budget,
    resolve_site_context,
    show_site_report,
)


@flow(name="site-release", flow_run_name="release-{site}", persist_result=False)
def site_release(
    spec: str,
    site: str,
    round: str | None = None,
    data_path: str | None = None,
    ledger_url: str | None = None,
    storage_url: str | None = None,
) -> dict[str, Any]:
    """Validate -> reserve (ledger) -> one secure draw -> commit (ledger) -> publish the report.

    A committed release is re-published from the ledger (no budget, no noise); a reserved but
    uncommitted one draws once under its standing reservation (docs/ledger.md).
    """
    ctx = resolve_site_context(spec, site, round, data_path, ledger_url, storage_url)
    committed = recorded_release(ctx)
    if committed is None:
        data = load_site_data(ctx)
        reservation = reserve_budget(ctx)
        committed = reservation.committed or commit_release(
            ctx, compute_release(ctx, data, reservation)
        )
        del data
    published = publish_site_report(ctx, committed)
    show_site_report(ctx, published)
    return published
