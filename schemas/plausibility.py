"""What the public fields of a site report make checkable, per estimator, in one place.

A report is a DP output, so the aggregator cannot check the estimate itself; it can check that
the numbers are ones the spec's mechanism *can* produce from the public values (the bound ``B``,
the site's ``(epsilon, delta)`` and budget split, ``N`` and, when public, the arm sizes). Each
rule below cites the mechanism in :mod:`dpate_core.release` it follows from.

Two shapes of release are possible, and only these (:func:`estimate_problems`): a resolved one,
whose ``tau`` lies in ``[-B, B]`` (every release clips it there, ``dpate_core.release``); and,
for a mechanism that can fail to resolve (the registry's ``unresolved_reasons``), an unresolved
one: no ``tau`` and no variance, one of that mechanism's own reasons, and the diagnostics it
publishes then (nothing usable). Float comparisons allow a
relative ``RTOL`` (the site and the aggregator compute the same formula from the same public
values).

The ledger totals a report carries (``lifetime_spend``, version 2) are checked by
:func:`spend_problems` against what a ledger can hold right after this release's reservation.

API::

    problems = estimate_problems(report.estimate, spec)   # [] when plausible
    problems = spend_problems(spent, cap, release=cost, spec_cap=cap_in_spec)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from dpate_core.mechanisms import ESTIMATORS
from dpate_core.privacy import PrivacyParams

if TYPE_CHECKING:  # pragma: no cover
    from dpate.schemas.report import PublicEstimate
    from dpate.schemas.spec import StudySpec

__all__ = [
    "RTOL",
    "UNRESOLVED_DIAGNOSTICS",
    "estimate_problems",
    "required_diagnostics",
    "spend_problems",
]

RTOL = 1e-9
#: what an unresolved release publishes in its diagnostics, exactly (dpate_core.release)
UNRESOLVED_DIAGNOSTICS = {"usable_strata": 0.0, "usable_weight": 0.0}


def required_diagnostics(estimator: str, arm_sizes_public: bool | None) -> tuple[str, ...]:
    """The diagnostics each mechanism's ``assemble`` always publishes (dpate_core.release)."""
    if estimator == "dim":
        base = ("noise_variance", "sampling_variance_dp")
        return base if arm_sizes_public else (*base, "n_treated_dp")
    if estimator == "smooth_matching":
        return ("noise_variance", "sampling_variance_dp", "smooth_sensitivity_dp")
    if estimator == "global_matching":
        return ("noise_variance", "sampling_variance_dp")
    if estimator == "adjusted":
        return ("noise_variance", "sampling_variance_dp", "usable_strata", "usable_weight")
    return ()


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0)


def _at_least(value: float, floor: float) -> bool:
    return value >= floor * (1.0 - RTOL)


def estimate_problems(e: PublicEstimate, spec: StudySpec) -> list[str]:
    """Why ``e`` cannot be an output of ``spec``'s mechanism (empty when it can).

    Assumes ``e`` already matches the spec's estimator, budget, bound and split
    (:meth:`dpate.schemas.report.SiteReport.problems_against` checks those first).
    """
    if not e.resolved:
        return _unresolved(e)
    assert e.tau is not None and e.variance is not None and e.raw_variance is not None
    out: list[str] = []
    bound = Fraction(e.bound)
    total = PrivacyParams(Fraction(e.epsilon), Fraction(e.delta))
    shares = [Fraction(s) for s in e.budget_split]
    eps_1 = total.epsilon * shares[0]  # the ATE's share is always the first part
    diag = e.diagnostics
    if e.estimator == "adjusted":
        return _missing(e, spec) or _adjusted(e, spec)
    # every release clips tau to [-B, B] (dpate_core.release.PublishedAssembly)
    out += _tau_range(e.tau, float(bound), "B (every release clips tau to [-B, B])")
    if e.estimator not in ("dim", "smooth_matching", "global_matching"):
        return out  # no mechanism-specific rules for this estimator here yet
    missing = _missing(e, spec)
    if missing:
        return missing
    noise_diag = diag["noise_variance"]

    # every estimator: variance = max(sampling, 0) + noise >= raw_variance, noise > 0
    if not noise_diag > 0:
        out.append(f"diagnostics.noise_variance ({noise_diag}) must be positive (DP noise)")
    if not _at_least(e.variance, noise_diag):
        out.append(
            f"variance ({e.variance}) is below the report's own noise variance ({noise_diag}): "
            f"a released variance is max(sampling, 0) + noise variance"
        )
    if not _at_least(e.variance, e.raw_variance):
        out.append(
            f"variance ({e.variance}) is below raw_variance ({e.raw_variance}): the released "
            f"variance only clamps the sampling part up at 0"
        )

    if e.estimator == "dim":
        out += _dim(e, spec, bound, eps_1, noise_diag)
    elif e.estimator == "global_matching":
        # plan_matching(global_matching): tau_hat + Lap(2B/eps_1) (ERRATA 2: sensitivity 2B);
        # noise variance 2 (2B/eps_1)^2, public
        b = PrivacyParams(eps_1).laplace_scale(2 * bound)
        out += _noise_matches(2.0 * b * b, noise_diag, e.variance, "2 (2B/eps_1)^2")
        if e.n_treated is not None:
            out.append("n_treated/n_control must be null: matching does not publish arm sizes")
    else:  # smooth_matching (the last estimator with rules here)
        # plan_matching(smooth_matching): tau_hat + (2 S/eps_1) Lap(1) with the beta-smooth
        # sensitivity S; S_dp is the exp of a DP value
        if not diag["smooth_sensitivity_dp"] > 0:
            out.append("diagnostics.smooth_sensitivity_dp must be positive (exp of a DP value)")
        if e.n_treated is not None:
            out.append("n_treated/n_control must be null: matching does not publish arm sizes")
    return out


