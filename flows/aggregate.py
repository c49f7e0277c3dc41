"""The ``aggregate_study`` flow: the untrusted server combines the published site reports.

Deployment entrypoint: ``dpate.flows.aggregate:aggregate_study``. It reads only published reports
from storage (``DPATE_STORAGE_URL`` or the spec's ``reports``), never a site's data or ledger.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from dpate.tasks.aggregate import (
    collect_reports,
    combine_reports,
    publish_result,
    resolve_study_context,
    show_study_result,
)


@flow(name="aggregate-study", flow_run_name="aggregate-round-{round}", persist_result=False)
def aggregate_study(
    spec: str, round: str | None = None, storage_url: str | None = None
) -> dict[str, Any]:
    """Read and validate every site report of the round, combine them with the spec's
    aggregator and publish the result (estimate, variance, 95% CI, each site's status and why)."""
    ctx = resolve_study_context(spec, round, storage_url)
    inputs = collect_reports(ctx)
    result = combine_reports(ctx, inputs)
    uri = publish_result(ctx, result)
    show_study_result(ctx, result, uri)
    return {**result, "uri": uri}
