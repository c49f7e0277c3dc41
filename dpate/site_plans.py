"""A site release's mechanism plan from the statistics its engine computed, or (tests and
simulations) from its validated records (pre-noise values: private), apart from its Prefect tasks
(:mod:`dpate.tasks.site`). No Prefect here.
"""

from __future__ import annotations

import secrets

import numpy as np

from dpate.schemas.site_data import RecordOrder, SecureOrder, SiteData, SiteStatistics
from dpate.schemas.spec import StudySpec
from dpate_core.mechanisms import PlanInputs
from dpate_core.mechanisms.adjusted import plan_adjusted_from_statistics
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means_from_statistics
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import MechanismPlan

__all__ = ["data_independent_order", "plan_from_records", "record_order"]


def data_independent_order(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)``, independent of the data (seeded from the
    operating system's secure source). Algorithm 1 pairs records by rank, and its sensitivity
    bounds need an order that does not depend on the data set (docs/privacy.md, Record order);
    the file's order might (an extract sorted by outcome, a data-seeded shuffle)."""
    return np.random.default_rng(secrets.randbits(256)).permutation(n)


def record_order(n: int) -> RecordOrder:
    """The order a release from the engine ranks the ``n`` records of each stratum in for
    Algorithm 1: a fresh secure random order per release (:class:`SecureOrder`; the same
    distribution as :func:`data_independent_order` restricted to each stratum)."""
    del n
    return SecureOrder()


def _plan_statistics(spec: StudySpec, site_id: str, data: SiteStatistics) -> MechanismPlan:
    """The spec's mechanism from the statistics its engine computed."""
    privacy = spec.site(site_id).privacy
    split = spec.budget_split(site_id).shares
    if spec.estimator == "adjusted":
        return plan_adjusted_from_statistics(
            data.cells,
            epsilon=privacy.epsilon,
            delta=privacy.delta,
            split=split,
            weighting=spec.weighting,
        )
    if spec.estimator == "dim":
        return plan_difference_in_means_from_statistics(
            data.cells,
            epsilon=privacy.epsilon,
            delta=privacy.delta,
            split=split,
            arm_sizes_public=bool(spec.arm_sizes_public),
            binary=spec.outcome.binary,
        )
    if data.matching is None:
        raise ValueError(
            f"estimator {spec.estimator!r} needs Algorithm 1's statistics: read the site's data "
            f"with matching=True"
        )
    return plan_matching(
        spec.estimator,
        data.matching,
        bound=spec.outcome.bound,
        epsilon=privacy.epsilon,
        delta=privacy.delta,
        domain_size=spec.domain_size,
        split=split,
        variance=spec.variance_mode,
        cells=data.cells if spec.variance_mode == "stratified" else None,
    )


def plan_from_records(
    spec: StudySpec, site_id: str, data: SiteData | SiteStatistics
) -> MechanismPlan:
    """The spec's mechanism on the site's statistics (a release) or validated records (tests and
    simulations; an order-dependent estimator gets its records in a fresh data-independent
    order). Pre-noise values: private."""
    if isinstance(data, SiteStatistics):
        return _plan_statistics(spec, site_id, data)
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
