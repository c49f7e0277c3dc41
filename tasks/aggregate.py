"""The aggregator's tasks (the untrusted server): read, validate, combine, publish.

The server sees only published site reports and takes nothing at face value. Each is read with a
size limit (:data:`dpate.schemas.reports.MAX_REPORT_BYTES`, checked before it is parsed) and validated
against the study spec (:func:`dpate.schemas.reports.read_report`: schema, ids, budget, the numbers the
mechanism can produce, and the site's signature when the spec lists its key); a missing or
rejected report is listed with its reason, never aggregated. Each used site's entry records the
ledger head its report carries (``ledger_head``) and whether the report was signed, so the
published result also anchors the sites' ledgers, and the site's lifetime spend and cap after
this release (``lifetime_spend``, public amounts) when its report carries them (version 2).

The result document (schema ``dpate.study-result``) holds the estimate, its variance and 95%
CI, and for every site of the spec whether it was used, left out by the aggregator, missing or
rejected, and why. A site whose release is not resolved is never combined ("unresolved at this
budget"); when no site with a valid report can be combined, the study still completes and its
result says so: ``status`` "no_answer" with the ``reason``, and no estimate, variance or
interval (null, never 0). Its bytes are a function of the inputs only, so a re-run publishes
identical bytes.

Result objects: ``<root>/<study>/results/<round>.json`` when every site of the spec reported a
valid release; otherwise ``<root>/<study>/results/<round>.partial-<digest>.json`` (the digest
names the set of inputs), so a later run with more sites publishes a new object instead of
replacing one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from dpate.errors import DpateError, ExitCode
from dpate.schemas.reports import (
    MAX_REPORT_BYTES,
    MAX_RESULT_BYTES,
    NO_ANSWER,
    RESULT_SCHEMA,
    BoundedJSONError,
    ReportError,
    StudyResult,
    loads_bounded,
    read_report,
    software_version,
)
from dpate.schemas.spec import canonical_json
from dpate.settings import StudyContext, resolve_study
from dpate.storage import ObjectTooLargeError, Store
from dpate.study_check import respend_text, result_words
from dpate.tasks.common import IO_TASK, NO_RETRY_TASK, artifact_key
from dpate_core.aggregation import (
    UNRESOLVED,
    AggregateResult,
    NoUsableSiteError,
    aggregator_of,
)
from dpate_core.inference import (
    Interval,
    combined_bootstrap_interval,
    combined_normal_interval,
    combined_result,
    site_bootstrap_interval,
    site_normal_interval,
)

__all__ = [
    "RESULT_SCHEMA_VERSION",
    "StudyIncompleteError",
    "collect_reports",
    "combine_reports",
    "publish_result",
    "resolve_study_context",
    "result_key",
    "show_study_result",
]


#: the version of the result document this software writes (3: ``status``, ``reason``, null
#: numbers for "no answer", unresolved sites, the uninformative ``rules``)
RESULT_SCHEMA_VERSION = 3


class StudyIncompleteError(DpateError, RuntimeError):
    """The spec requires every site, and at least one has no valid report. ``sites``: the
    public per-site outcomes, when the study flow knows them (the CLI names each failed site's
    cause)."""

    exit_code = ExitCode.REPORT
    cause = "study incomplete"

    def __init__(self, message: str, sites: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.sites = sites or []


@task(name="resolve-study", **IO_TASK)
def resolve_study_context(spec: str, round: str | None, storage_url: str | None) -> StudyContext:
    return resolve_study(spec, round, storage_url)


@task(name="collect-reports", **IO_TASK)
def collect_reports(ctx: StudyContext) -> list[dict[str, Any]]:
    """Read every site's report of this round and validate it against the spec."""
    store = Store(ctx.storage_url)
    out = []
    for site in ctx.site_ids:
        rid = ctx.release_id(site)
        key = Store.site_report_key(ctx.study_id, site, rid)
        entry: dict[str, Any] = {"site_id": site, "release_id": rid, "report": store.uri(key)}
        try:
            data = store.read(key, max_bytes=MAX_REPORT_BYTES)
        except ObjectTooLargeError as exc:
            entry.update(
                status="rejected",
                reason=f"the report is {exc.size} bytes, more than the {exc.limit} a report may be",
            )
            out.append(entry)
            continue
        if data is None:
            entry.update(status="missing", reason=f"no report published for release {rid[:12]}")
        else:
            try:
                report = read_report(data, ctx.spec, site_id=site, source=store.uri(key))
                if report.release_id != rid:
                    raise ReportError([f"release id {report.release_id!r} is not {rid!r}"])
                entry.update(status="valid", estimate=report.estimate.model_dump(mode="json"))
                entry["signed"] = report.signature is not None
                if report.ledger_head is not None:
                    entry["ledger_head"] = report.ledger_head.model_dump(mode="json")
                if report.lifetime_spend is not None:
                    entry["lifetime_spend"] = report.lifetime_spend.model_dump(mode="json")
                if report.balance is not None:  # the site's DP covariate-balance table
                    entry["balance"] = report.balance.to_dict()
            except ReportError as exc:
                entry.update(status="rejected", reason="; ".join(exc.reasons))
            except Exception as exc:  # a report is refused alone; it never fails the study
                entry.update(
                    status="rejected",
                    reason=f"the report could not be checked ({type(exc).__name__}); it is not "
                    f"aggregated",
                )
        out.append(entry)
    log = get_run_logger()
    for e in out:
        log.info(
            "study %s: site %s report %s%s",
            ctx.study_id,
            e["site_id"],
            e["status"],
            f" ({e['reason']})" if "reason" in e else "",
        )
    return out


