"""An adjusted study with the fixed-effects queries (``weighted_sum = true``): every site
releases both stages from its engine's statistics (the cells' histogram and squares, then the
two queries, their coefficients from the committed histogram), the ledger's record carries the
four-part split and is returned on a re-run (nothing drawn, nothing spent), and the server
combines the reports into one fixed-effects answer."""

from __future__ import annotations

import numpy as np

from dpate.ledger import PrivacyLedger
from dpate.schemas.reports import StudyResult
from dpate.settings import resolve_site, resolve_study
from dpate.tasks.aggregate import collect_reports, combine_reports
from dpate.tasks.site import (
    commit_release,
    load_site_data,
    plan_release,
    publish_site_report,
    reserve_budget,
)
from dpate_core.release import draw_once


def test_an_adjusted_study_with_the_queries_releases_once_and_the_server_combines_it(study):
    text = study.spec.read_text().replace('estimator = "smooth_matching"', 'estimator = "adjusted"')
    head, sites = text.split("[[sites]]", 1)
    study.spec.write_text(head + "\n[estimator_options]\nweighted_sum = true\n\n[[sites]]" + sites)
    spec = str(study.spec)
    for s in ("north", "south", "east"):
        study.init_ledgers(s)
        ctx = resolve_site(spec, s)
        assert ctx.spec.variant == "fixed_effects"
        reserve_budget.fn(ctx)
        plan = plan_release(ctx, load_site_data.fn(ctx))
        first = [x.name for x in plan.noise]
        assert first + [x.name for st in plan.stages for x in st.sites] == [
            "histogram",
            "squares",
            "fe_numerator",
            "fe_denominator",
        ]
        committed = commit_release.fn(ctx, plan.drawn(draw_once(plan, np.random.default_rng(3))))
        assert len(committed.payload["estimate"]["budget_split"]) == 4
        assert reserve_budget.fn(ctx).committed.payload == committed.payload  # the record
        with PrivacyLedger(ctx.ledger_url) as ledger:
            assert ledger.spend(s).spent.epsilon == ctx.spec.site(s).epsilon
        publish_site_report.fn(ctx, committed)
    sctx = resolve_study(spec)
    typed = StudyResult.of(combine_reports.fn(sctx, collect_reports.fn(sctx)))
    assert typed.status == "answered" and typed.estimate is not None
    statuses = {s.status for s in typed.sites}  # MVAgg may leave a resolved site out
    assert "used" in statuses and statuses <= {"used", "excluded"}
