"""A site release's mechanism plan from its records or streamed statistics (pre-noise values:
private), apart from its Prefect tasks (:mod:`dpate.tasks.site`). No Prefect here.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np

from dpate.schemas.site_preparation import SiteData
from dpate.schemas.site_statistics import STREAMED_ESTIMATORS, SiteStatistics
from dpate.schemas.spec import StudySpec
from dpate_core.adjusted import plan_adjusted_from_statistics
from dpate_core.difference_in_means import plan_difference_in_means_from_statistics
from dpate_core.registry import PlanInputs
from dpate_core.release import MechanismPlan

__all__ = ["data_independent_order", "plan_from_records"]


def data_independent_order(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)``, independent of the data (seeded from the
    operating system's secure source). Algorithm 1 pairs records by rank, and its sensitivity
    bounds need an order that does not depend on the data set (docs/privacy.md, Record order);
    the file's order might (an extract sorted by outcome, a data-seeded shuffle)."""
    return np.random.default_rng(secrets.randbits(256)).permutation(n)


def _plan_adjusted(spec: StudySpec, site_id: str, data: SiteStatistics) -> MechanismPlan:
    # the registry's adjusted plan (dpate_core.registry) with the cells computed by the stream
    privacy = spec.site(site_id).privacy
    return plan_adjusted_from_statistics(
        data.cells,
        epsilon=privacy.epsilon,
        delta=privacy.delta,
        split=spec.budget_split(site_id).shares,
        weighting=spec.weighting,
    )


def _plan_dim(spec: StudySpec, site_id: str, data: SiteStatistics) -> MechanismPlan:
    # the registry's dim plan (dpate_core.registry) with the arm sums of the streamed cells
    privacy = spec.site(site_id).privacy
    return plan_difference_in_means_from_statistics(
        data.cells,
        epsilon=privacy.epsilon,
        delta=privacy.delta,
        split=spec.budget_split(site_id).shares,
        arm_sizes_public=bool(spec.arm_sizes_public),
        binary=spec.outcome.binary,
    )


#: the plan of each estimator in STREAMED_ESTIMATORS from its streamed statistics
_FROM_STATISTICS: dict[str, Callable[[StudySpec, str, SiteStatistics], MechanismPlan]] = {
    "adjusted": _plan_adjusted,
    "dim": _plan_dim,
}


def plan_from_records(
    spec: StudySpec, site_id: str, data: SiteData | SiteStatistics
) -> MechanismPlan:
    """The spec's mechanism on the site's records or streamed statistics (pre-noise values:
    private). An order-dependent estimator (Algorithm 1) gets its records in a fresh
    data-independent order."""
    if isinstance(data, SiteStatistics):
        build = _FROM_STATISTICS.get(spec.estimator)
        if build is None:
            raise ValueError(
                f"estimator {spec.estimator!r} is planned from the records, not from streamed "
                f"statistics (streamed: {sorted(STREAMED_ESTIMATORS)})"
            )
        return build(spec, site_id, data)
    w, y, x = data.w, data.y, data.x
    if spec.estimator_info.order_dependent:
        order = data_independent_order(data.n)
        w, y, x = w[order], y[order], x[order]
    return spec.estimator_info.plan(
        PlanInputs(
            w=w,
            y=y,
            x=x,
            domain_size=data.domain_size,
            bound=spec.outcome.bound,
            privacy=spec.site(site_id).privacy,
            split=spec.budget_split(site_id).shares,
            arm_sizes_public=spec.arm_sizes_public,
            variance=spec.variance_mode,
            binary=spec.outcome.binary,
            weighting=spec.weighting,
        )
    )
