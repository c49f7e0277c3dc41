"""Feasibility of a site's release, checked before any budget is reserved.

:func:`feasibility_problems` looks at a site's validated records (:class:`SiteData`), or at the
per-cell counts a release reads instead of them (:class:`~dpate_core.statistics.CellStatistics`,
computed by the site's engine: :func:`dpate.schemas.site_data.read_site_records`), and says
whether the spec's estimator can release anything useful from them: both give the same answer,
word for word, for the same records. It is pure (no I/O, no noise, no ledger) and its messages
are **public wording**: they name the rule that fails and what to do, never a count or any other
number computed from the records, so they may appear in a Prefect state or a log like any other
public error.

The rules (the estimators' own preconditions, ``dpate_core.release``):

- a release needs at least 2 records (after the spec's missing-value policy);
- both arms must be non-empty, for every estimator (difference in means and matching alike);
- the matching estimators (Algorithm 2 and the global-sensitivity baseline) need at least one
  covariate stratum holding both treated and control records: otherwise no record has a match and
  the release would be pure noise, which the aggregator (MVAgg) would still weight by ``N_j / N``.

``dpate check`` (the site operator's own command) reports every rule. A release refuses only on
what does not depend on the records beyond the public values (:func:`release_refusals`): fewer
than 2 records (``N`` is published with every release), and an empty arm when the spec treats
the arm sizes as public (they are published too). Every other rule would tell whoever reads the
refusal something about the records for free (an empty arm, no common support), so the release
goes ahead instead, as each mechanism defines it whatever its arms hold: the difference in means
with private arm sizes and the adjusted estimator are DP on any records (an empty arm gives an
uninformative release), and matching follows Algorithm 1's convention that a stratum without
both arms contributes nothing (``Yhat(1) = Yhat(0) = Y``). The rule that failed goes to the
site's operator log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dpate.errors import DpateError, ExitCode
from dpate.schemas.site_data import SiteData, SiteStatistics
from dpate.schemas.spec import StudySpec

if TYPE_CHECKING:
    from dpate_core.statistics import CellStatistics

__all__ = [
    "FeasibilityError",
    "cell_feasibility_problems",
    "feasibility_problems",
    "release_refusals",
]

#: Records' feasibility is checked from per-cell counts (``O(|X|)`` memory) up to this many
#: strata, else from sorted stratum ids (``O(N)``: ``|X|`` may be 10^9)
COUNT_CELLS_UP_TO = 1 << 24


#: the advice to leave a site out, and its cost: like any spec change it is a new spec hash, so a
#: site that already released for this spec spends again (public wording: no number)
_LEAVE_OUT = (
    "or leave this site out of the study (require_all_sites = false; like any spec change this "
    "is a new spec hash: a site that already released spends its release's budget again)"
)


class FeasibilityError(DpateError, ValueError):
    """The site's records cannot support the spec's release (public wording, no counts)."""

    exit_code = ExitCode.SITE_DATA
    cause = "release not feasible"

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


def feasibility_problems(
    data: SiteData | SiteStatistics | CellStatistics, spec: StudySpec
) -> list[str]:
    """The rules the site's records break for ``spec``'s estimator (empty: feasible).

    ``data``: the validated records, or their per-cell statistics (a streamed release:
    :func:`cell_feasibility_problems`). Public wording only: each message names the rule and what
    to do, never a count."""
    if isinstance(data, SiteStatistics):
        return cell_feasibility_problems(data.cells.counts, spec)
    if not isinstance(data, SiteData):
        return cell_feasibility_problems(data.counts, spec)
    if 0 < data.domain_size <= COUNT_CELLS_UP_TO:
        # per-cell counts in chunks: O(|X|) memory, no per-record temporary (the masks and
        # sorted copies below cost ~10 bytes a record at the peak)
        return cell_feasibility_problems(_cell_counts(data), spec)
    w = np.asarray(data.w)
    treated = w == 1
    return _problems(
        data.n,
        lambda: (bool(treated.any()), bool((~treated).any())),
        lambda: _some_stratum_has_both_arms(np.asarray(data.x), treated),
        spec,
    )


def cell_feasibility_problems(counts: np.ndarray, spec: StudySpec) -> list[str]:
    """:func:`feasibility_problems` from the records' counts per cell ``g = 2 x + w`` (control
    then treated for each stratum, as :class:`~dpate_core.statistics.CellStatistics` holds them):
    ``N`` is their sum, an arm is empty when its cells sum to 0, and a stratum has both arms when
    both its cells are positive. ``O(|X|)``, nothing per record."""
    c = np.asarray(counts)
    if c.ndim != 1 or c.size % 2:
        raise ValueError(f"counts must be a 1-d array of 2 |X| cells (got shape {c.shape})")
    control, treated = c[0::2], c[1::2]
    return _problems(
        int(c.sum()),
        lambda: (bool(treated.any()), bool(control.any())),
        lambda: bool(((treated > 0) & (control > 0)).any()),
        spec,
    )


def _problems(
    n: int,
    arms: Callable[[], tuple[bool, bool]],
    common_support: Callable[[], bool],
    spec: StudySpec,
) -> list[str]:
    if n < 2:
        return [
            "too few records: a release needs at least 2 records after the missing-value "
            f"policy; check the extract and the spec's 'missing' setting, {_LEAVE_OUT}"
        ]
    has_treated, has_control = arms()
    out: list[str] = []
    for present, arm in ((has_treated, "treated"), (has_control, "control")):
        if not present:
            out.append(
                f"empty {arm} arm: every estimator needs both arms; check the treatment "
                f"column and its labels in the spec, {_LEAVE_OUT}"
            )
    # every stratified estimator (matching, adjusted) needs a stratum with both arms; the
    # difference in means ignores strata
    if out or not spec.estimator_info.stratified:
        return out
    if not common_support():
        out.append(
            f"no common support: estimator {spec.estimator!r} compares arms within covariate "
            "strata and no stratum holds both treated and control records, so the release would "
            f"be pure noise; coarsen the covariate bins or levels in a new spec "
            f"(it spends again like any spec change), {_LEAVE_OUT}"
        )
    return out


def _cell_counts(data: SiteData, chunk: int = 1 << 20) -> np.ndarray:
    counts = np.zeros(2 * data.domain_size, np.int64)
    w, x = np.asarray(data.w), np.asarray(data.x)
    for start in range(0, data.n, chunk):
        cells = 2 * x[start : start + chunk].astype(np.int64) + (w[start : start + chunk] == 1)
        counts += np.bincount(cells, minlength=counts.size)
    return counts


def _some_stratum_has_both_arms(x: np.ndarray, treated: np.ndarray) -> bool:
    # strata present in each arm as sorted unique ids (|X| may be 10^9: nothing per stratum)
    t_strata = np.unique(x[treated])
    c_strata = np.unique(x[~treated])
    return bool(np.intersect1d(t_strata, c_strata, assume_unique=True).size)


def release_refusals(problems: list[str], spec: StudySpec) -> list[str]:
    """The ones among ``problems`` (:func:`feasibility_problems`) a release refuses on: those
    that follow from public values only (``N < 2``; an empty arm when the spec's arm sizes are
    public). Any other problem depends on the records, so a refusal would be a free bit about
    them: for an estimator whose release is defined on any records
    (``Estimator.releases_on_any_records``: the difference in means, the adjusted estimator and
    both matching estimators, Algorithm 1's convention for a stratum without both arms) the
    release goes ahead and the problem is for the site's operator log only. Any other estimator
    (a plug-in, say) keeps every feasibility rule as a refusal."""
    if not spec.estimator_info.releases_on_any_records:
        return list(problems)
    public_arms = bool(spec.arm_sizes_public)
    return [
        p
        for p in problems
        if p.startswith("too few records") or (public_arms and p.startswith("empty "))
    ]
