"""``SiteReport.from_estimate`` builds exactly the report a site publishes (``site_report_bytes``
from the ledger's COMMIT row), before the ledger head and the signature are added."""

from __future__ import annotations

from datetime import datetime

from dpate.schemas.reports import PublicEstimate, SiteReport, read_report
from dpate.settings import resolve_site
from dpate.site.reports import site_report_bytes

from .helpers import committed_release


def test_from_estimate_is_the_published_report(study):
    ctx = resolve_site(str(study.spec), "south")
    committed = committed_release(ctx, seed=2)
    published = read_report(site_report_bytes(ctx, committed), ctx.spec, site_id="south")
    built = SiteReport.from_estimate(
        PublicEstimate.model_validate(committed.payload["estimate"]),
        spec=ctx.spec,
        site_id=ctx.site_id,
        release_id=ctx.rid,
        created_at=datetime.fromisoformat(committed.committed_at),
        software=committed.payload["software_version"],
    )
    assert published.ledger_head is not None and published.signature is not None
    assert built == published.model_copy(update={"ledger_head": None, "signature": None})
    assert built.to_estimate() == published.to_estimate()
