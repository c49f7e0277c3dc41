"""A site's release without a ledger or a flow: plan, one simulated draw, a committed payload,
the published report (what ``dpate.flows.site_release`` does, minus the budget)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpate.ledger import Committed
from dpate.schemas.reports import LifetimeSpend, software_version
from dpate.settings import SiteContext, resolve_site
from dpate.signing import load_private_key, sign_bytes
from dpate.site.reports import site_report_bytes
from dpate.storage import Store
from dpate.tasks.site import load_site_data, plan_release
from dpate_core.release import draw_once

COMMITTED_AT = "2026-01-31T12:00:00.000000+00:00"


def committed_release(ctx: SiteContext, seed: int = 0, seq: int = 3) -> Committed:
    """The ledger's COMMIT row of one simulated release (numpy noise: a test, not a release)."""
    plan = plan_release(ctx, load_site_data.fn(ctx))
    estimate = plan.estimate(draw_once(plan, np.random.default_rng(seed)))
    payload = {"estimate": estimate.public_fields(), "software_version": software_version()}
    return Committed(ctx.rid, payload, COMMITTED_AT, f"{seq:064x}", seq)


def resigned(doc: dict, key_path: str | Path) -> bytes:
    """``doc`` (a report edited after publication) signed again with the site's own key: what a
    site gone wrong, not a forger, can publish; the checks after the signature must refuse it."""
    from dpate.schemas.spec import canonical_json

    doc = {k: v for k, v in doc.items() if k != "signature"}
    signature = sign_bytes(load_private_key(key_path), canonical_json(doc))
    return canonical_json({**doc, "signature": signature})


def publish_site(spec: str, site: str, seed: int = 0, spend: LifetimeSpend | None = None) -> bytes:
    """Publish ``site``'s report where the aggregator reads it (with the ledger totals
    ``spend`` when given); returns its bytes."""
    ctx = resolve_site(spec, site)
    data = site_report_bytes(ctx, committed_release(ctx, seed), spend)
    Store(ctx.storage_url).publish(Store.site_report_key(ctx.study_id, site, ctx.rid), data)
    return data


def with_estimator_options(study, estimator: str, options: str) -> str:
    """The conftest study's spec with ``estimator`` in place of SmoothDPMatching and
    ``options`` (TOML lines) as its ``[estimator_options]``; the spec's path."""
    text = study.spec.read_text().replace(
        'estimator = "smooth_matching"', f'estimator = "{estimator}"'
    )
    head, sites = text.split("[[sites]]", 1)
    study.spec.write_text(head + f"\n[estimator_options]\n{options}\n\n[[sites]]" + sites)
    return str(study.spec)


def release_every_site_and_combine(
    study, spec: str, sites: tuple[str, ...], noise_sites: list[str], parts: int
):
    """Each site releases once through the site tasks (reserve, plan from its engine's
    statistics, one simulated draw, commit, publish): its noise sites are ``noise_sites`` in
    order, its ledger record carries a split of ``parts``, a re-run returns that record (nothing
    drawn) and its whole epsilon is spent once; then the server combines the reports (the
    typed :class:`~dpate.schemas.reports.StudyResult`)."""
    from dpate.ledger import PrivacyLedger
    from dpate.schemas.reports import StudyResult
    from dpate.settings import resolve_study
    from dpate.tasks.aggregate import collect_reports, combine_reports
    from dpate.tasks.site import commit_release, publish_site_report, reserve_budget

    for s in sites:
        study.init_ledgers(s)
        ctx = resolve_site(spec, s)
        reserve_budget.fn(ctx)
        plan = plan_release(ctx, load_site_data.fn(ctx))
        names = [x.name for x in plan.noise] + [x.name for st in plan.stages for x in st.sites]
        assert names == noise_sites
        committed = commit_release.fn(ctx, plan.drawn(draw_once(plan, np.random.default_rng(0))))
        assert len(committed.payload["estimate"]["budget_split"]) == parts
        assert reserve_budget.fn(ctx).committed.payload == committed.payload  # the record
        with PrivacyLedger(ctx.ledger_url) as ledger:
            assert ledger.spend(s).spent.epsilon == ctx.spec.site(s).epsilon
        publish_site_report.fn(ctx, committed)
    sctx = resolve_study(spec)
    return StudyResult.of(combine_reports.fn(sctx, collect_reports.fn(sctx)))
