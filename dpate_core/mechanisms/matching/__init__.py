"""DP exact matching for observational studies: SmoothDPMatching (Algorithm 2, Laplace noise
scaled to a beta-smooth sensitivity, with its private variance) and GlobalDPMatching (the
global-sensitivity baseline), as corrected (``docs/explanation/corrections.md``).

:func:`plan_matching` builds either release's plan from Algorithm 1's one-pass statistics; the
smooth and global sensitivities of the estimate and of its variance are here too, with the
stratified (within-cell) variance and its pure DP release. :data:`SMOOTH_MATCHING` and
:data:`GLOBAL_MATCHING` are the estimators a study names ``"smooth_matching"`` and
``"global_matching"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from dpate_core.mechanisms._estimator import (
    Estimator,
    PlanInputs,
    StatisticsInputs,
)
from dpate_core.release import MechanismPlan
from dpate_core.statistics import cell_statistics, matching_statistics

from ._public import (
    global_noise_model,
    global_plausible,
    predict_global,
    predict_smooth,
    smooth_noise_model,
    smooth_plausible,
)
from ._release import global_dp_matching, plan_matching, smooth_dp_matching
from ._sensitivity import (
    matching_ate_float_error,
    matching_global_sensitivity,
    matching_local_sensitivity_bound,
    matching_smooth_sensitivity,
    matching_variance_float_error,
    matching_variance_local_sensitivity_bound,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)
from ._stratified_variance import (
    SUBSPLIT,
    conditional_variance,
    match_use_weight,
    stratified_noise,
    stratified_variance,
)

__all__ = [
    "GLOBAL_MATCHING",
    "SMOOTH_MATCHING",
    "SMOOTH_MATCHING_SEARCHED",
    "SUBSPLIT",
    "MatchingOptions",
    "conditional_variance",
    "global_dp_matching",
    "match_use_weight",
    "matching_ate_float_error",
    "matching_global_sensitivity",
    "matching_local_sensitivity_bound",
    "matching_smooth_sensitivity",
    "matching_variance_float_error",
    "matching_variance_local_sensitivity_bound",
    "matching_variance_smooth_sensitivity",
    "plan_matching",
    "smooth_beta",
    "smooth_dp_matching",
    "stratified_noise",
    "stratified_variance",
]


@dataclass(frozen=True)
class MatchingOptions:
    """The matching estimators' spec options."""

    variance: Literal["appendix", "stratified"] = field(
        default="appendix",
        metadata={
            "spec_key": "variance",
            "doc": "the sampling variance: 'appendix' (the paper's V_hat) or 'stratified' "
            "(within-cell, docs/explanation/inference.md)",
        },
    )


def _planner(
    name: str,
) -> tuple[Callable[[PlanInputs], MechanismPlan], Callable[[StatisticsInputs], MechanismPlan]]:
    """The two plans of the matching estimator ``name``: from records, from an engine's
    statistics."""

    def plan(p: PlanInputs) -> MechanismPlan:
        stats = matching_statistics(p.w, p.y, p.x, p.domain_size, bound=p.bound)
        cells = None
        if p.options.variance == "stratified":
            cells = cell_statistics(p.w, p.y, p.x, domain_size=p.domain_size, bound=p.bound)
        return plan_matching(
            name,
            stats,
            bound=p.bound,
            epsilon=p.privacy.epsilon,
            delta=p.privacy.delta,
            domain_size=p.domain_size,
            split=p.split,
            variance=p.options.variance,
            cells=cells,
        )

    def from_statistics(s: StatisticsInputs) -> MechanismPlan:
        if s.matching is None:
            raise ValueError(
                f"estimator {name!r} needs Algorithm 1's statistics: read the site's data with "
                f"matching=True"
            )
        return plan_matching(
            name,
            s.matching,
            bound=s.bound,
            epsilon=s.privacy.epsilon,
            delta=s.privacy.delta,
            domain_size=s.domain_size,
            split=s.split,
            variance=s.options.variance,
            cells=s.cells if s.options.variance == "stratified" else None,
        )

    return plan, from_statistics


def _required(options: object) -> tuple[str, ...]:
    return ("noise_variance", "sampling_variance_dp")


#: SmoothDPMatching's searched split (ATE, sampling variance, ln S): the best MSE of the search in
#: dpate/experiments/split_search.py (docs/explanation/results.md, "Budget split presets")
SMOOTH_MATCHING_SEARCHED = ("11/20", "3/20", "3/10")
_ESTIMAND = (
    "the average effect over all patients, counting those in covariate strata where only one "
    "treatment occurs as having no effect (exact matching within strata, Algorithm 1)"
)

_smooth_plan, _smooth_from_statistics = _planner("smooth_matching")
#: the estimator a study names "smooth_matching" (Algorithm 2)
SMOOTH_MATCHING = Estimator(
    name="smooth_matching",
    label="SmoothDPMatching",
    estimand=_ESTIMAND,
    parts=("ATE", "sampling variance", "ln smooth sensitivity"),
    pure=False,
    designs=("randomized", "observational"),
    needs_covariates=True,
    options=MatchingOptions,
    plan=_smooth_plan,
    plan_from_statistics=_smooth_from_statistics,
    order_dependent=True,
    searched_shares=SMOOTH_MATCHING_SEARCHED,
    noise_model=smooth_noise_model,
    predict=predict_smooth,
    required_diagnostics=lambda options: (*_required(options), "smooth_sensitivity_dp"),
    plausible=smooth_plausible,
    candidate_splits={
        3: (
            (Fraction(1, 3),) * 3,
            (Fraction(11, 20), Fraction(3, 20), Fraction(3, 10)),
            (Fraction(7, 10), Fraction(1, 20), Fraction(1, 4)),
        )
    },
    releases_on_any_records=True,
)

_global_plan, _global_from_statistics = _planner("global_matching")
#: the estimator a study names "global_matching" (the global-sensitivity baseline)
GLOBAL_MATCHING = Estimator(
    name="global_matching",
    label="GlobalDPMatching",
    estimand=_ESTIMAND,
    parts=("ATE", "sampling variance"),
    pure=False,
    designs=("randomized", "observational"),
    needs_covariates=True,
    options=MatchingOptions,
    plan=_global_plan,
    plan_from_statistics=_global_from_statistics,
    order_dependent=True,
    noise_model=global_noise_model,
    predict=predict_global,
    required_diagnostics=_required,
    plausible=global_plausible,
    candidate_splits={
        2: tuple((a, 1 - a) for a in (Fraction(1, 2), Fraction(4, 5), Fraction(9, 10)))
    },
    releases_on_any_records=True,
)
