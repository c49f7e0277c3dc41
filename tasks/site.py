"""The tasks of one site's release: thin wrappers of schemas, dpate_core, the ledger and storage.

Order (the crash rule, docs/how-to/ledger.md): check the ledger for a committed release -> load and
validate the data -> reserve the budget (durable, before any noise) -> compute the release (plan,
one secure draw) -> commit it to the ledger -> publish the report built from the *committed*
value. Raw records and the un-committed noisy output live only in this process's memory (no
cache, no persisted result, never logged); everything logged to Prefect is public.

The plain parts live beside the tasks, without Prefect: the mechanism plan in
:mod:`dpate.site.plans`, the report's bytes, the lifetime spend and the published summary in
:mod:`dpate.site.reports`.

**Where the work is done.** The site's data is validated and reduced where it lives (DuckDB for
files, the site's database, Spark): :func:`~dpate.schemas.site_data.read_site_records` returns the
statistics the estimator needs (:class:`~dpate.schemas.site_data.SiteStatistics`: per-cell counts
and exact grid sums, and Algorithm 1's statistics from the records read one stratum at a time),
never the records, and the feasibility rules run on the per-cell counts. Memory: ``O(|X|)`` plus,
for the matching estimators, the largest stratum, whatever ``N``. The published bytes are those
of the records path for the same records, noise and record order (docs/reference/study-spec.md, "Data
sources").

Operator-only counts (rows dropped, values clipped) and the full text of a failed data check (its
counts and row positions) are not private releases: they go to the site-local operator log file
(:mod:`dpate.site.operator_log`), which never propagates to Prefect's handlers. Prefect gets a
redacted error naming columns and rules only.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from dpate.ledger import Committed, LedgerError, Reservation, require_not_behind
from dpate.schemas.reports import (
    interval_text,
    software_version,
)
from dpate.schemas.site_data import SiteData, SiteDataError, SiteStatistics
from dpate.schemas.spec import StudySpec
from dpate.settings import SiteContext, SiteRun, is_deployed_process, resolve_site
from dpate.signing import site_signing_key
from dpate.site import plans
from dpate.site.feasibility import FeasibilityError, feasibility_problems, release_refusals
from dpate.site.operator_log import (
    SiteDataRejected,
    operator_logger,
    redacted_data_error,
    unreadable_data_error,
)
from dpate.site.plans import plan_from_records
from dpate.site.reports import (
    ledger_spend,
    open_site_ledger,
    site_report_bytes,
    site_summary,
)
from dpate.storage import PublicationConflictError, Store
from dpate.tasks.common import IO_TASK, NO_RETRY_TASK, artifact_key
from dpate_core import release as core_release
from dpate_core.aggregation import UNRESOLVED
from dpate_core.release import DrawnRelease, MechanismPlan, SiteEstimate

__all__ = [
    "check_publication",
    "commit_balance",
    "commit_release",
    "compute_balance",
    "compute_release",
    "load_site_data",
    "plan_release",
    "publish_site_report",
    "recorded_balance",
    "recorded_release",
    "reserve_balance",
    "reserve_budget",
    "resolve_site_context",
    "show_site_report",
    "show_site_spend",
]


def _deployed_run() -> bool:
    if is_deployed_process():
        return True
    from prefect.runtime import flow_run

    try:
        return flow_run.deployment_id is not None
    except Exception:
        return False


@task(name="resolve-site", **IO_TASK)
def resolve_site_context(run: SiteRun) -> SiteContext:
    """Read the study spec and settle, from the site's own configuration only, where this
    site's data, ledger, reports and operator log are."""
    ctx = resolve_site(run.spec, run.site, run.round, deployed=_deployed_run())
    operator_logger(ctx)
    return ctx


@task(name="recorded-release", **IO_TASK)
def recorded_release(ctx: SiteContext) -> Committed | None:
    """The release's committed output if the ledger has one (then nothing is computed).
    Refuses a missing ledger, or one without the site's lifetime cap."""
    with open_site_ledger(ctx) as ledger:
        if ledger.cap(ctx.site_id) is None:
            raise LedgerError(
                f"site {ctx.site_id}: the ledger has no lifetime cap for this site; pin the "
                f"approved cap first: dpate ledger init {ctx.site_id} --epsilon E --delta D "
                f"--ledger URL"
            )
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


