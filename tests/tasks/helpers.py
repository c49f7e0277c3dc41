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
