"""The study flow's first task: every site checked before any site reserves budget.

A thin wrapper of :func:`dpate.study_check.check_study` (public wording: a site's data problem
names columns and rules, its counts and row positions go to the site's operator log). The
``study`` flow runs every site on one machine, whose operator owns every site's data; in a
deployment each site checks its own data before it reserves (docs/reference/pipeline.md).
"""

from __future__ import annotations

from prefect import get_run_logger, task

from dpate.settings import is_deployed_process
from dpate.study_check import StudyCheck, check_study
from dpate.tasks.common import NO_RETRY_TASK

__all__ = ["check_study_sites"]


@task(name="check-study", **NO_RETRY_TASK)
def check_study_sites(spec: str, round: str | None) -> StudyCheck:
    """Every site's ledger, publication path, data and feasibility, and the round's history;
    reserves nothing. Returns the public outcome (the flow refuses a study that cannot run)."""
    checked = check_study(spec, round, public=True, deployed=is_deployed_process())
    ready = sum(s.ok for s in checked.sites)
    log = get_run_logger()
    for note in checked.notes:  # the design's own warnings, public (dpate.study_check)
        log.warning("study %s: %s", checked.study_id, note)
    log.info(
        "study %s round %s: %d of %d site(s) ready before any reservation%s",
        checked.study_id,
        checked.round,
        ready,
        len(checked.sites),
        "; every release is already recorded (nothing will be spent)"
        if checked.spends_nothing
        else "",
    )
    return checked
