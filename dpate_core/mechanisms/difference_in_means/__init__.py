"""The DP difference in means for randomized trials (section 3.1.1): noisy arm sums and sums of
squares (with private arm sizes, the arms' sizes and sums as one ``(arm, end)`` histogram), pure
epsilon-DP.

:data:`DIFFERENCE_IN_MEANS` is the estimator a study names ``"dim"``; :func:`dp_difference_in_means`
releases it on records, :func:`plan_difference_in_means` (records) and
:func:`plan_difference_in_means_from_statistics` (a site engine's arm sums) build its plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpate_core.mechanisms._estimator import (
    Estimator,
    PlanInputs,
    StatisticsInputs,
    StudyChoice,
    StudySite,
)
from dpate_core.release import MechanismPlan

from ._public import noise_model, plausible, predict, required_diagnostics
from ._release import (
    arm_statistics,
    dp_difference_in_means,
    plan_difference_in_means,
    plan_difference_in_means_from_statistics,
)

__all__ = [
    "DIFFERENCE_IN_MEANS",
    "DifferenceInMeansOptions",
    "arm_statistics",
    "dp_difference_in_means",
    "plan_difference_in_means",
    "plan_difference_in_means_from_statistics",
]


@dataclass(frozen=True)
class DifferenceInMeansOptions:
    """The difference in means' spec options."""

    arm_sizes_public: bool = field(
        metadata={
            "spec_key": "arm_sizes_public",
            "doc": "estimator 'dim' publishes the arm sizes N_t and N_c exactly when they are "
            "public design facts: say so explicitly, arm_sizes_public = true (the paper's "
            "randomized-trial setting) or false (the arms' sizes and sums as one DP histogram)",
            "assumed": True,
        }
    )


def _parts(options: Any, binary: bool) -> tuple[str, ...]:
    private = options is not None and not options.arm_sizes_public
    first = "arm outcome histogram" if private else "arm sums"  # private: one query, (arm, end)
    return (first,) if binary else (first, "arm sums of squares")


def _plan(p: PlanInputs) -> MechanismPlan:
    return plan_difference_in_means(
        p.w,
        p.y,
        bound=p.bound,
        epsilon=p.privacy.epsilon,
        delta=p.privacy.delta,
        split=p.split,
        arm_sizes_public=bool(p.options.arm_sizes_public),
        binary=p.binary,
    )


def _plan_from_statistics(s: StatisticsInputs) -> MechanismPlan:
    return plan_difference_in_means_from_statistics(
        s.cells,
        epsilon=s.privacy.epsilon,
        delta=s.privacy.delta,
        split=s.split,
        arm_sizes_public=bool(s.options.arm_sizes_public),
        binary=s.binary,
    )


#: the first part's shares ``dpate plan`` tries (the rest to the squares): a larger share narrows
#: the interval but its noisy variance estimate under-covers at a few thousand records and sd
#: well below ``B`` (4/5 and 9/10: 0.898-0.921 where even halves cover 0.932-0.941;
#: ``bench/bench_dim_split.py``, docs/explanation/results.md, "Budget split presets")
_SUMS_SHARES = (Fraction(1, 2), Fraction(7, 10))


def _choose(options: Any, domain_size: int, sites: Sequence[StudySite]) -> StudyChoice:
    """No variant to choose (one estimand); a caution when a site's own split gives the sums of
    squares less than the least :data:`_SUMS_SHARES` leaves them (3/10): its variance estimate
    is noisy where the outcome's sd is small next to ``B``, and the interval under-covered
    there (4/5 and 9/10 to the first part: 0.898-0.921 at 1,000 records, sd a tenth of ``B``,
    eps 1 and 2). A binary outcome's release has no squares (one part): nothing to say."""
    most = max(_SUMS_SHARES)
    starved = [s.split[0] for s in sites if len(s.split) == 2 and s.split[0] > most]
    if not starved:
        return StudyChoice(options)
    shares = ", ".join(sorted({str(Fraction(share)) for share in starved}))
    return StudyChoice(
        options,
        cautions=(
            f"{len(starved)} of {len(sites)} site(s) give the first part of the budget "
            f"({shares}) more than {most}, leaving the arm sums of squares less than "
            f"{1 - most}: their variance estimate is then noisy where the outcome's sd is small "
            f"next to B, and the interval under-covered in simulation (0.90-0.92 at 1,000 "
            f"records with an outcome sd a tenth of B; docs/explanation/results.md, 'Budget "
            f"split presets'); the even split or 7/10 covered there",
        ),
    )


#: the estimator a study names "dim"
DIFFERENCE_IN_MEANS = Estimator(
    name="dim",
    label="DP difference in means",
    estimand="the average effect over the trial's population (difference in arm means)",
    parts=("arm sums", "arm sums of squares"),
    parts_for=_parts,
    pure=True,
    designs=("randomized",),
    options=DifferenceInMeansOptions,
    binary_outcome=True,
    plan=_plan,
    plan_from_statistics=_plan_from_statistics,
    centred_cells=False,
    stratified=False,
    noise_model=noise_model,
    predict=predict,
    required_diagnostics=required_diagnostics,
    plausible=plausible,
    publishes_arm_sizes=lambda options: bool(options.arm_sizes_public),
    candidate_splits={2: tuple((a, 1 - a) for a in _SUMS_SHARES)},
    choose=_choose,
    releases_on_any_records=True,
)
