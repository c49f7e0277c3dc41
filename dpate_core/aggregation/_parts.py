"""What every aggregator of :mod:`dpate_core.aggregation` shares: the result types (one
combination, :class:`AggregateResult`; many rows, :class:`AggregateMany`), a combiner's inputs and
decision (:class:`Rows`, :class:`Combination`), and the two halves around a combiner: the inputs
checked (one set of sites, or ``(reps, J)`` rows) and the final weighted mean.

The names are importable from :mod:`dpate_core.aggregation` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.intervals import normal_interval

__all__ = [
    "UNRESOLVED",
    "AggregateMany",
    "AggregateResult",
    "Combination",
    "NoUsableSiteError",
    "Rows",
    "many_inputs",
    "row_dot",
    "scalar_inputs",
    "weighted_many",
    "weighted_one",
]

Array = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


#: why a combiner leaves out a site whose release is not resolved (``SiteEstimate.resolved``)
UNRESOLVED = "unresolved at this budget"


class NoUsableSiteError(ValueError):
    """No site has a resolved, finite estimate with a finite, positive variance."""


@dataclass(frozen=True)
class AggregateResult:
    """One combination (the server's): the estimate, its variance, the sites used (indices into
    the inputs, ascending) with their normalised weights, the excluded sites with the reason, and
    the combiner's extra statistics."""

    method: str
    estimate: float
    variance: float
    used: tuple[int, ...]
    weights: tuple[float, ...]
    excluded: dict[int, str] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ci95(self) -> tuple[float, float]:
        return self.conf_int(0.95)

    def conf_int(self, level: float = 0.95) -> tuple[float, float]:
        return normal_interval(self.estimate, self.variance, level)


@dataclass(frozen=True)
class AggregateMany:
    """Per repetition: the combined ``estimate``, its reported ``variance`` and the ``weights``
    (shape ``(reps, J)``, zero for sites not used; each row sums to 1); ``extra``: the combiner's
    per-row statistics (e.g. random effects' ``Q``, ``I2``, ``tau2``)."""

    method: str
    estimate: Array
    variance: Array
    weights: Array
    extra: dict[str, Array] = field(default_factory=dict)

    @property
    def used(self) -> Mask:
        """Boolean ``(reps, J)``: which sites each repetition used."""
        return self.weights > 0


@dataclass(frozen=True)
class Rows:
    """The inputs of a combiner, all of shape ``(reps, J)``: estimates, sample sizes, variances,
    and ``ok`` (the site is usable in that row). Values where ``ok`` is False are arbitrary
    (possibly NaN): a combiner must not let them reach a usable site's numbers."""

    tau: Array
    n: Array
    var: Array
    ok: Mask


@dataclass(frozen=True)
class Combination:
    """What a combiner decides, per row: ``chosen`` sites (a subset of ``ok``), their raw weights
    (normalised afterwards; values outside ``chosen`` are ignored), the per-site ``var`` the
    reported variance ``sum w_j^2 var_j`` uses, and ``extra`` statistics of shape ``(reps,)``."""

    chosen: Mask
    weights: Array
    var: Array
    extra: dict[str, Array] = field(default_factory=dict)


def row_dot(a: Array, b: Array) -> Array:
    """``a[r] @ b[r]`` for every row, through the same BLAS dot as a 1-d ``a @ b`` (so the one-row
    case has the bits of the scalar code)."""
    out: Array = np.matmul(a[:, None, :], b[:, :, None])[:, 0, 0]
    return out


# ---------------------------------------------------------------------------------------------
# the shared halves: inputs and the final weighted mean


