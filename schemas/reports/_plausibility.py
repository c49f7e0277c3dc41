"""What the public fields of a site report make checkable, in one place: the shape of a release
and, through the estimator's own ``plausible`` rules (:class:`dpate_core.mechanisms.Estimator`),
whether its numbers are ones the spec's mechanism *can* produce from the public values (the bound
``B``, the site's ``(epsilon, delta)`` and budget split, ``N`` and, when public, the arm sizes).

Two shapes of release are possible, and only these (:func:`estimate_problems`): a resolved one,
with every diagnostic its estimator always publishes and numbers its rules accept; and, for a
mechanism that can fail to resolve (the estimator's ``unresolved_reasons``), an unresolved one: no
``tau`` and no variance, one of that mechanism's own reasons, and the diagnostics it publishes
then (nothing usable).

The ledger totals a report carries (``lifetime_spend``, version 2) are checked by
:func:`spend_problems` against what a ledger can hold right after this release's reservation.

API::

    problems = estimate_problems(report.estimate, spec)   # [] when plausible
    problems = spend_problems(spent, cap, release=cost, spec_cap=cap_in_spec)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpate_core.mechanisms import ESTIMATORS
from dpate_core.privacy import PrivacyParams

if TYPE_CHECKING:  # pragma: no cover
    from dpate.schemas.reports._report import PublicEstimate
    from dpate.schemas.spec import StudySpec

__all__ = [
    "UNRESOLVED_DIAGNOSTICS",
    "estimate_problems",
    "required_diagnostics",
    "spend_problems",
]

#: what an unresolved release publishes in its diagnostics, exactly (dpate_core.release)
UNRESOLVED_DIAGNOSTICS = {"usable_strata": 0.0, "usable_weight": 0.0}


def required_diagnostics(spec: StudySpec) -> tuple[str, ...]:
    """The diagnostics every resolved release of the spec's estimator publishes."""
    return spec.estimator_info.required_diagnostics(spec.study_options)


def estimate_problems(e: PublicEstimate, spec: StudySpec) -> list[str]:
    """Why ``e`` cannot be an output of ``spec``'s mechanism (empty when it can).

    Assumes ``e`` already matches the spec's estimator, budget, bound and split
    (:meth:`dpate.schemas.reports._report.SiteReport.problems_against` checks those first).
    """
    if not e.resolved:
        return _unresolved(e)
    missing = [k for k in required_diagnostics(spec) if k not in e.diagnostics]
    if missing:
        return [f"diagnostics {missing} are missing: the {e.estimator} release always has them"]
    return spec.estimator_info.plausible(e.to_estimate(), spec.study_options, spec.domain_size)


def _unresolved(e: PublicEstimate) -> list[str]:
    """An unresolved release (``dpate_core.release.SiteEstimate.resolved`` False): only a
    mechanism with ``unresolved_reasons`` gives one, with one of those reasons, no estimate or
    variance (the schema holds them null) and :data:`UNRESOLVED_DIAGNOSTICS` as its diagnostics
    (nothing was usable)."""
    reasons = ESTIMATORS[e.estimator].unresolved_reasons if e.estimator in ESTIMATORS else ()
    if not reasons:
        return [f"resolved is false, but every {e.estimator} release resolves its estimate"]
    out: list[str] = []
    if e.unresolved_reason not in reasons:
        out.append(
            f"unresolved_reason is not one the {e.estimator} release gives: it must be one of "
            f"{list(reasons)}"
        )
    if e.diagnostics != UNRESOLVED_DIAGNOSTICS:
        out.append(
            f"diagnostics of an unresolved release must be exactly {UNRESOLVED_DIAGNOSTICS} "
            f"(nothing was usable; no variance part is published)"
        )
    if e.n_treated is not None:
        out.append(
            f"n_treated/n_control must be null: the {e.estimator} release does not publish them"
        )
    return out


def _pair(p: PrivacyParams) -> str:
    return f"epsilon {p.epsilon}, delta {p.delta}"


def spend_problems(
    spent: PrivacyParams,
    cap: PrivacyParams,
    *,
    release: PrivacyParams,
    spec_cap: PrivacyParams | None = None,
) -> list[str]:
    """Why a report's ledger totals (``lifetime_spend``) cannot be the site ledger's right after
    this release's reservation (empty when they can). Exact comparisons, both components.

    The ledger debits a reservation only when the new total stays within the cap
    (:func:`dpate_core.privacy.check_budget`), so ``spent <= cap``; the total includes this
    release, so ``spent >= release``; and a reservation is refused under any cap other than the
    one the spec gives the site (``CapMismatchError``), so ``cap == spec_cap``.
    """
    out: list[str] = []
    if not spent <= cap:
        out.append(
            f"lifetime_spend: spent ({_pair(spent)}) exceeds the cap ({_pair(cap)}): a ledger "
            f"never reserves past its cap"
        )
    if not release <= spent:
        out.append(
            f"lifetime_spend: spent ({_pair(spent)}) is below this release's own budget "
            f"({_pair(release)}): the lifetime total includes this release"
        )
    if spec_cap is not None and cap != spec_cap:
        out.append(
            f"lifetime_spend: cap ({_pair(cap)}) is not the spec's lifetime cap for the site "
            f"({_pair(spec_cap)}): a ledger reserves only under the cap the spec names"
        )
    return out