def _interval_ends(interval: Interval) -> list[float]:
    return [interval.lo, interval.hi]


@task(name="combine-reports", **NO_RETRY_TASK)
def combine_reports(ctx: StudyContext, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the valid reports with the spec's aggregator into the result document; with no
    site it can combine (none resolved, say), the result is "no answer at this budget"."""
    valid = [e for e in inputs if e["status"] == "valid"]
    absent = [e for e in inputs if e["status"] != "valid"]
    _require_enough_sites(ctx, inputs, valid, absent)
    method = ctx.spec.aggregator
    est = [e["estimate"] for e in valid]
    head = {
        "schema": RESULT_SCHEMA,
        "schema_version": RESULT_SCHEMA_VERSION,
        "study_id": ctx.study_id,
        "spec_hash": ctx.spec.spec_hash,
        "round": ctx.round,
        "aggregator": method,
        # one estimand for the whole study (the spec's choice), in words a clinician reads
        "estimator": ctx.spec.estimator,
        "estimand": ctx.spec.estimand,
        "complete": not absent,
    }
    if ctx.spec.target_width is not None:  # the precision the study was planned for
        head["target_width"] = ctx.spec.target_width
    # from the spec: the design's doubts about validity, and how to read the intervals
    cautions, notes = _design_words(ctx)
    if cautions:
        head["cautions"] = cautions
    if notes:
        head["notes"] = notes
    try:
        # the published fields as the intervals below read them, with the part of each site's
        # error it shares with the others (dpate_core.inference.combined_result)
        res = combined_result(est, method)
    except NoUsableSiteError:
        return {
            **head,
            "status": "no_answer",
            "reason": _no_answer_reason(valid),
            "estimate": None,
            "variance": None,
            "ci95": None,
            "interval": None,
            "uninformative": True,
            "extra": {},
            "sites": _site_entries(ctx, valid, absent, None),
            "software_version": software_version(),
        }
    sites = _site_entries(ctx, valid, absent, res)
    # intervals from the published fields only (post-processing, dpate_core.inference): the
    # normal one and the parametric bootstrap (MVAgg's selection re-done per draw), both clipped
    # to [-B, B] and flagged "uninformative at this budget" by the rules of clip_interval
    normal = combined_normal_interval(est, method)
    boot = combined_bootstrap_interval(est, method)
    return {
        **head,
        "status": "answered",
        "reason": None,
        "estimate": boot.estimate,
        "variance": res.variance,
        "ci95": _interval_ends(normal),
        "interval": boot.as_dict(),
        "uninformative": boot.uninformative,
        "extra": dict(res.extra),
        "sites": sites,
        "software_version": software_version(),
    }


def _design_words(ctx: StudyContext) -> tuple[list[str], list[str]]:
    """The design's cautions and its notes on reading the intervals
    (:func:`dpate.study_check.result_words`, public values only). They come from ``dpate
    plan``'s prediction; should it fail on a design it was never tried on, the result is still
    published, without them, and the log says so (the error's type only: the spec is public, no
    record is involved)."""
    try:
        return result_words(ctx.spec)
    except Exception as exc:  # a caution or a note never stops a study's result
        get_run_logger().warning(
            "study %s: the design's cautions and notes could not be predicted (%s); the result "
            "carries none (run `dpate plan` on the spec to see why)",
            ctx.study_id,
            type(exc).__name__,
        )
        return [], []


def _no_answer_reason(valid: list[dict[str, Any]]) -> str:
    """Why no site could be combined, in words: every valid report was unresolved, or the
    combiner could use none of them."""
    unresolved = [e["site_id"] for e in valid if not e["estimate"].get("resolved", True)]
    if len(unresolved) == len(valid):
        return (
            f"{NO_ANSWER}: no site resolved its estimate ({', '.join(unresolved)}: "
            f"{UNRESOLVED}); the sites spent their budget, but none could estimate the effect "
            f"with it"
        )
    return (
        f"{NO_ANSWER}: none of the {len(valid)} sites with a valid report could be combined "
        f"(see each site's reason)"
    )


def _require_enough_sites(
    ctx: StudyContext,
    inputs: list[dict[str, Any]],
    valid: list[dict[str, Any]],
    absent: list[dict[str, Any]],
) -> None:
    """Refuse to combine when the spec requires every site and one has no valid report (with
    an artifact listing them), or when no site has a valid report."""
    if absent and ctx.spec.require_all_sites:
        lines = [f"{e['site_id']}: {e['status']} ({e['reason']})" for e in absent]
        _artifact_incomplete(ctx, lines)
        raise StudyIncompleteError(
            f"study {ctx.study_id} round {ctx.round} requires every site, but "
            f"{len(absent)} of {len(inputs)} have no valid report: {'; '.join(lines)}. Re-run "
            f"the missing sites (a site that already released spends nothing), or set "
            f"require_all_sites = false in the spec to aggregate the others (this changes the "
            f"spec's hash: {respend_text(ctx.spec)})"
        )
    if not valid:
        raise StudyIncompleteError(
            f"study {ctx.study_id} round {ctx.round}: no site has a valid report; nothing to "
            f"aggregate"
        )


def _site_entries(
    ctx: StudyContext,
    valid: list[dict[str, Any]],
    absent: list[dict[str, Any]],
    res: AggregateResult | None,
) -> list[dict[str, Any]]:
    """The result's ``sites``: every valid report with its published fields, intervals and
    whether the aggregator used it (``res``, its weight and why; None when it could combine
    none), then every missing or rejected report with its reason, all in the spec's site order.
    An unresolved release has no estimate, variance or interval (null) and is excluded as
    "unresolved at this budget", with its own reason."""
    method = ctx.spec.aggregator
    weight = {} if res is None else dict(zip(res.used, res.weights, strict=True))
    excluded = {} if res is None else res.excluded
    sites = []
    for j, e in enumerate(valid):
        s = e["estimate"]
        resolved = s.get("resolved", True)
        entry = {
            "site_id": e["site_id"],
            "release_id": e["release_id"],
            "tau": s["tau"],
            "variance": s["variance"],
            "ci95": _interval_ends(site_normal_interval(s)) if resolved else None,
            "interval": site_bootstrap_interval(s).as_dict() if resolved else None,
            "n": s["n"],
            "epsilon": s["epsilon"],
            "delta": s["delta"],
            "signed": e.get("signed", False),
        }
        if not resolved:
            entry["resolved"] = False
        for copied in ("ledger_head", "lifetime_spend", "balance"):
            if copied in e:
                entry[copied] = e[copied]
        if not resolved:
            entry.update(
                status="excluded", weight=0.0, reason=f"{UNRESOLVED}: {s['unresolved_reason']}"
            )
        elif j in weight:
            entry.update(status="used", weight=weight[j], reason=aggregator_of(method).why_used)
        elif j in excluded or res is None:
            why = excluded.get(j, "no site could be combined")
            entry.update(status="excluded", weight=0.0, reason=why)
        else:
            entry.update(status="not_used", weight=0.0, reason=aggregator_of(method).why_not_used)
        sites.append(entry)
    for e in absent:
        sites.append(
            {
                "site_id": e["site_id"],
                "release_id": e["release_id"],
                "status": e["status"],
                "reason": e["reason"],
            }
        )
    order = {s: i for i, s in enumerate(ctx.site_ids)}
    sites.sort(key=lambda s: order[s["site_id"]])
    return sites


def result_key(ctx: StudyContext, result: dict[str, Any]) -> tuple[str, bytes]:
    """Where the result goes and its canonical bytes."""
    data = canonical_json(result)
    key = Store.result_key(ctx.study_id, ctx.round)
    if not result["complete"]:
        digest = hashlib.sha256(data).hexdigest()[:16]
        key = key.removesuffix(".json") + f".partial-{digest}.json"
    return key, data


@task(name="publish-result", **IO_TASK)
def publish_result(ctx: StudyContext, result: dict[str, Any]) -> str:
    """Write the result document once; returns its URL."""
    key, data = result_key(ctx, result)
    store = Store(ctx.storage_url)
    status = store.publish(key, data)
    typed = StudyResult.of(result)
    get_run_logger().info(
        "study %s round %s: result %s %s (%s)",
        ctx.study_id,
        ctx.round,
        store.uri(key),
        "published" if status == "written" else "was already published (identical bytes)",
        typed.summary_text(6),
    )
    return store.uri(key)


@task(name="show-study-result", **NO_RETRY_TASK)
def show_study_result(ctx: StudyContext, result: dict[str, Any], uri: str) -> None:
    create_markdown_artifact(
        StudyResult.of(result).markdown() + f"\n\nPublished: `{uri}`",
        key=artifact_key("study-result", ctx.study_id, "round", ctx.round),
        description=f"Result of study {ctx.study_id}, round {ctx.round}",
    )


def _artifact_incomplete(ctx: StudyContext, lines: list[str]) -> None:
    create_markdown_artifact(
        f"# Study {ctx.study_id}, round {ctx.round}: not aggregated\n\nThe spec requires every "
        f"site; these have no valid report:\n\n" + "\n".join(f"- {x}" for x in lines),
        key=artifact_key("study-result", ctx.study_id, "round", ctx.round),
        description=f"Study {ctx.study_id} round {ctx.round} is incomplete",
    )


def published_result(ctx: StudyContext) -> tuple[str, dict[str, Any]] | None:
    """The round's published result: the complete one, else the partial with the most sites
    reporting (None if nothing was published)."""
    store = Store(ctx.storage_url)
    key = Store.result_key(ctx.study_id, ctx.round)
    data = store.read(key, max_bytes=MAX_RESULT_BYTES)
    if data is not None:
        return store.uri(key), loads_bounded(data, what="result document")
    prefix = key.removesuffix(".json") + ".partial-"
    best: tuple[int, str, dict[str, Any]] | None = None
    for k in store.children(f"{ctx.study_id}/results"):
        if k.startswith(prefix) and k.endswith(".json"):
            try:
                raw = store.read(k, max_bytes=MAX_RESULT_BYTES)
                doc = None if raw is None else loads_bounded(raw, what="result document")
            except (ObjectTooLargeError, BoundedJSONError):
                continue  # not a result this software wrote
            if not isinstance(doc, dict) or not isinstance(doc.get("sites"), list):
                continue
            score = sum(isinstance(s, dict) and "tau" in s for s in doc["sites"])
            if best is None or score > best[0]:
                best = (score, k, doc)
    return None if best is None else (store.uri(best[1]), best[2])
