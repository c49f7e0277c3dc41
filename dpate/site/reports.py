"""A site release's public parts, apart from its Prefect tasks (:mod:`dpate.tasks.site`): the
site's ledger opened, the lifetime spend published with a release, the report's bytes built from
the ledger's COMMIT row, and the public summary of a published report. No Prefect here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction
from typing import Any

from dpate.ledger import Committed, Event, LedgerError, PrivacyLedger
from dpate.schemas.reports import (
    REPORT_SCHEMA_VERSION,
    LifetimeSpend,
    PublicEstimate,
    SiteReport,
)
from dpate.settings import SiteContext
from dpate.signing import seal_site_report
from dpate.storage import Store
from dpate_core.inference import site_bootstrap_interval
from dpate_core.privacy import PrivacyParams

__all__ = [
    "ledger_spend",
    "open_site_ledger",
    "published_site",
    "site_report_bytes",
    "site_summary",
    "spend_at_reservation",
]


def open_site_ledger(ctx: SiteContext) -> PrivacyLedger:
    """The site's existing ledger (never created here)."""
    return PrivacyLedger(ctx.ledger_url, site=ctx.site_id)


def spend_at_reservation(events: Sequence[Event], release_id: str) -> LifetimeSpend:
    """The site's lifetime totals right after ``release_id`` was reserved: the sum of the site's
    RESERVE rows up to and including that one, and the cap that reservation was checked against
    (recorded on the row). ``events`` are the site's ledger rows in order. Public amounts only."""
    spent = PrivacyParams(Fraction(0))
    cap: PrivacyParams | None = None
    for e in events:
        if e.kind == "CAP":
            cap = e.cap
        elif e.kind == "RESERVE":
            spent = spent + e.privacy
            if e.release_id == release_id:
                cap = e.cap if e.cap_epsilon is not None else cap
                if cap is None:
                    break
                return LifetimeSpend.of(spent, cap)
    raise LedgerError(
        f"the ledger holds no reservation under a cap for release {release_id[:12]}, so its "
        f"lifetime spend cannot be published; check that DPATE_LEDGER_URL is the site's ledger "
        f"(dpate ledger verify)"
    )


def ledger_spend(ctx: SiteContext, committed: Committed) -> LifetimeSpend:
    """The site ledger's lifetime spend and cap right after this release was reserved
    (:func:`spend_at_reservation`): fixed by the append-only rows up to the reservation, so a
    re-publication gives the same amounts whatever the site released since."""
    with open_site_ledger(ctx) as ledger:
        events = ledger.events(ctx.site_id)
    return spend_at_reservation(events, committed.release_id)


def site_report_bytes(
    ctx: SiteContext,
    committed: Committed,
    spend: LifetimeSpend | None = None,
    *,
    schema_version: int = REPORT_SCHEMA_VERSION,
    balance: Committed | None = None,
) -> bytes:
    """The published report of a committed release: a function of the ledger's COMMIT row,
    the spec and ``spend`` (the ledger's totals after the release, :func:`ledger_spend`; left
    out of the report when None), so every re-publication gives identical bytes.
    ``schema_version=1`` or ``2`` gives the bytes an earlier software published (version 1:
    no ``spend``). ``balance``: the committed balance table of this round (its own release in
    the ledger; the report is then version 4)."""
    payload = committed.payload
    report = SiteReport.from_estimate(
        PublicEstimate.model_validate(payload["estimate"]),
        spec=ctx.spec,
        site_id=ctx.site_id,
        release_id=ctx.rid,
        created_at=datetime.fromisoformat(committed.committed_at),
        software=payload["software_version"],
        lifetime_spend=spend,
        schema_version=schema_version,
        balance=None if balance is None else balance.payload["balance"],
    )
    # ledger head of the COMMIT row + Ed25519 signature (DPATE_SITE_KEY): docs/how-to/deploying.md, Trust
    sealed: SiteReport = seal_site_report(report, ctx.spec, ctx.site_id, committed, ctx.key_path)
    return sealed.to_json_bytes()


def site_summary(
    ctx: SiteContext, uri: str, status: str, estimate: dict[str, Any]
) -> dict[str, Any]:
    """The public summary of a site's published report (what the flows return and show); an
    unresolved release has ``tau``, ``variance`` and ``interval`` None and says why."""
    resolved = estimate.get("resolved", True)
    return {
        "site_id": ctx.site_id,
        "release_id": ctx.rid,
        "report": uri,
        "status": status,
        "estimator": estimate["estimator"],
        "resolved": resolved,
        "unresolved_reason": estimate.get("unresolved_reason"),
        "tau": estimate["tau"],
        "variance": estimate["variance"],
        "n": estimate["n"],
        "epsilon": estimate["epsilon"],
        "delta": estimate["delta"],
        # post-processing of the public fields: the bootstrap interval, clipped to [-B, B]
        "interval": site_bootstrap_interval(estimate).as_dict() if resolved else None,
    }


def published_site(ctx: SiteContext) -> dict[str, Any]:
    """The summary of the site's published report of this release, read back from storage."""
    store = Store(ctx.storage_url)
    key = Store.site_report_key(ctx.study_id, ctx.site_id, ctx.rid)
    data = store.read(key)
    if data is None:
        raise FileNotFoundError(f"site {ctx.site_id}: no report at {store.uri(key)}")
    return site_summary(ctx, store.uri(key), "published", json.loads(data)["estimate"])