@task(name="check-publication", **IO_TASK)
def check_publication(ctx: SiteContext) -> None:
    """Before reserving: refuse when this release's report already exists in storage although
    the ledger has no COMMIT for it (another ledger released it: nothing is spent here).
    Also refuses, reports being signed by default, a site the spec gives no public_key (unless
    the study opts out) and a missing or wrong signing key (DPATE_SITE_KEY)."""
    site_signing_key(ctx.spec, ctx.site_id, ctx.key_path)
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    if store.exists(key):
        with open_site_ledger(ctx) as ledger:
            if ledger.committed(ctx.rid) is not None:
                return  # a racing run of this site committed and published it meanwhile
        raise PublicationConflictError(
            f"site {ctx.site_id}: a report for release {ctx.rid} is already published at "
            f"{store.uri(key)}, but this site's ledger has no COMMIT for it (a different ledger "
            f"released it). Nothing was reserved or drawn; check DPATE_LEDGER_URL points at the "
            f"site's one ledger"
        )


@task(name="load-site-data", **NO_RETRY_TASK)
def load_site_data(ctx: SiteContext) -> SiteStatistics | SiteData:
    """Validate the site's records and reduce them to the statistics the release needs, in the
    engine where they live (:func:`dpate.schemas.site_data.read_site_records`): only counts and
    sums come back. Private: never leaves this process's memory.

    A failed check's full text (counts, row positions) goes to the operator log only; Prefect
    gets :class:`SiteDataRejected` (columns and rules), raised outside the ``except`` so no
    exception chain carries the original. The feasibility rules run here, before anything is
    reserved, on the records or on the statistics (the same rules, the same words)."""
    oplog = operator_logger(ctx)
    failure: SiteDataRejected | None = None
    try:  # the pre-spend check's read of this release, made in this process (dpate run)
        held = plans.take_checked(ctx)
        data = held if held is not None else plans.read_for_release(ctx)
    except SiteDataError as exc:
        oplog.error("site %s, study %s, round %s: %s", ctx.site_id, ctx.study_id, ctx.round, exc)
        failure = redacted_data_error(ctx, exc)
        del exc
    except Exception as exc:  # a reader's message may quote a value: keep it at the site
        failure = unreadable_data_error(ctx, exc)
        del exc
    if failure is not None:
        raise failure
    problems = feasibility_problems(data, ctx.spec)
    refusals = release_refusals(problems, ctx.spec)
    if refusals:  # before anything is reserved; public wording (rules on public values only)
        oplog.error("site %s: release not feasible: %s", ctx.site_id, "; ".join(refusals))
        raise FeasibilityError(ctx.site_id, refusals)
    if problems:  # a refusal would tell the coordinator this about the records: release anyway
        oplog.warning(
            "site %s (operator only): the release goes ahead but will be uninformative: %s",
            ctx.site_id,
            "; ".join(problems),
        )
    r = data.report
    oplog.info(
        "site %s (operator only, not private): %d rows read, %d used, %d dropped as missing, "
        "%d clipped low, %d clipped high, mapped to 'other': %s, covariates clipped to their "
        "bounds: %s",
        ctx.site_id,
        r.n_read,
        r.n_used,
        r.dropped_missing,
        r.clipped_low,
        r.clipped_high,
        r.mapped_to_other,
        r.clipped_covariates,
    )
    get_run_logger().info(
        "site %s: data validated against spec %s", ctx.site_id, ctx.spec.spec_hash[:12]
    )
    return data


