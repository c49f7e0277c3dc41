"""The tasks of one site's release: thin wrappers of schemas, dpate_core, the ledger and storage.

Order (the crash rule, docs/ledger.md): check the ledger for a committed release -> load and
validate the data -> reserve the budget (durable, before any noise) -> compute the release (plan,
one secure draw) -> commit it to the ledger -> publish the report built from the *committed*
value. Raw records and the un-committed noisy output live only in this process's memory (no
cache, no persisted result, never logged); everything logged to Prefect is public.

Operator-only counts (rows dropped, values clipped) are not private releases: they go to the local
``dpate.site`` logger at the site, never to Prefect, a report or an artifact.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from dpate_core import release as core_release
from dpate_core.estimators import matching_statistics
from dpate_core.intervals import normal_interval
from dpate_core.release import MechanismPlan, SiteEstimate
from schemas.report import (
    REPORT_SCHEMA,
    REPORT_SCHEMA_VERSION,
    PublicEstimate,
    ReportError,
    SiteReport,
    software_version,
)
from schemas.site_data import SiteData, prepare_site_data
from tasks.common import IO_TASK, PRIVATE_TASK, PUBLIC_TASK, artifact_key
from tasks.ledger import Committed, PrivacyLedger, Reservation
from tasks.settings import SiteContext, resolve_site
from tasks.storage import Store

__all__ = [
    "commit_release",
    "compute_release",
    "load_site_data",
    "plan_release",
    "publish_site_report",
    "published_site",
    "recorded_release",
    "reserve_budget",
    "resolve_site_context",
    "show_site_report",
    "site_report_bytes",
]

operator_log = logging.getLogger("dpate.site")


@task(name="resolve-site", **IO_TASK)
def resolve_site_context(
    spec: str,
    site: str,
    round: str | None,
    data_path: str | None,
    ledger_url: str | None,
    storage_url: str | None,
) -> SiteContext:
    """Read the study spec and settle where this site's data, ledger and reports are."""
    return resolve_site(spec, site, round, data_path, ledger_url, storage_url)


@task(name="recorded-release", **IO_TASK)
def recorded_release(ctx: SiteContext) -> Committed | None:
    """The release's committed output if the ledger has one (then nothing is computed)."""
    with PrivacyLedger(ctx.ledger_url) as ledger:
        committed = ledger.committed(ctx.rid)
    if committed is not None:
        get_run_logger().info(
            "site %s: release %s was committed at %s; re-publishing the recorded value "
            "(no budget spent, no noise drawn)",
            ctx.site_id,
            ctx.rid[:12],
            committed.committed_at,
        )
    return committed


@task(name="load-site-data", **PRIVATE_TASK)
def load_site_data(ctx: SiteContext) -> SiteData:
    """Read, validate and discretise the site's records (schemas). Raw: never leaves memory."""
    data = prepare_site_data(ctx.data_location, ctx.spec, fmt=ctx.spec.site(ctx.site_id).format)
    r = data.report
    operator_log.info(
        "site %s (operator only, not private): %d rows read, %d used, %d dropped as missing, "
        "%d clipped low, %d clipped high, mapped to 'other': %s",
        ctx.site_id,
        r.n_read,
        r.n_used,
        r.dropped_missing,
        r.clipped_low,
        r.clipped_high,
        r.mapped_to_other,
    )
    get_run_logger().info(
        "site %s: data validated against spec %s", ctx.site_id, ctx.spec.spec_hash[:12]
    )
    return data


@task(name="reserve-budget", **IO_TASK)
def reserve_budget(ctx: SiteContext) -> Reservation:
    """Debit the release's budget in the site's ledger, durably, before any noise is drawn."""
    site = ctx.spec.site(ctx.site_id)
    with PrivacyLedger(ctx.ledger_url) as ledger:
        res = ledger.reserve(
            release_id=ctx.rid,
            study_id=ctx.study_id,
            site_id=ctx.site_id,
            spec_hash=ctx.spec.spec_hash,
            round=ctx.round,
            privacy=site.privacy,
            cap=site.lifetime_cap.params,
        )
    what = "reserved" if res.new else "already reserved (nothing more spent)"
    get_run_logger().info(
        "site %s: release %s %s: epsilon %s, delta %s",
        ctx.site_id,
        ctx.rid[:12],
        what,
        res.privacy.epsilon,
        res.privacy.delta,
    )
    return res


def plan_release(ctx: SiteContext, data: SiteData) -> MechanismPlan:
    """The spec's mechanism on the site's data (pre-noise values: private)."""
    spec, site = ctx.spec, ctx.spec.site(ctx.site_id)
    split = spec.budget_split(ctx.site_id).shares
    bound = spec.outcome.bound
    if spec.estimator == "dim":
        return core_release.plan_difference_in_means(
            data.w,
            data.y,
            bound=bound,
            epsilon=site.epsilon,
            delta=site.delta,
            split=split,
            arm_sizes_public=spec.arm_sizes_public,
        )
    stats = matching_statistics(data.w, data.y, data.x, data.domain_size, bound=bound)
    return core_release.plan_matching(
        spec.estimator,
        stats,
        bound=bound,
        epsilon=site.epsilon,
        delta=site.delta,
        domain_size=data.domain_size,
        split=split,
    )


