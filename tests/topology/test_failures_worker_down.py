"""A site worker down during a deployed study, against the real server, workers and object
store: the study aggregates the others, and a re-run after the worker is back spends nothing
again at the sites that released (in its own file so that the two xdist workers share the slow
failure tests; the others are in test_failures.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.topology.star import SITE_EPSILON
from tests.topology.study_events import events, site_runs

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_site_worker_down_study_aggregates_the_others_and_rerun_spends_nothing_again(star):
    down, round = "urban", "worker-down"
    star.stop_site_worker(down)
    try:
        run = star.run_study(round, site_timeout_s=60)
        assert run.state.is_completed(), run.state
        partial = star.result(round)
        assert partial is not None and not partial["complete"]
        rows = {s["site_id"]: s for s in partial["sites"]}
        assert rows[down]["status"] == "missing"
        released = [s for s in star.sites if events(star, s, round, "COMMIT")]
        assert down not in released and released, "no site released while one worker was down"
        for s in released:
            assert rows[s]["status"] in ("used", "excluded", "not_used")
        # the down site's run never started: cancelled, so a returning worker does not run it
        (down_run,) = site_runs(star, round)[down]
        assert down_run.state.is_cancelled()
        assert not events(star, down, round, "RESERVE")
        spent_before = {s: star.spend(s).spent for s in star.sites}
        reports_before = {s: star.site_reports(s) for s in released}
    finally:
        star.start_site_worker(down)

    run = star.run_study(round, site_timeout_s=300)
    assert run.state.is_completed(), run.state
    result = star.result(round)
    assert result["complete"], result
    for s in released:  # already released: nothing spent again, the same bytes published
        assert star.spend(s).spent == spent_before[s]
        assert star.site_reports(s) == reports_before[s]
        assert len(events(star, s, round, "RESERVE")) == 1
    assert star.spend(down).spent.epsilon == spent_before[down].epsilon + Fraction(
        SITE_EPSILON[down]
    )
    assert len(events(star, down, round, "COMMIT")) == 1