@task(name="reserve-budget", **IO_TASK)
def reserve_budget(ctx: SiteContext) -> Reservation:
    """Debit the release's budget in the site's ledger, durably, before any noise is drawn;
    first the ledger's head is checked against the newest head the site has published
    (:func:`dpate.ledger.require_not_behind`: a restored older copy is refused)."""
    site = ctx.spec.site(ctx.site_id)
    with open_site_ledger(ctx) as ledger:
        # a ledger restored from an older copy is refused before it can spend again
        require_not_behind(ledger, Store(ctx.storage_url), ctx.site_id)
        res = ledger.reserve(
            release_id=ctx.rid,
            study_id=ctx.study_id,
            site_id=ctx.site_id,
            spec_hash=ctx.spec.spec_hash,
            round=ctx.round,
            privacy=ctx.spec.release_cost(ctx.site_id),  # a pure mechanism spends no delta
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


def plan_release(ctx: SiteContext, data: SiteData | SiteStatistics) -> MechanismPlan:
    """The spec's mechanism on the site's data (pre-noise values: private)."""
    return plan_from_records(ctx.spec, ctx.site_id, data)


@task(name="compute-release", **NO_RETRY_TASK)
def compute_release(
    ctx: SiteContext, data: SiteData | SiteStatistics, reservation: Reservation
) -> DrawnRelease:
    """One secure draw (OpenDP) of the spec's mechanism. Not retried; the output is not logged
    or returned anywhere but to :func:`commit_release`."""
    plan = plan_release(ctx, data)
    if plan.total != reservation.privacy or reservation.release_id != ctx.rid:
        raise RuntimeError(
            f"site {ctx.site_id}: the mechanism's budget does not match the reservation of "
            f"release {ctx.rid[:12]}; nothing was drawn"
        )
    return plan.drawn(core_release.draw_once(plan))


@task(name="commit-release", **IO_TASK)
def commit_release(ctx: SiteContext, estimate: SiteEstimate | DrawnRelease) -> Committed:
    """Record the release's output in the ledger; returns the recorded value (the first commit's
    if another run committed first): only that value is ever published. With a ``[balance]``
    table, the noisy values the release keeps (:class:`DrawnRelease`: DP outputs, e.g. the
    propensity model) are recorded with it, for the table's bands to be the estimate's."""
    drawn = estimate if isinstance(estimate, DrawnRelease) else DrawnRelease(estimate)
    payload: dict[str, Any] = {
        "estimate": drawn.estimate.public_fields(),
        "software_version": software_version(),
    }
    if ctx.spec.balance is not None and drawn.kept:
        payload["released"] = {k: list(v) for k, v in drawn.kept.items()}
    with open_site_ledger(ctx) as ledger:
        committed = ledger.commit(ctx.rid, payload)
    get_run_logger().info("site %s: release %s committed", ctx.site_id, ctx.rid[:12])
    return committed


@task(name="recorded-balance", **IO_TASK)
def recorded_balance(ctx: SiteContext) -> Committed | None:
    """The round's committed covariate-balance table, if the ledger has one (then nothing is
    computed or drawn: invariant 3)."""
    with open_site_ledger(ctx) as ledger:
        return ledger.committed(ctx.balance_rid)


@task(name="reserve-balance", **IO_TASK)
def reserve_balance(ctx: SiteContext) -> Reservation:
    """Debit the balance table's own budget (the spec's ``[balance]`` epsilon, a release of its
    own) in the site's ledger, durably, before any of its noise is drawn."""
    site = ctx.spec.site(ctx.site_id)
    with open_site_ledger(ctx) as ledger:
        res = ledger.reserve(
            release_id=ctx.balance_rid,
            study_id=ctx.study_id,
            site_id=ctx.site_id,
            spec_hash=ctx.spec.spec_hash,
            round=ctx.round,
            privacy=ctx.spec.balance_cost(),
            cap=site.lifetime_cap.params,
        )
    get_run_logger().info(
        "site %s: balance table %s %s: epsilon %s",
        ctx.site_id,
        ctx.balance_rid[:12],
        "reserved" if res.new else "already reserved (nothing more spent)",
        res.privacy.epsilon,
    )
    return res


@task(name="compute-balance", **NO_RETRY_TASK)
def compute_balance(
    ctx: SiteContext,
    data: SiteData | SiteStatistics,
    reservation: Reservation,
    committed: Committed | None = None,
) -> dict[str, Any]:
    """One secure draw of the balance table's counts and its post-processing (the table is
    returned only to :func:`commit_balance`). ``committed``: the round's committed estimate
    (its ledger record), whose bands an estimator with ``balance_bands`` compares arms within."""
    plan = plans.balance_plan(ctx.spec, data, None if committed is None else committed.payload)
    if plan.epsilon != reservation.privacy.epsilon or reservation.release_id != ctx.balance_rid:
        raise RuntimeError(
            f"site {ctx.site_id}: the balance table's budget does not match the reservation of "
            f"release {ctx.balance_rid[:12]}; nothing was drawn"
        )
    return plan.draw().as_dict()


@task(name="commit-balance", **IO_TASK)
def commit_balance(ctx: SiteContext, table: dict[str, Any]) -> Committed:
    """Record the balance table in the ledger; only the recorded table is ever published."""
    with open_site_ledger(ctx) as ledger:
        committed = ledger.commit(
            ctx.balance_rid, {"balance": table, "software_version": software_version()}
        )
    get_run_logger().info("site %s: balance table %s committed", ctx.site_id, ctx.balance_rid[:12])
    return committed


@task(name="publish-site-report", **IO_TASK)
def publish_site_report(
    ctx: SiteContext, committed: Committed, balance: Committed | None = None
) -> dict[str, Any]:
    """Write the report once to ``<root>/<study>/sites/<site>/<release_id>.json``, with the
    ledger's lifetime spend and cap after this release, and the round's committed balance
    table when the study has one."""
    data = site_report_bytes(ctx, committed, ledger_spend(ctx, committed), balance=balance)
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    try:
        status = store.publish(key, data)
    except PublicationConflictError:
        # this release, published by an earlier software (version 1: no lifetime spend;
        # version 2: no unresolved release): keep it
        if not _published_by_an_earlier_version(ctx, committed, store.read(key)):
            raise
        status = "unchanged"
    get_run_logger().info(
        "site %s: report %s %s",
        ctx.site_id,
        store.uri(key),
        "published" if status == "written" else "was already published (identical bytes)",
    )
    summary = site_summary(ctx, store.uri(key), status, committed.payload["estimate"])
    if balance is not None:
        summary["balance"] = balance.payload["balance"]
    return summary


def _published_by_an_earlier_version(
    ctx: SiteContext, committed: Committed, existing: bytes | None
) -> bool:
    """Whether ``existing`` is this release's report as an earlier software wrote it: version 1
    (no lifetime spend) or 2 (never an unresolved release, which only version 3 can hold)."""
    if existing is None or not committed.payload["estimate"].get("resolved", True):
        return False
    if existing == site_report_bytes(ctx, committed, schema_version=1):
        return True
    spend = ledger_spend(ctx, committed)
    return existing == site_report_bytes(ctx, committed, spend, schema_version=2)


@task(name="show-site-report", **NO_RETRY_TASK)
def show_site_report(ctx: SiteContext, published: dict[str, Any]) -> None:
    """A Prefect table artifact of the site's public report (an unresolved release: no
    estimate, and why)."""
    if published.get("resolved", True):
        numbers = [
            {"field": "tau (DP ATE)", "value": f"{published['tau']:.6g}"},
            {"field": "variance (DP)", "value": f"{published['variance']:.6g}"},
            {"field": "95% CI (bootstrap)", "value": interval_text(published, 6)},
        ]
    else:
        numbers = [
            {"field": "tau (DP ATE)", "value": f"none: {UNRESOLVED}"},
            {"field": "why", "value": str(published["unresolved_reason"])},
        ]
    rows = [
        {"field": "study", "value": ctx.study_id},
        {"field": "site", "value": ctx.site_id},
        {"field": "round", "value": ctx.round},
        {"field": "release id", "value": ctx.rid},
        {"field": "estimator", "value": published["estimator"]},
        *numbers,
        {"field": "N", "value": str(published["n"])},
        *_balance_rows(published.get("balance"), int(published["n"]), ctx.spec),
        {"field": "epsilon, delta", "value": f"{published['epsilon']}, {published['delta']}"},
        {"field": "report", "value": published["report"]},
    ]
    create_table_artifact(
        rows,
        key=artifact_key("site-report", ctx.study_id, ctx.site_id, "round", ctx.round),
        description=f"Public report of site {ctx.site_id}, study {ctx.study_id}, round {ctx.round}",
    )


@task(name="show-site-spend", **NO_RETRY_TASK)
def show_site_spend(ctx: SiteContext) -> None:
    """A Prefect table artifact of the site's lifetime spend and remaining cap (public amounts:
    the sum of the privacy parameters of the site's releases; no data, no ledger location)."""
    with open_site_ledger(ctx) as ledger:
        s = ledger.spend(ctx.site_id)
    rows = [
        {"field": "site", "value": ctx.site_id},
        {"field": "lifetime cap", "value": _pair(s.cap)},
        {"field": "spent (all studies)", "value": _pair(s.spent)},
        {"field": "remaining", "value": _pair(s.remaining)},
        {"field": f"spent by study {ctx.study_id}", "value": _pair(s.per_study.get(ctx.study_id))},
    ]
    create_table_artifact(
        rows,
        key=artifact_key("site-spend", ctx.site_id),
        description=f"Privacy budget of site {ctx.site_id} after study {ctx.study_id} round "
        f"{ctx.round}",
    )


def _balance_rows(
    table: dict[str, Any] | None, n: int, spec: StudySpec | None = None
) -> list[dict[str, str]]:
    """The artifact's line for the site's DP covariate-balance table (public: a DP release),
    with the least noise sd its rows' SMDs carry at the site's ``n``
    (:func:`~dpate.schemas.reports.table_noise_floors`; a numeric covariate's row given its
    public level values, the ``spec``'s :attr:`~dpate.schemas.spec.StudySpec.balance_values`)."""
    from dpate.schemas.reports import table_noise_floors

    if not table:
        return []
    values = None if spec is None else spec.balance_values
    smds = [abs(r["smd_before"]) for r in table["rows"] if r["smd_before"] is not None]
    worst = f"; largest |SMD| before: {max(smds):.3g}" if smds else ""
    inside = [abs(r["smd_within"]) for r in table["rows"] if r["smd_within"] is not None]
    if table.get("within") == "released" and inside:
        worst += f", within the {table.get('bands')} propensity bands: {max(inside):.3g}"
    floors = [f for f in table_noise_floors(table, n, values) if f is not None]
    if floors:
        worst += f"; an SMD carries noise of sd at least {min(floors):.2g}"
    return [
        {
            "field": "covariate balance (DP)",
            "value": f"{len(table['rows'])} row(s), epsilon {table['epsilon']}{worst}",
        }
    ]


def _pair(p: Any) -> str:
    return "none" if p is None else f"epsilon {p.epsilon}, delta {p.delta}"