@task(name="compute-release", **PRIVATE_TASK)
def compute_release(ctx: SiteContext, data: SiteData, reservation: Reservation) -> SiteEstimate:
    """One secure draw (OpenDP) of the spec's mechanism. Not retried; the output is not logged
    or returned anywhere but to :func:`commit_release`."""
    plan = plan_release(ctx, data)
    if plan.total != reservation.privacy or reservation.release_id != ctx.rid:
        raise RuntimeError(
            f"site {ctx.site_id}: the mechanism's budget does not match the reservation of "
            f"release {ctx.rid[:12]}; nothing was drawn"
        )
    return plan.estimate(core_release.draw_once(plan))


@task(name="commit-release", **IO_TASK)
def commit_release(ctx: SiteContext, estimate: SiteEstimate) -> Committed:
    """Record the release's output in the ledger; returns the recorded value (the first commit's
    if another run committed first): only that value is ever published."""
    payload = {"estimate": estimate.public_fields(), "software_version": software_version()}
    with PrivacyLedger(ctx.ledger_url) as ledger:
        committed = ledger.commit(ctx.rid, payload)
    get_run_logger().info("site %s: release %s committed", ctx.site_id, ctx.rid[:12])
    return committed


def site_report_bytes(ctx: SiteContext, committed: Committed) -> bytes:
    """The published report of a committed release: a function of the ledger's COMMIT row
    and the spec only, so every re-publication gives identical bytes."""
    payload = committed.payload
    report = SiteReport.model_validate(
        {
            "schema": REPORT_SCHEMA,
            "schema_version": REPORT_SCHEMA_VERSION,
            "study_id": ctx.study_id,
            "site_id": ctx.site_id,
            "spec_hash": ctx.spec.spec_hash,
            "software_version": payload["software_version"],
            "release_id": ctx.rid,
            "created_at": datetime.fromisoformat(committed.committed_at),
            "estimate": PublicEstimate.model_validate(payload["estimate"]),
        }
    )
    problems = report.problems_against(ctx.spec)
    if problems:
        raise ReportError(problems, f"for site {ctx.site_id!r}")
    return report.to_json_bytes()


@task(name="publish-site-report", **IO_TASK)
def publish_site_report(ctx: SiteContext, committed: Committed) -> dict[str, Any]:
    """Write the report once to ``<root>/<study>/sites/<site>/<release_id>.json``."""
    data = site_report_bytes(ctx, committed)
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    status = store.publish(key, data)
    get_run_logger().info(
        "site %s: report %s %s",
        ctx.site_id,
        store.uri(key),
        "published" if status == "written" else "was already published (identical bytes)",
    )
    return _summary(ctx, store.uri(key), status, committed.payload["estimate"])


def _summary(ctx: SiteContext, uri: str, status: str, estimate: dict[str, Any]) -> dict[str, Any]:
    return {
        "site_id": ctx.site_id,
        "release_id": ctx.rid,
        "report": uri,
        "status": status,
        "estimator": estimate["estimator"],
        "tau": estimate["tau"],
        "variance": estimate["variance"],
        "n": estimate["n"],
        "epsilon": estimate["epsilon"],
        "delta": estimate["delta"],
    }


def published_site(ctx: SiteContext) -> dict[str, Any]:
    """The summary of the site's published report of this release, read back from storage."""
    import json

    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    data = store.read(key)
    if data is None:
        raise FileNotFoundError(f"site {ctx.site_id}: no report at {store.uri(key)}")
    return _summary(ctx, store.uri(key), "published", json.loads(data)["estimate"])


@task(name="show-site-report", **PUBLIC_TASK)
def show_site_report(ctx: SiteContext, published: dict[str, Any]) -> None:
    """A Prefect table artifact of the site's public report."""
    lo, hi = normal_interval(published["tau"], published["variance"])
    rows = [
        {"field": "study", "value": ctx.study_id},
        {"field": "site", "value": ctx.site_id},
        {"field": "round", "value": ctx.round},
        {"field": "release id", "value": ctx.rid},
        {"field": "estimator", "value": published["estimator"]},
        {"field": "tau (DP ATE)", "value": f"{published['tau']:.6g}"},
        {"field": "variance (DP)", "value": f"{published['variance']:.6g}"},
        {
            "field": "95% CI",
            "value": f"{lo:.6g} to {hi:.6g}",
        },
        {"field": "N", "value": str(published["n"])},
        {"field": "epsilon, delta", "value": f"{published['epsilon']}, {published['delta']}"},
        {"field": "report", "value": published["report"]},
    ]
    create_table_artifact(
        rows,
        key=artifact_key("site-report", ctx.study_id, ctx.site_id),
        description=f"Public report of site {ctx.site_id}, study {ctx.study_id}, round {ctx.round}",
    )
