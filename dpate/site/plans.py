"""A site release's mechanism plan from the statistics its engine computed, or (tests and
simulations) from its validated records (pre-noise values: private), apart from its Prefect tasks
(:mod:`dpate.tasks.site`). No Prefect here.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from dpate.schemas.site_data import (
    RecordOrder,
    SecureOrder,
    SiteData,
    SiteStatistics,
    prepare_site_data,
    read_site_records,
)
from dpate.schemas.spec import StudySpec
from dpate.settings import SiteContext
from dpate_core.balance import BalancePlan, bin_levels, plan_balance, plan_balance_records
from dpate_core.mechanisms import BandInputs, PlanInputs, StatisticsInputs
from dpate_core.release import MechanismPlan

__all__ = [
    "balance_plan",
    "data_independent_order",
    "plan_from_records",
    "read_for_check",
    "read_for_release",
    "record_order",
    "shared_reads",
    "take_checked",
]


def data_independent_order(n: int) -> np.ndarray:
    """A uniformly random permutation of ``range(n)``, independent of the data (seeded from the
    operating system's secure source). Algorithm 1 pairs records by rank, and its sensitivity
    bounds need an order that does not depend on the data set (docs/explanation/privacy.md, Record order);
    the file's order might (an extract sorted by outcome, a data-seeded shuffle)."""
    return np.random.default_rng(secrets.randbits(256)).permutation(n)


def record_order(n: int) -> RecordOrder:
    """The order a release from the engine ranks the ``n`` records of each stratum in for
    Algorithm 1: a fresh secure random order per release (:class:`SecureOrder`; the same
    distribution as :func:`data_independent_order` restricted to each stratum)."""
    del n
    return SecureOrder()


def read_for_release(ctx: SiteContext) -> SiteStatistics | SiteData:
    """The site's data validated and reduced, where it lives, to what its estimator's release
    needs (:func:`dpate.schemas.site_data.read_site_records`: per-cell statistics, and Algorithm
    1's for an order-dependent estimator); for an estimator that plans only from records (no
    ``plan_from_statistics``, or a study with numeric covariates given by public bounds and no
    bins, whose values the release reads record by record), the validated records themselves,
    read into the site's process. Raises :class:`~dpate.schemas.site_data.SiteDataError`
    (columns, rules, counts, positions)."""
    if ctx.spec.estimator_info.plan_from_statistics is None or ctx.spec.unbinned_covariates:
        return prepare_site_data(
            ctx.data_location,
            ctx.spec,
            fmt=ctx.spec.site(ctx.site_id).format,
            query=ctx.data_query,
            secret=ctx.data_secret,
        )
    return _statistics(ctx, order=record_order)


def _statistics(ctx: SiteContext, **options: Any) -> SiteStatistics:
    """:func:`~dpate.schemas.site_data.read_site_records` of the site's data, per its settings."""
    return read_site_records(
        ctx.spec,
        ctx.site_id,
        ctx.data_location,
        query=ctx.data_query,
        secret=ctx.data_secret,
        **options,
    )


# ---------------------------------------------------------------------------------------------
# One read for the pre-spend check and the release, in one process (``dpate run``)

_HELD_LOCK = threading.Lock()
#: the releases' reads made by the pre-spend check, by release; None outside :func:`shared_reads`
_held: dict[tuple[str, ...], SiteStatistics | SiteData] | None = None


def _read_key(ctx: SiteContext) -> tuple[str, ...]:
    return (ctx.rid, ctx.site_id, ctx.spec.spec_hash, str(ctx.data_location), ctx.data_query or "")


@contextmanager
def shared_reads() -> Iterator[None]:
    """Within the block, the pre-spend check (:func:`read_for_check`) reads each site's data as
    its release does and keeps it in this process's memory, and the release takes it
    (:func:`take_checked`) instead of reading again: one read per site for a whole embedded
    ``dpate run`` (this machine is every site). What is kept never leaves this process (no
    Prefect parameter, result or cache) and is dropped when the block ends. Outside the block
    (a deployed site, ``dpate check``, the library) every check and every release reads."""
    global _held
    with _HELD_LOCK:
        _held = {}
    try:
        yield
    finally:
        with _HELD_LOCK:
            _held = None


def read_for_check(ctx: SiteContext) -> SiteStatistics | SiteData:
    """The site's data validated as its release validates it (the same rules and words): within
    :func:`shared_reads`, the release's own read (:func:`read_for_release`), kept for it, or the
    one a check already made; elsewhere the counts only (no ordered pass: the feasibility rules
    need none). Raises :class:`~dpate.schemas.site_data.SiteDataError`."""
    key = _read_key(ctx)
    with _HELD_LOCK:
        sharing = _held is not None
        found = None if _held is None else _held.get(key)
    if found is not None:
        return found
    if not sharing:
        return _statistics(ctx, matching=False)
    data = read_for_release(ctx)
    with _HELD_LOCK:
        if _held is not None:
            _held[key] = data
    return data


def take_checked(ctx: SiteContext) -> SiteStatistics | SiteData | None:
    """The read the pre-spend check kept for this release (removed: a retry reads again), or
    None (not within :func:`shared_reads`, or not checked in this process)."""
    with _HELD_LOCK:
        return None if _held is None else _held.pop(_read_key(ctx), None)


def plan_from_records(
    spec: StudySpec, site_id: str, data: SiteData | SiteStatistics
) -> MechanismPlan:
    """The spec's mechanism on the site's statistics (a release) or validated records (tests and
    simulations; an order-dependent estimator gets its records in a fresh data-independent
    order). Pre-noise values: private."""
    est = spec.estimator_info
    common: dict[str, Any] = {
        "domain_size": spec.domain_size,
        "bound": spec.outcome.bound,
        "privacy": spec.site(site_id).privacy,
        "split": spec.budget_split(site_id).shares,
        "options": spec.study_options,  # one variant for the whole study
        "binary": spec.outcome.binary,
        "covariate_sizes": tuple(c.size for c in spec.binned_covariates),
    }
    unbinned = spec.unbinned_covariates
    if isinstance(data, SiteStatistics):
        if est.plan_from_statistics is None or unbinned:
            raise ValueError(
                f"estimator {est.name!r} plans only from records here (its own rule, or "
                f"covariates with public bounds and no bins): read the site's data with "
                f"dpate.schemas.site_data.prepare_site_data"
            )
        return est.plan_from_statistics(StatisticsInputs(data.cells, data.matching, **common))
    w, y, x, z = data.w, data.y, data.x, data.z
    if unbinned:
        if z is None or z.shape != (data.n, len(unbinned)):
            raise ValueError(
                f"the records carry no values for the covariates with public bounds and no bins "
                f"{[c.column for c in unbinned]}: read them with prepare_site_data"
            )
        common |= {"covariate_values": z, "covariate_bounds": tuple(c.bounds for c in unbinned)}
    if est.order_dependent:
        order = data_independent_order(data.n)
        w, y, x = w[order], y[order], x[order]
        if unbinned:
            common["covariate_values"] = z[order]  # type: ignore[index]
    return est.plan(PlanInputs(w, y, x, **common))


def balance_plan(
    spec: StudySpec,
    data: SiteData | SiteStatistics,
    committed: Mapping[str, Any] | None = None,
) -> BalancePlan:
    """The site's covariate-balance release (``[balance]``) from its per-cell counts (the
    engine's, or counted from validated records), or, in a study with numeric covariates with
    public bounds and no bins, from its validated records (each such covariate read in its
    public bins, :func:`dpate_core.balance.bin_levels`): pre-noise values, private.
    ``committed``: what the site's ledger recorded for the round's estimate (``{"estimate":
    public fields, "released": kept noisy values}``), from which an estimator with
    ``balance_bands`` takes the public bands its within column compares arms in (the
    propensity bands of the committed model, of every stratum, or of every record when a
    record's band depends on its numeric values; post-processing of that record only: nothing
    is refitted or redrawn)."""
    if spec.balance is None:
        raise ValueError("the study has no [balance] table: nothing to release")
    est = spec.estimator_info
    sizes = tuple(c.size for c in spec.binned_covariates)
    within: Any = spec.balance_within
    if spec.unbinned_covariates:
        if not isinstance(data, SiteData) or data.z is None:
            raise ValueError(
                "a balance table over covariates with public bounds and no bins reads their "
                "values: read the site's data with dpate.schemas.site_data.prepare_site_data"
            )
        bounds = tuple(c.bounds for c in spec.unbinned_covariates)
        banded = None
        if est.balance_bands is not None and committed is not None:
            inputs = BandInputs(sizes, data.x, data.z, bounds)
            banded = est.balance_bands(committed, spec.study_options, inputs)
        levels = _record_levels(spec, data.x, data.z)
        bands, n_bands = banded if banded is not None else (None, 1)
        return plan_balance_records(
            data.w, levels, spec.balance_layout, spec.balance.epsilon,
            bands=bands, n_bands=n_bands, within=within,
        )  # fmt: skip
    if isinstance(data, SiteStatistics):
        counts = np.asarray(data.cells.counts, dtype=np.int64)
    else:
        cells = 2 * np.asarray(data.x, dtype=np.int64) + np.asarray(data.w, dtype=np.int64)
        counts = np.bincount(cells, minlength=2 * spec.domain_size)
    banded = None
    if est.balance_bands is not None and committed is not None:
        banded = est.balance_bands(committed, spec.study_options, BandInputs(sizes))
    bands, n_bands = banded if banded is not None else (None, 1)
    return plan_balance(
        counts, spec.balance_layout, spec.balance.epsilon,
        bands=bands, n_bands=n_bands, within=within,
    )  # fmt: skip


def _record_levels(spec: StudySpec, x: np.ndarray, z: np.ndarray) -> list[np.ndarray]:
    """Every record's level of each covariate, in spec order: a binned covariate's from the
    stratum ``x`` (mixed radix, the first most significant), a covariate with bounds and no bins
    its public bin (:func:`dpate_core.balance.bin_levels`). Vectorised."""
    sizes = [c.size for c in spec.binned_covariates]
    strata = np.asarray(x, dtype=np.int64)
    out: list[np.ndarray] = []
    b = u = 0
    for c in spec.covariates:
        if c.kind == "categorical" or c.binned:
            out.append((strata // math.prod(sizes[b + 1 :])) % sizes[b])
            b += 1
        else:
            out.append(bin_levels(z[:, u], *c.bounds))
            u += 1
    return out
