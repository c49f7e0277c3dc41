"""Vectorised simulation of the released mechanisms and of the server's combiners.

Simulations only. Noise comes from a seeded :class:`numpy.random.Generator` passed in explicitly:
it is **not** private and must never be used for a release (releases draw secure noise through
:func:`dpate_core.release.draw_once` with ``rng=None``).

Two halves:

* :func:`simulate_site`: ``reps`` draws of one site's release from its
  :class:`~dpate_core.release.MechanismPlan` (``draw_many`` then the plan's own ``assemble``), so a
  simulation measures exactly the mechanism that is released. The plan, and with it the matching
  statistics and the smooth sensitivities, is computed once per site and privacy budget.
* Combiners on ``(reps, J)`` arrays: :func:`mvagg_many`, :func:`agg_all_many`,
  :func:`agg_largest_many`, :func:`inverse_variance_many` and :func:`random_effects_many` compute,
  row by row, the same thing as the scalar functions of :mod:`dpate_core.aggregation` (tests hold
  them equal on random inputs), including the rule for unusable sites: a site whose estimate or
  variance is not finite, or whose variance is not positive, is left out of that row. A row with
  no usable site gives NaN (where the scalar function raises :class:`NoUsableSiteError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

import numpy as np

from dpate_core.aggregation import combiner
from dpate_core.privacy import Number, exact
from dpate_core.release import MechanismPlan, draw_many

__all__ = [
    "AGGREGATORS_MANY",
    "AggregateMany",
    "SiteDraws",
    "agg_all_many",
    "agg_largest_many",
    "aggregate_many",
    "inverse_variance_many",
    "mvagg_many",
    "random_effects_many",
    "rational_power_floor",
    "simulate_site",
    "simulate_sites",
    "site_epsilons",
]


@dataclass(frozen=True)
class SiteDraws:
    """``reps`` simulated releases of one site: ``tau[r]`` and ``variance[r]`` as released."""

    n: int
    tau: np.ndarray
    variance: np.ndarray


def simulate_site(plan: MechanismPlan, rng: np.random.Generator, reps: int) -> SiteDraws:
    """``reps`` independent releases of ``plan`` (simulation noise from ``rng``, not secure)."""
    if reps < 1:
        raise ValueError(f"reps ({reps}) must be at least 1")
    out = plan.assemble(draw_many(plan, rng, reps))
    tau = np.broadcast_to(np.asarray(out.tau, dtype=np.float64), (reps,)).copy()
    var = np.broadcast_to(np.asarray(out.variance, dtype=np.float64), (reps,)).copy()
    return SiteDraws(n=plan.n, tau=tau, variance=var)


def simulate_sites(
    plans: Sequence[MechanismPlan], rng: np.random.Generator, reps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independent releases of every site: ``(tau, n, variance)`` with ``tau`` and ``variance`` of
    shape ``(reps, J)`` and ``n`` of shape ``(J,)``, ready for the ``*_many`` combiners."""
    draws = [simulate_site(p, rng, reps) for p in plans]
    tau = np.stack([d.tau for d in draws], axis=1)
    var = np.stack([d.variance for d in draws], axis=1)
    n = np.array([d.n for d in draws], dtype=np.float64)
    return tau, n, var


@dataclass(frozen=True)
class AggregateMany:
    """Per repetition: the combined ``estimate``, its reported ``variance`` and the ``weights``
    (shape ``(reps, J)``, zero for sites not used; each row sums to 1)."""

    method: str
    estimate: np.ndarray
    variance: np.ndarray
    weights: np.ndarray

    @property
    def used(self) -> np.ndarray:
        """Boolean ``(reps, J)``: which sites each repetition used."""
        return self.weights > 0


def _inputs_many(tau, n, variance):
    tau = np.asarray(tau, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    if tau.ndim != 2 or var.shape != tau.shape:
        raise ValueError("tau and variance must be arrays of shape (reps, J)")
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), tau.shape)
    ok = np.isfinite(tau) & np.isfinite(var) & (var > 0) & np.isfinite(n) & (n >= 1)
    return tau, n, var, ok


