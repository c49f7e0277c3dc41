"""The server's task logic through ``.fn``: collect_reports, combine_reports, result_key, the
typed result (dpate.schemas.reports.StudyResult), its markdown and the HTML report (dpate/html_report.py)."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import fsspec
import numpy as np
import pytest

from dpate.html_report import render_html, source_label
from dpate.schemas.reports import MAX_REPORT_BYTES, LifetimeSpend, StudyResult
from dpate.schemas.spec import canonical_json
from dpate.settings import resolve_site, resolve_study
from dpate.site.reports import site_report_bytes
from dpate.storage import Store
from dpate.tasks.aggregate import (
    StudyIncompleteError,
    collect_reports,
    combine_reports,
    result_key,
)
from dpate_core.aggregation import aggregator_of
from dpate_core.privacy import PrivacyParams

from .helpers import committed_release, publish_site, resigned


def _by_site(entries):
    return {e["site_id"]: e for e in entries}


def test_collect_reports_validates_each_and_says_why(study):
    publish_site(str(study.spec), "north")
    ctx = resolve_study(str(study.spec))
    store = Store(ctx.storage_url)
    # south: a report that does not parse; east: nothing published
    south_key = Store.site_report_key(ctx.study_id, "south", ctx.release_id("south"))
    store.publish(south_key, b'{"schema": "dpate.site-report"}')
    got = _by_site(collect_reports.fn(ctx))
    assert [e["site_id"] for e in collect_reports.fn(ctx)] == ctx.site_ids
    assert got["north"]["status"] == "valid" and "estimate" in got["north"]
    assert got["north"]["ledger_head"]["seq"] == 3 and got["north"]["signed"] is True
    assert got["south"]["status"] == "rejected" and got["south"]["reason"]
    assert got["east"]["status"] == "missing"
    assert "no report published" in got["east"]["reason"]


def test_collect_reports_refuses_an_oversized_report_before_parsing(study):
    ctx = resolve_study(str(study.spec))
    key = Store.site_report_key(ctx.study_id, "north", ctx.release_id("north"))
    Store(ctx.storage_url).publish(key, b" " * (MAX_REPORT_BYTES + 1))
    got = _by_site(collect_reports.fn(ctx))
    assert got["north"]["status"] == "rejected"
    assert f"more than the {MAX_REPORT_BYTES}" in got["north"]["reason"]


def test_combine_reports_uses_the_registry_wording_and_weights(study):
    for i, site in enumerate(("north", "south", "east")):
        publish_site(str(study.spec), site, seed=i)
    ctx = resolve_study(str(study.spec))
    inputs = collect_reports.fn(ctx)
    result = combine_reports.fn(ctx, inputs)
    agg = aggregator_of(ctx.spec.aggregator)
    assert result["aggregator"] == "mvagg" and result["complete"] is True
    assert [s["site_id"] for s in result["sites"]] == ctx.site_ids
    used = [s for s in result["sites"] if s["status"] == "used"]
    assert used and sum(s["weight"] for s in used) == pytest.approx(1.0)
    for s in result["sites"]:
        want = {"used": agg.why_used, "not_used": agg.why_not_used}.get(s["status"])
        if want is not None:
            assert s["reason"] == want
        lo, hi = s["ci95"]
        assert lo <= hi
    assert result["variance"] > 0 and len(result["ci95"]) == 2
    assert "target_width" not in result  # the spec sets none: the document as before
    assert "cautions" not in result  # SmoothDPMatching's design has none: as before
    assert "notes" not in result  # nor any note on reading its intervals
    # a spec's target width goes into the result, and a wider interval says it misses it
    lo, hi = StudyResult.of(result).interval_ends() or (0.0, 0.0)
    for target, misses in ((hi - lo) / 2, True), (2 * (hi - lo), False):
        spec = ctx.spec.model_copy(update={"target_width": target})
        aimed = StudyResult.of(combine_reports.fn(dataclasses.replace(ctx, spec=spec), inputs))
        assert aimed.target_width == target and aimed.misses_target is misses
        # (an uninformative interval says only that; the wording: tests/schemas/test_result.py)
        said = "Wider than the study's target" in aimed.summary_text()
        assert said is (misses and not aimed.uninformative)
    # the bytes are a function of the inputs: a re-run publishes identical bytes
    again = combine_reports.fn(ctx, collect_reports.fn(ctx))
    assert result_key(ctx, result) == result_key(ctx, again)
    key, data = result_key(ctx, result)
    assert key == Store.result_key(ctx.study_id, ctx.round)
    assert json.loads(data) == result


def test_combine_reports_partial_or_refused(study, monkeypatch):
    publish_site(str(study.spec), "north")
    ctx = resolve_study(str(study.spec))
    inputs = collect_reports.fn(ctx)
    result = combine_reports.fn(ctx, inputs)  # require_all_sites = false in this spec
    assert result["complete"] is False
    status = {s["site_id"]: s["status"] for s in result["sites"]}
    assert status == {"north": "used", "south": "missing", "east": "missing"}
    key, _ = result_key(ctx, result)
    assert ".partial-" in key  # a later run with more sites publishes a new object
    strict = ctx.spec.model_copy(update={"require_all_sites": True})
    monkeypatch.setattr("dpate.tasks.aggregate._artifact_incomplete", lambda ctx, lines: None)
    with pytest.raises(StudyIncompleteError, match="requires every site"):
        combine_reports.fn(type(ctx)(strict, ctx.spec_source, ctx.round, ctx.storage_url), inputs)
    none = [dict(e, status="missing", reason="x") for e in inputs]
    with pytest.raises(StudyIncompleteError, match="no site has a valid report"):
        combine_reports.fn(ctx, none)


def test_hostile_reports_are_refused_one_by_one_and_the_study_completes(study, monkeypatch):
    """A report whose arm sizes overflow a float, one whose budget is 1e-999999999 and one that
    breaks the checker itself are each rejected with a reason; the others are combined."""
    for i, site in enumerate(("north", "south", "east")):
        publish_site(str(study.spec), site, seed=i)
    ctx = resolve_study(str(study.spec))
    store = Store(ctx.storage_url)

    def rewrite(site: str, edit) -> None:
        key = Store.site_report_key(ctx.study_id, site, ctx.release_id(site))
        doc = json.loads(store.read(key))
        fs, root = fsspec.core.url_to_fs(ctx.storage_url)  # a hostile writer replaces it
        fs.pipe(f"{root.rstrip('/')}/{key}", edit(doc, study.key_path(site)))

    def huge_arms(doc, key):  # refused by the bounded parse, before the signature is read
        n = doc["estimate"]["n"]
        doc["estimate"].update(n_treated=10**400, n_control=n - 10**400)
        return json.dumps(doc).encode()

    def tiny_budget(doc, key):  # signed with the site's own key: refused by the bounds
        doc["estimate"]["epsilon"] = "1e-999999999"
        return resigned(doc, key)

    rewrite("north", huge_arms)
    rewrite("south", tiny_budget)
    got = _by_site(collect_reports.fn(ctx))
    assert got["north"]["status"] == "rejected" and "integer" in got["north"]["reason"]
    assert got["south"]["status"] == "rejected" and "exponent" in got["south"]["reason"]
    assert got["east"]["status"] == "valid"
    result = combine_reports.fn(ctx, list(got.values()))
    assert {s["site_id"]: s["status"] for s in result["sites"]}["east"] == "used"

    def boom(*args, **kwargs):
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr("dpate.tasks.aggregate.read_report", boom)
    got = _by_site(collect_reports.fn(ctx))
    assert {e["status"] for e in got.values()} == {"rejected"}
    assert "could not be checked (OverflowError)" in got["east"]["reason"]


@pytest.fixture
def result(study):
    for i, site in enumerate(("north", "south")):
        publish_site(str(study.spec), site, seed=i)
    ctx = resolve_study(str(study.spec))
    return combine_reports.fn(ctx, collect_reports.fn(ctx))


def test_the_typed_result_keeps_the_published_document(result):
    typed = StudyResult.of(result)
    assert typed.to_document() == result
    assert canonical_json(typed.to_document()) == canonical_json(result)  # the published bytes


def test_result_markdown_has_a_row_per_site(result):
    md = StudyResult.of(result).markdown()
    assert md.startswith(f"# Study {result['study_id']}, round {result['round']}")
    assert "partial: not every site reported" in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(result["sites"])  # header + one per site
    assert any("| east | missing |" in r for r in rows)
    assert f"{result['estimate']:.6g}" in md


def test_render_html_is_self_contained_and_public(result):
    typed = StudyResult.of(result)
    page = render_html(typed, "/home/someone/private/path/test-study/results/1.json", {})
    assert page.startswith("<!doctype html>") or page.lstrip().lower().startswith("<!doctype")
    assert "data:image/png;base64," in page
    for s in result["sites"]:
        assert s["site_id"] in page
    assert "not published; ledger not reachable from here" in page
    assert "/home/someone" not in page  # a local path is shown as its key only
    assert source_label(typed, "/x/test-study/results/1.json") == "test-study/results/1.json"
    assert source_label(typed, "s3://u:p@host:9000/b/r.json") == "s3://host:9000/b/r.json"


def _spend(ctx, site: str, spent: str) -> LifetimeSpend:
    cost = ctx.spec.release_cost(site)
    return LifetimeSpend.of(
        PrivacyParams(Fraction(spent), cost.delta), ctx.spec.site(site).lifetime_cap.params
    )


def _as_version_1(data: bytes) -> bytes:
    """The report as the previous software wrote it: schema_version 1, no lifetime_spend."""
    doc = json.loads(data)
    assert "lifetime_spend" not in doc
    return canonical_json({**doc, "schema_version": 1})


def test_the_result_lists_each_sites_lifetime_spend_and_cap(study):
    ctx = resolve_study(str(study.spec))
    north, south = _spend(ctx, "north", "2"), _spend(ctx, "south", "5/2")
    publish_site(str(study.spec), "north", seed=0, spend=north)
    publish_site(str(study.spec), "south", seed=1, spend=south)
    # east: a version-1 report without the fields, still aggregated
    site = resolve_site(str(study.spec), "east")
    data = resigned(
        json.loads(_as_version_1(site_report_bytes(site, committed_release(site, 2)))),
        study.key_path("east"),
    )
    Store(site.storage_url).publish(Store.site_report_key(ctx.study_id, "east", site.rid), data)

    inputs = _by_site(collect_reports.fn(ctx))
    assert inputs["east"]["status"] == "valid" and "lifetime_spend" not in inputs["east"]
    result = combine_reports.fn(ctx, list(inputs.values()))
    sites = _by_site(result["sites"])
    assert sites["north"]["lifetime_spend"] == north.model_dump(mode="json")
    assert sites["south"]["lifetime_spend"] == {
        "spent": {"epsilon": "5/2", "delta": str(ctx.spec.release_cost("south").delta)},
        "cap": ctx.spec.site("south").lifetime_cap.params.as_strings(),
    }
    assert "lifetime_spend" not in sites["east"]
    typed = StudyResult.of(result)
    assert typed.to_document() == result
    # the views show spent of cap per site
    cap = ctx.spec.site("north").lifetime_cap.params
    north_text = f"2 of {cap.epsilon} (delta {north.spent.delta} of {cap.delta})"
    md = typed.markdown()
    assert "lifetime spent of cap" in md
    north_row = next(r for r in md.splitlines() if r.startswith("| north |"))
    assert north_text in north_row
    page = render_html(typed, "s3://b/r.json", {})
    assert north_text in page and "5/2 of" in page
    assert "not published; ledger not reachable from here" in page  # east, version 1


def test_a_report_whose_spend_passes_its_cap_is_rejected(study):
    ctx = resolve_study(str(study.spec))
    cap = ctx.spec.site("north").lifetime_cap.params
    site = resolve_site(str(study.spec), "north")
    good = site_report_bytes(site, committed_release(site), _spend(ctx, "north", "2"))
    doc = json.loads(good)
    doc["lifetime_spend"]["spent"]["epsilon"] = str(cap.epsilon + 1)
    store = Store(ctx.storage_url)
    signed = resigned(doc, study.key_path("north"))  # by the site's own key
    store.publish(Store.site_report_key(ctx.study_id, "north", site.rid), signed)
    got = _by_site(collect_reports.fn(ctx))["north"]
    assert got["status"] == "rejected"
    assert "exceeds the cap" in got["reason"]


# ---------------------------------------------------------------------------------------------
# unresolved sites and "no answer at this budget"


@pytest.fixture
def adjusted_study(study):
    """The study with the adjusted estimator (fixed effects: a release whose noisy denominator
    does not resolve is published as unresolved)."""
    text = study.spec.read_text()
    study.spec.write_text(
        text.replace('estimator = "smooth_matching"', 'estimator = "adjusted"\n'
                     'adjusted_weighting = "fixed_effects"')
    )  # fmt: skip
    return study


def _publish(spec: str, site: str, *, resolved: bool, seed: int = 0) -> None:
    """Publish ``site``'s report: a simulated release, or (``resolved`` False) the release of
    all-zero noisy counts, which no weighting resolves."""
    from dpate.ledger import Committed
    from dpate.schemas.reports import software_version
    from dpate.tasks.site import load_site_data, plan_release
    from dpate_core.release import noise_free

    if resolved:
        publish_site(spec, site, seed=seed)
        return
    ctx = resolve_site(spec, site)
    plan = plan_release(ctx, load_site_data.fn(ctx))
    estimate = plan.estimate({k: np.zeros_like(v) for k, v in noise_free(plan).items()})
    assert not estimate.resolved
    payload = {"estimate": estimate.public_fields(), "software_version": software_version()}
    committed = Committed(ctx.rid, payload, "2026-01-31T12:00:00.000000+00:00", "0" * 64, 3)
    data = site_report_bytes(ctx, committed)
    Store(ctx.storage_url).publish(Store.site_report_key(ctx.study_id, site, ctx.rid), data)


def test_a_study_whose_sites_are_all_unresolved_has_no_answer_never_zero(adjusted_study):
    spec = str(adjusted_study.spec)
    for site in ("north", "south", "east"):
        _publish(spec, site, resolved=False)
    ctx = resolve_study(spec)
    result = combine_reports.fn(ctx, collect_reports.fn(ctx))
    assert result["status"] == "no_answer" and result["complete"] is True
    assert result["reason"].startswith("no answer at this budget: no site resolved its estimate")
    for key in ("estimate", "variance", "ci95", "interval"):
        assert result[key] is None, key  # null, never 0
    assert result["uninformative"] is True and result["schema_version"] == 3
    for s in result["sites"]:
        assert s["status"] == "excluded" and s["resolved"] is False and s["weight"] == 0.0
        assert s["reason"].startswith("unresolved at this budget: fixed effects:")
        assert (s["tau"], s["variance"], s["ci95"], s["interval"]) == (None, None, None, None)
    key, data = result_key(ctx, result)  # published like any complete result
    assert key == Store.result_key(ctx.study_id, ctx.round) and json.loads(data) == result
    typed = StudyResult.of(result)
    assert not typed.answered and typed.to_document() == result
    assert typed.markdown().splitlines()[2].startswith("**No answer at this budget**: no site")
    page = render_html(typed, "x/test-study/results/1.json", {})
    assert "No answer at this budget" in page and "Sites used: none" in page


def _in_every_view(result: dict, key: str, label: str, page_text: str) -> str:
    """The one entry of the result's ``key`` (the design's cautions or its notes), as the typed
    result holds it and as the Prefect artifact, the CLI and the HTML page print it under
    ``label`` (the page's paragraph starting with ``page_text``)."""
    from dpate.cli.output import site_notes

    (text,) = result[key]
    typed = StudyResult.of(result)
    assert getattr(typed, key) == [text] and typed.to_document() == result
    assert f"**{label}:** {text}" in typed.markdown()
    assert f"{label}: {text}" in site_notes(typed)
    page = render_html(typed, "x/test-study/results/1.json", {})
    assert f"<p><b>{label}:</b> {page_text}" in page
    return str(text)


def _undeclared(ctx):
    """``ctx`` with no site declaring ``n``: nothing for the design's prediction to read."""
    sites = [site.model_copy(update={"n": None}) for site in ctx.spec.sites]
    return dataclasses.replace(ctx, spec=ctx.spec.model_copy(update={"sites": sites}))


def test_the_result_carries_the_designs_cautions(adjusted_study, monkeypatch):
    """Subclassification declared where the smallest site (60 records over 8 strata) can read
    only part of its strata: the result carries the design's caution (predicted from the
    spec's declared n, ``dpate.study_check.design_cautions``) in the document and in every
    view; the larger sites, which read every stratum, get none, nor does a spec without n."""
    import dpate.tasks.aggregate as aggregate_module

    spec = adjusted_study.spec
    text = spec.read_text().replace('"fixed_effects"', '"subclassification"')
    declared = text
    for site, n in (("north", 400), ("south", 300), ("east", 60)):
        line = f'data = "sites/{site}/records.parquet"\n'
        declared = declared.replace(line, f"{line}n = {n}\n")
    spec.write_text(declared)
    for i, site in enumerate(("north", "south", "east")):
        publish_site(str(spec), site, seed=i)
    ctx = resolve_study(str(spec))
    inputs = collect_reports.fn(ctx)
    result = combine_reports.fn(ctx, inputs)
    caution = _in_every_view(result, "cautions", "Caution", "site east: subclassification")
    assert caution.startswith("site east: subclassification is predicted to read the strata of")
    assert caution.endswith("(predicted from the study's spec before any release: the n each "
                            "site declares and `dpate plan`'s default assumptions)")  # fmt: skip
    assert "cautions" not in combine_reports.fn(_undeclared(ctx), inputs)
    # a prediction that fails on a design it was never tried on never stops the result

    def broken(spec):
        raise ZeroDivisionError

    monkeypatch.setattr(aggregate_module, "result_words", broken)
    unwarned = combine_reports.fn(ctx, inputs)
    assert "cautions" not in unwarned and unwarned["estimate"] == result["estimate"]


def test_the_result_carries_the_designs_reading_notes(study):
    """A propensity study whose sites declare n small enough that their release keeps the
    correction's factor (N x epsilon_model below 750): the result carries the note naming them
    (how to read their intervals: ``dpate.study_check.result_words``) in the document and in
    every view, after any caution; a spec without n carries none, and another estimator's
    result has no ``notes`` key."""
    text = study.spec.read_text().replace(
        'estimator = "smooth_matching"', 'estimator = "propensity"'
    )
    for site, n in (("north", 400), ("south", 300), ("east", 60)):
        line = f'data = "sites/{site}/records.parquet"\n'
        text = text.replace(line, f"{line}n = {n}\n")
    study.spec.write_text(text)
    for i, site in enumerate(("north", "south", "east")):
        publish_site(str(study.spec), site, seed=i)
    ctx = resolve_study(str(study.spec))
    inputs = collect_reports.fn(ctx)
    result = combine_reports.fn(ctx, inputs)
    note = _in_every_view(result, "notes", "Note", "the intervals at north, south, east")
    assert note.startswith("the intervals at north, south, east (N x epsilon_model below 750)")
    assert "conservative" in note and note.endswith("`dpate plan`'s default assumptions)")
    assert "notes" not in combine_reports.fn(_undeclared(ctx), inputs)


def test_an_unresolved_site_is_never_combined(adjusted_study):
    spec = str(adjusted_study.spec)
    _publish(spec, "north", resolved=False)  # the largest site: MVAgg and AggLargest's pick
    _publish(spec, "south", resolved=True, seed=1)
    _publish(spec, "east", resolved=True, seed=2)
    ctx = resolve_study(spec)
    inputs = collect_reports.fn(ctx)
    assert all(e["status"] == "valid" for e in inputs)
    for method in ("mvagg", "all", "largest", "inverse_variance", "random_effects"):
        c = type(ctx)(ctx.spec.model_copy(update={"aggregator": method}), ctx.spec_source,
                      ctx.round, ctx.storage_url)  # fmt: skip
        result = combine_reports.fn(c, inputs)
        assert result["status"] == "answered" and result["estimate"] is not None
        north = _by_site(result["sites"])["north"]
        assert north["status"] == "excluded" and north["weight"] == 0.0
        assert north["reason"].startswith("unresolved at this budget")
        assert "north" not in StudyResult.of(result).used
