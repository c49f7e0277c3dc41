"""A study spec's plan: :func:`dpate_core.planning.plan_study` on the spec's public design (its
estimator, combiner, covariate structure, outcome, each site's epsilon and split, the study's
one choice) at given record counts. ``dpate plan`` and the checks before a run
(:func:`dpate.study_check.design_notes`) predict through it alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpate.schemas.spec import StudySpec
    from dpate_core.planning import Assumptions, SiteDesign, StudyPlan

__all__ = ["plan_spec", "spec_designs"]


def spec_designs(study: StudySpec, sizes: Mapping[str, int]) -> list[SiteDesign]:
    """Every site's public design: ``sizes[site]`` records, the spec's epsilon, delta and
    budget split."""
    from dpate_core.planning import SiteDesign

    return [
        SiteDesign(s.id, sizes[s.id], s.epsilon, s.delta, study.budget_split(s.id).shares)
        for s in study.sites
    ]


def plan_spec(
    study: StudySpec,
    designs: list[SiteDesign],
    *,
    assumptions: Assumptions | None = None,
    target_width: float | None = None,
    recommend: bool = True,
) -> StudyPlan:
    """The plan of the study at these site designs (:func:`spec_designs`), under
    ``assumptions`` (None: the plan's defaults); with ``target_width``, the epsilon that
    reaches it."""
    from dpate_core.planning import Assumptions, plan_study

    return plan_study(
        study.estimator,
        study.aggregator,
        designs,
        domain_size=study.domain_size,
        bound=study.outcome.bound,
        design=study.design,
        choice=study.study_choice,  # the spec's one choice for the whole study, and its reason
        assumptions=Assumptions() if assumptions is None else assumptions,
        target_width=target_width,
        recommend=recommend,
        covariate_sizes=tuple(c.size for c in study.binned_covariates),
        bounded_covariates=len(study.unbinned_covariates),
        binary=study.outcome.binary,
    )
