"""Feasibility of a site's release, checked before any budget is reserved.

:func:`feasibility_problems` looks at a site's validated records (:class:`SiteData`) and says
whether the spec's estimator can release anything useful from them. It is pure (no I/O, no
noise, no ledger) and its messages are **public wording**: they name the rule that fails and what
to do, never a count or any other number computed from the records, so they may appear in a
Prefect state or a log like any other public error.

The rules (the estimators' own preconditions, ``dpate_core.release``):

- a release needs at least 2 records (after the spec's missing-value policy);
- both arms must be non-empty, for every estimator (difference in means and matching alike);
- the matching estimators (Algorithm 2 and the global-sensitivity baseline) need at least one
  covariate stratum holding both treated and control records: otherwise no record has a match and
  the release would be pure noise, which the aggregator (MVAgg) would still weight by ``N_j / N``.

Used by the site's release task (before reserving) and by ``dpate check``.
"""

from __future__ import annotations

import numpy as np

from schemas.site_preparation import SiteData
from schemas.spec import StudySpec

__all__ = ["FeasibilityError", "feasibility_problems"]

_LEAVE_OUT = "or leave this site out of the study (require_all_sites = false)"


class FeasibilityError(ValueError):
    """The site's records cannot support the spec's release (public wording, no counts)."""

    def __init__(self, site_id: str, problems: list[str]):
        self.site_id = site_id
        self.problems = list(problems)
        lines = [f"site {site_id}: the release is not feasible on this site's records:"]
        lines += [f"  - {p}" for p in self.problems]
        lines.append("nothing was reserved or spent")
        super().__init__("\n".join(lines))

    # picklable with its arguments (Prefect may serialise exceptions)
    def __reduce__(self) -> tuple[type[FeasibilityError], tuple[str, list[str]]]:
        return (FeasibilityError, (self.site_id, self.problems))


def feasibility_problems(data: SiteData, spec: StudySpec) -> list[str]:
    """The rules the site's records break for ``spec``'s estimator (empty: feasible).

    Public wording only: each message names the rule and what to do, never a count."""
    if data.n < 2:
        return [
            "too few records: a release needs at least 2 records after the missing-value "
            f"policy; check the extract and the spec's 'missing' setting, {_LEAVE_OUT}"
        ]
    w = np.asarray(data.w)
    treated = w == 1
    has_treated, has_control = bool(treated.any()), bool((~treated).any())
    out: list[str] = []
    for present, arm in ((has_treated, "treated"), (has_control, "control")):
        if not present:
            out.append(
                f"empty {arm} arm: every estimator needs both arms; check the treatment "
                f"column and its labels in the spec, {_LEAVE_OUT}"
            )
    # every stratified estimator (matching, adjusted) needs a stratum with both arms; the
    # difference in means ignores strata
    if out or spec.estimator == "dim":
        return out
    if not _some_stratum_has_both_arms(np.asarray(data.x), treated):
        out.append(
            f"no common support: estimator {spec.estimator!r} compares arms within covariate strata and "
            "no stratum holds both treated and control records, so the release would be pure "
            f"noise; coarsen the covariate bins or levels in a new spec, {_LEAVE_OUT}"
        )
    return out


def _some_stratum_has_both_arms(x: np.ndarray, treated: np.ndarray) -> bool:
    # strata present in each arm as sorted unique ids (|X| may be 10^9: nothing per stratum)
    t_strata = np.unique(x[treated])
    c_strata = np.unique(x[~treated])
    return bool(np.intersect1d(t_strata, c_strata, assume_unique=True).size)