def _weighted_many(method, tau, var, raw_weights, ok) -> AggregateMany:
    """Normalise ``raw_weights`` (zero outside ``ok``) per row; rows with no usable site -> NaN."""
    w = np.where(ok, raw_weights, 0.0)
    total = w.sum(axis=1, keepdims=True)
    empty = ~ok.any(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = w / np.where(empty[:, None], 1.0, total)
    t = np.where(ok, tau, 0.0)
    v = np.where(ok, var, 0.0)
    est = (w * t).sum(axis=1)
    variance = (w * w * v).sum(axis=1)
    est[empty] = np.nan
    variance[empty] = np.nan
    return AggregateMany(method, est, variance, w)


def mvagg_many(tau, n, variance) -> AggregateMany:
    """MVAgg (Algorithm 3) per row, exact: sort sites by ``N_j var_j`` ascending (stable), take the
    prefix minimising ``sum_{j<=k} N_j^2 var_j / (sum_{j<=k} N_j)^2`` (the first minimum, i.e. the
    shortest optimal prefix; ERRATA section 6), then the ``N_j``-weighted mean over it."""
    tau, n, var, ok = _inputs_many(tau, n, variance)
    key = np.where(ok, n * var, np.inf)
    order = np.argsort(key, axis=1, kind="stable")  # unusable sites sort last
    n_s = np.take_along_axis(n, order, axis=1)
    v_s = np.take_along_axis(var, order, axis=1)
    ok_s = np.take_along_axis(ok, order, axis=1)
    num = np.cumsum(np.where(ok_s, n_s * n_s * v_s, 0.0), axis=1)
    den = np.cumsum(np.where(ok_s, n_s, 0.0), axis=1) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        objective = np.where(ok_s, num / den, np.inf)
    best = np.argmin(objective, axis=1)  # first minimum
    chosen_sorted = np.arange(tau.shape[1])[None, :] <= best[:, None]
    chosen = np.zeros_like(ok)
    np.put_along_axis(chosen, order, chosen_sorted, axis=1)
    chosen &= ok
    return _weighted_many("mvagg", tau, var, n, chosen)


def agg_all_many(tau, n, variance) -> AggregateMany:
    """AggAll per row: the ``N_j``-weighted mean of every usable site."""
    tau, n, var, ok = _inputs_many(tau, n, variance)
    return _weighted_many("all", tau, var, n, ok)


def agg_largest_many(tau, n, variance) -> AggregateMany:
    """AggLargest per row: the usable site with the largest ``N_j`` (the first of equals)."""
    tau, n, var, ok = _inputs_many(tau, n, variance)
    j = np.argmax(np.where(ok, n, -np.inf), axis=1)
    pick = np.zeros_like(ok)
    pick[np.arange(tau.shape[0]), j] = True
    return _weighted_many("largest", tau, var, np.ones_like(n), pick & ok)


def inverse_variance_many(tau, n, variance) -> AggregateMany:
    """Fixed-effect inverse-variance weighting per row: weights ``1 / var_j``."""
    tau, n, var, ok = _inputs_many(tau, n, variance)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(ok, 1.0 / var, 0.0)
    return _weighted_many("inverse_variance", tau, var, w, ok)


def random_effects_many(tau, n, variance) -> AggregateMany:
    """DerSimonian-Laird random effects per row (see :func:`dpate_core.aggregation.random_effects`):
    ``tau^2 = max(0, (Q - (k-1)) / (sum w - sum w^2 / sum w))`` with ``w_j = 1/var_j`` and ``k`` the
    number of usable sites, weights ``1 / (var_j + tau^2)``; reported variance uses
    ``var_j + tau^2``."""
    tau, n, var, ok = _inputs_many(tau, n, variance)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(ok, 1.0 / var, 0.0)
        sw = w.sum(axis=1)
        fe = (w * np.where(ok, tau, 0.0)).sum(axis=1) / sw
        q = (w * np.where(ok, tau - fe[:, None], 0.0) ** 2).sum(axis=1)
        dof = ok.sum(axis=1) - 1
        c = sw - (w * w).sum(axis=1) / sw
        tau2 = np.where(c > 0, np.maximum(0.0, (q - dof) / c), 0.0)
        tau2 = np.where(np.isfinite(tau2), tau2, 0.0)
        v_star = var + tau2[:, None]
        w_star = np.where(ok, 1.0 / v_star, 0.0)
    return _weighted_many("random_effects", tau, v_star, w_star, ok)


AGGREGATORS_MANY: dict[str, Callable[..., AggregateMany]] = {
    "mvagg": mvagg_many,
    "all": agg_all_many,
    "largest": agg_largest_many,
    "inverse_variance": inverse_variance_many,
    "random_effects": random_effects_many,
}


def aggregate_many(method: str, tau, n, variance) -> AggregateMany:
    """Dispatch by the same names as :func:`dpate_core.aggregation.aggregate`."""
    return combiner(AGGREGATORS_MANY, method)(tau, n, variance)


# ---------------------------------------------------------------------------------------------
# The paper's privacy sweep: eps_j = alpha^((j-1)/(J-1)) eps_1, held exactly


def _iroot(value: int, q: int) -> int | None:
    """The exact integer ``q``-th root of ``value >= 0``, or None when there is none."""
    if value < 2**52:
        r = round(value ** (1.0 / q))
        candidates = (r - 1, r, r + 1)
    else:  # Newton's method on integers: the floor of the root
        x = 1 << ((value.bit_length() + q - 1) // q)
        while True:
            y = ((q - 1) * x + value // x ** (q - 1)) // q
            if y >= x:
                break
            x = y
        candidates = (x,)
    return next((c for c in candidates if c >= 0 and c**q == value), None)


def rational_power_floor(base: Fraction, p: int, q: int, digits: int = 6) -> Fraction:
    """``base^(p/q)`` exactly when it is rational, else the largest number with ``digits``
    significant decimal digits that does not exceed it (never rounded up).

    Exactness is checked with integers: ``r`` is returned only if ``r^q <= base^p``.
    """
    base = Fraction(base)
    if base <= 0:
        raise ValueError(f"base ({base}) must be positive")
    if q < 1 or p < 0:
        raise ValueError(f"exponent {p}/{q} must have p >= 0 and q >= 1")
    if digits < 1:
        raise ValueError(f"digits ({digits}) must be at least 1")
    target = base**p
    num, den = _iroot(target.numerator, q), _iroot(target.denominator, q)
    if num is not None and den is not None:
        return Fraction(num, den)
    with localcontext() as ctx:
        ctx.prec = digits + 30
        approx = (Decimal(target.numerator) / Decimal(target.denominator)) ** (
            Decimal(1) / Decimal(q)
        )
        exponent = approx.adjusted() - (digits - 1)
        quantum = Decimal(1).scaleb(exponent)
        r = Fraction(approx.quantize(quantum, rounding=ROUND_FLOOR))
    step = Fraction(quantum)
    while r**q > target:  # guard the Decimal rounding: step down until provably below
        r -= step
    return r


def site_epsilons(
    epsilon_1: Number, alpha: Number, n_sites: int, digits: int = 6
) -> tuple[Fraction, ...]:
    """The paper's sweep (section 4.1): ``eps_j = alpha^((j-1)/(J-1)) eps_1`` for ``j = 1..J``.

    Exact Fractions. Where ``alpha^((j-1)/(J-1))`` is irrational (``sqrt(2)`` for ``J = 3``,
    ``alpha = 2``) it is rounded **down** to ``digits`` significant digits, so no site ever spends
    more than the sweep says.
    """
    if n_sites < 1:
        raise ValueError(f"n_sites ({n_sites}) must be at least 1")
    e1, a = exact(epsilon_1, "epsilon_1"), exact(alpha, "alpha")
    if e1 <= 0 or a <= 0:
        raise ValueError(f"epsilon_1 ({e1}) and alpha ({a}) must be positive")
    if n_sites == 1:
        return (e1,)
    return tuple(e1 * rational_power_floor(a, j, n_sites - 1, digits) for j in range(n_sites))