def scalar_inputs(
    tau: Any, n: Any, variance: Any, resolved: Any = None
) -> tuple[Array, Array, Array, npt.NDArray[np.intp], dict[int, str]]:
    """Check one set of sites; returns the arrays, the usable indices and the excluded reasons.

    ``resolved`` (one bool per site, default all True): a site whose release is not resolved is
    excluded with the reason :data:`UNRESOLVED` (its ``tau`` and ``variance`` are NaN anyway)."""
    t = np.asarray(tau, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    if not (t.ndim == 1 and t.shape == nn.shape == var.shape):
        raise ValueError("tau, n and variance must be 1-d arrays of one length")
    unresolved = np.zeros(t.shape, bool) if resolved is None else ~np.asarray(resolved, bool)
    if unresolved.shape != t.shape:
        raise ValueError("resolved must hold one flag per site")
    if t.size == 0:
        raise NoUsableSiteError("no site estimates to aggregate")
    excluded: dict[int, str] = {}
    bad_tau = ~np.isfinite(t)
    bad_n = ~(np.isfinite(nn) & (nn >= 1))
    bad_var = ~np.isfinite(var) | (var <= 0)
    for j in np.flatnonzero(unresolved | bad_tau | bad_n | bad_var):
        why = []
        if unresolved[j]:
            why.append(UNRESOLVED)
        elif bad_tau[j]:
            why.append("estimate is not finite")
        if bad_n[j]:
            why.append("sample size is not a finite number >= 1")
        if bad_var[j] and not unresolved[j]:
            why.append("variance is not finite and positive")
        excluded[int(j)] = "; ".join(why)
    ok = np.flatnonzero(~(unresolved | bad_tau | bad_n | bad_var))
    if ok.size == 0:
        if unresolved.all():
            raise NoUsableSiteError(
                f"none of the {t.size} sites resolved its estimate: all {UNRESOLVED}"
            )
        raise NoUsableSiteError(
            f"none of the {t.size} sites has a resolved, finite estimate with a finite positive "
            f"variance"
        )
    return t, nn, var, ok, excluded


def weighted_one(
    method: str,
    tau: Array,
    var: Array,
    idx: npt.NDArray[np.intp],
    weights: Array,
    excluded: dict[int, str],
    extra: dict[str, float] | None = None,
) -> AggregateResult:
    """The weighted mean of the chosen sites (``tau``, ``var`` and ``weights`` of the chosen sites,
    ``idx`` their input positions): ``w = weights / sum``, estimate ``w @ tau``, variance
    ``(w * w) @ var``."""
    w = weights / weights.sum()
    est = float(w @ tau)
    variance = float((w * w) @ var)
    return AggregateResult(
        method=method,
        estimate=est,
        variance=variance,
        # tolist() converts in C: 4x faster than a generator of int()/float() at J = 10^6
        used=tuple(np.asarray(idx, dtype=np.int64).tolist()),
        weights=tuple(np.asarray(w, dtype=np.float64).tolist()),
        excluded=excluded,
        extra=extra or {},
    )


def many_inputs(tau: Any, n: Any, variance: Any) -> Rows:
    t = np.asarray(tau, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    if t.ndim != 2 or var.shape != t.shape:
        raise ValueError("tau and variance must be arrays of shape (reps, J)")
    nn = np.broadcast_to(np.asarray(n, dtype=np.float64), t.shape)
    ok = np.isfinite(t) & np.isfinite(var) & (var > 0) & np.isfinite(nn) & (nn >= 1)
    return Rows(t, nn, var, ok)


def weighted_many(
    method: str,
    tau: Array,
    var: Array,
    raw_weights: Array,
    ok: Mask,
    extra: dict[str, Array] | None = None,
) -> AggregateMany:
    """Normalise ``raw_weights`` (zero outside ``ok``) per row; rows with no usable site -> NaN."""
    w = np.where(ok, raw_weights, 0.0)
    total = w.sum(axis=1, keepdims=True)
    empty: Mask = ~np.any(ok, axis=1, keepdims=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = w / np.where(empty[:, None], 1.0, total)
    t = np.where(ok, tau, 0.0)
    v = np.where(ok, var, 0.0)
    est = (w * t).sum(axis=1)
    variance = (w * w * v).sum(axis=1)
    est[empty] = np.nan
    variance[empty] = np.nan
    return AggregateMany(method, est, variance, w, dict(extra or {}))


def shared_term(weights: Array, shared: Array) -> Array:
    """The variance a part of the sites' errors common to all of them adds to a weighted mean
    beyond what the sites' own variances carry: ``(sum_j w_j b_j)^2 - sum_j w_j^2 b_j^2 = sum_{i
    != j} w_i w_j b_i b_j`` (``b_j`` the sd of site ``j``'s common part, already in its own
    variance; the parts fully correlated: a bias the sites share, such as the residual
    confounding that subclassification leaves, which combining does not average out). Over the
    last axis; 0 where every ``b_j`` is 0."""
    wb = weights * shared
    return np.asarray(np.sum(wb, axis=-1) ** 2 - np.sum(wb * wb, axis=-1), dtype=np.float64)


def shared_sds(shared: Any, shape: tuple[int, ...]) -> Array | None:
    """``shared`` (one sd per site, or per row and site) as an array of ``shape``, non-finite
    entries 0 (an unresolved site is never combined); None when absent or all 0 (nothing to
    add: the combination's variance keeps its bytes)."""
    if shared is None:
        return None
    b = np.broadcast_to(np.asarray(shared, dtype=np.float64), shape)
    b = np.where(np.isfinite(b), b, 0.0)
    if np.any(b < 0):
        raise ValueError("a shared sd must not be negative")
    return b if np.any(b > 0) else None