def _missing(e: PublicEstimate, spec: StudySpec) -> list[str]:
    need = required_diagnostics(e.estimator, spec.arm_sizes_public)
    missing = [k for k in need if k not in e.diagnostics]
    if missing:
        return [f"diagnostics {missing} are missing: the {e.estimator} release always has them"]
    return []


def _unresolved(e: PublicEstimate) -> list[str]:
    """An unresolved release (``dpate_core.release.SiteEstimate.resolved`` False): only a
    mechanism with ``unresolved_reasons`` in the registry gives one, with one of those reasons,
    no estimate or variance (the schema holds them null) and :data:`UNRESOLVED_DIAGNOSTICS` as
    its diagnostics (nothing was usable)."""
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


def _dim(
    e: PublicEstimate, spec: StudySpec, bound: Fraction, eps_1: Fraction, noise_diag: float
) -> list[str]:
    """plan_difference_in_means: tau = S_t/N_t - S_c/N_c with each arm sum + Lap(b)."""
    out: list[str] = []
    assert e.variance is not None
    if spec.arm_sizes_public:
        if e.n_treated is None or e.n_control is None:
            return ["n_treated/n_control are missing: the spec treats arm sizes as public"]
        # public arms: b = B/eps_1 (a neighbour changes one outcome within its arm);
        # noise variance 2 b^2 (1/N_t^2 + 1/N_c^2)
        nt, nc = float(e.n_treated), float(e.n_control)
        b = PrivacyParams(eps_1).laplace_scale(bound)
    else:
        if e.n_treated is not None:
            return [
                "n_treated/n_control are published but the spec treats arm sizes as private "
                "(arm_sizes_public = false): they must be null"
            ]
        # private arms (ERRATA 5): b = 2B/eps_1; N_t_dp is post-processed into [1, N-1]
        nt = diag_nt = e.diagnostics["n_treated_dp"]
        if not 1.0 <= diag_nt <= e.n - 1.0:
            return [f"diagnostics.n_treated_dp ({diag_nt}) must lie in [1, N-1] (post-processing)"]
        nc = e.n - nt
        b = PrivacyParams(eps_1).laplace_scale(2 * bound)
    noise_var = 2.0 * b * b * (1.0 / nt**2 + 1.0 / nc**2)
    out += _noise_matches(noise_var, noise_diag, e.variance, "2 b^2 (1/N_t^2 + 1/N_c^2)")
    return out


def _adjusted(e: PublicEstimate, spec: StudySpec) -> list[str]:
    """dpate_core.mechanisms.adjusted.plan_adjusted_from_statistics: every post-processing bound
    is exact. ``tau`` is clipped to ``[-B, B]`` (subclassification averages the used strata's
    clipped arm means over the size of the strata used, which is itself a noisy count, so
    ``tau`` has no tighter public bound); ``usable_weight`` is the used strata's noisy size (each
    count clipped to ``[0, N]``) over ``N``, at most 2 per stratum; fixed effects:
    ``usable_weight`` is 1. A resolved release uses at least one stratum (with none it is
    unresolved). The noise variance is a sum of non-negative terms."""
    out: list[str] = []
    assert e.tau is not None and e.variance is not None
    d = e.diagnostics
    nv, strata, weight = d["noise_variance"], d["usable_strata"], d["usable_weight"]
    if not (strata == math.floor(strata) and 1 <= strata <= spec.domain_size):
        out.append(
            f"diagnostics.usable_strata ({strata}) must be a whole number of strata in "
            f"[1, |X| = {spec.domain_size}]: a resolved release uses at least one stratum"
        )
    if not 0 <= weight <= 2.0 * strata * (1.0 + RTOL):
        out.append(
            f"diagnostics.usable_weight ({weight}) must lie in [0, 2 * usable_strata]: each "
            f"stratum's weight is a clipped noisy count over N"
        )
    if not nv >= 0:
        out.append(f"diagnostics.noise_variance ({nv}) must not be negative")
    if not _at_least(e.variance, nv):
        out.append(
            f"variance ({e.variance}) is below the report's own noise variance ({nv}): a "
            f"released variance is the clipped sampling part + noise variance"
        )
    # (no variance >= raw_variance rule: the within-cell variances are clipped to [0, B^2/4])
    out += _tau_range(e.tau, float(e.bound), "B (every release clips tau to [-B, B])")
    if e.n_treated is not None:
        out.append("n_treated/n_control must be null: the adjusted release does not publish them")
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


def _noise_matches(expected: float, reported: float, variance: float, rule: str) -> list[str]:
    out = []
    if not _close(reported, expected):
        out.append(
            f"diagnostics.noise_variance ({reported}) is not the mechanism's noise variance "
            f"{rule} = {expected} from the public values"
        )
    if not _at_least(variance, expected):
        out.append(
            f"variance ({variance}) is below the mechanism's noise variance {rule} = {expected}"
        )
    return out


def _tau_range(tau: float, reach: float, rule: str) -> list[str]:
    if abs(tau) <= reach:
        return []
    return [
        f"tau ({tau}) is outside the range the mechanism can produce, |tau| <= {rule} = {reach:.6g}"
    ]
