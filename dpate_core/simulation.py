"""Vectorised simulation of the released mechanisms and of the server's combiners.

Simulations only. Noise comes from a seeded :class:`numpy.random.Generator` passed in explicitly:
it is **not** private and must never be used for a release (releases draw secure noise through
:func:`dpate_core.release.draw_once` with ``rng=None``).

Two halves:

* :func:`simulate_site`: ``reps`` draws of one site's release from its
  :class:`~dpate_core.release.MechanismPlan` (``draw_many`` then the plan's own ``assemble``), so a
  simulation measures exactly the mechanism that is released. The plan, and with it the matching
  statistics and the smooth sensitivities, is computed once per site and privacy budget.
* Combiners on ``(reps, J)`` arrays: :func:`aggregate_many` (by an aggregator's name) runs the
  one vectorised implementation each aggregator declares in :mod:`dpate_core.aggregation` (its
  scalar functions are the one-row case; tests hold them equal on random inputs), including the
  rule for unusable sites: a site whose estimate or variance is not finite (an unresolved release
  carries NaN, ``Outputs``), or whose variance is not positive, is left out of that row. A row
  with no usable site gives NaN: no answer (where the scalar function raises
  :class:`NoUsableSiteError`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.aggregation import AggregateMany, RegistryView, aggregator_of
from dpate_core.privacy import Number, exact
from dpate_core.release import MechanismPlan, draw_many

CombinerMany = Callable[[Any, Any, Any], AggregateMany]

__all__ = [
    "COMBINERS_MANY",
    "SiteDraws",
    "StudyDraws",
    "aggregate_many",
    "rational_power_floor",
    "simulate_site",
    "simulate_sites",
    "simulate_study",
    "site_epsilons",
]


@dataclass(frozen=True)
class SiteDraws:
    """``reps`` simulated releases of one site: ``tau[r]`` and ``variance[r]`` as released, and
    ``shared[r]`` the shared sd it publishes (``diagnostics["shared_sd"]``, 0 where none: the
    part of its error common to every site, which the combiners read)."""

    n: int
    tau: np.ndarray
    variance: np.ndarray
    shared: np.ndarray


@dataclass(frozen=True)
class StudyDraws:
    """Independent releases of every site of a study, ``(reps, J)`` arrays ready for the
    ``*_many`` combiners: ``tau``, ``variance`` and ``shared`` (:class:`SiteDraws`), and ``n``
    (``(J,)``)."""

    tau: np.ndarray
    n: np.ndarray
    variance: np.ndarray
    shared: np.ndarray


def simulate_site(
    plan: MechanismPlan, rng: np.random.Generator, reps: int, *, published: bool = True
) -> SiteDraws:
    """``reps`` independent releases of ``plan`` (simulation noise from ``rng``, not secure): as
    published (``tau`` clipped to ``[-B, B]``, NaN where unresolved), or with ``published=False``
    the mechanism's own outputs before that step (``plan.assembly``: the paper's
    estimators as the paper defines them, which do not clip)."""
    if reps < 1:
        raise ValueError(f"reps ({reps}) must be at least 1")
    assemble = plan.assemble if published else plan.assembly
    out = assemble(draw_many(plan, rng, reps))
    tau = np.broadcast_to(np.asarray(out.tau, dtype=np.float64), (reps,)).copy()
    var = np.broadcast_to(np.asarray(out.variance, dtype=np.float64), (reps,)).copy()
    b = np.asarray(out.diagnostics.get("shared_sd", 0.0), dtype=np.float64) if published else 0.0
    shared = np.nan_to_num(np.broadcast_to(b, (reps,)), nan=0.0, posinf=0.0, neginf=0.0)
    return SiteDraws(n=plan.n, tau=tau, variance=var, shared=shared)


def simulate_sites(
    plans: Sequence[MechanismPlan],
    rng: np.random.Generator,
    reps: int,
    *,
    published: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independent releases of every site: ``(tau, n, variance)`` with ``tau`` and ``variance`` of
    shape ``(reps, J)`` and ``n`` of shape ``(J,)``, ready for the ``*_many`` combiners
    (``published``: see :func:`simulate_site`; the shared sds too: :func:`simulate_study`)."""
    d = simulate_study(plans, rng, reps, published=published)
    return d.tau, d.n, d.variance


def simulate_study(
    plans: Sequence[MechanismPlan],
    rng: np.random.Generator,
    reps: int,
    *,
    published: bool = True,
) -> StudyDraws:
    """:func:`simulate_sites` with the shared sds every release publishes (:class:`StudyDraws`:
    pass ``shared`` to :func:`aggregate_many` to combine as the server does)."""
    draws = [simulate_site(p, rng, reps, published=published) for p in plans]
    stack = [
        np.stack([getattr(d, k) for d in draws], axis=1) for k in ("tau", "variance", "shared")
    ]
    n = np.array([d.n for d in draws], dtype=np.float64)
    return StudyDraws(tau=stack[0], n=n, variance=stack[1], shared=stack[2])


#: ``{name: vectorised combiner}`` for every registered aggregator
COMBINERS_MANY: Mapping[str, CombinerMany] = RegistryView(lambda a: a.many)


def aggregate_many(
    method: str, tau: Any, n: Any, variance: Any, shared: Any = None
) -> AggregateMany:
    """Dispatch by the same names as :func:`dpate_core.aggregation.aggregate`."""
    return aggregator_of(method).many(tau, n, variance, shared)


# ---------------------------------------------------------------------------------------------
# The paper's privacy sweep: eps_j = alpha^((j-1)/(J-1)) eps_1, held exactly


def _iroot(value: int, q: int) -> int | None:
    """The exact integer ``q``-th root of ``value >= 0``, or None when there is none."""
    if value < 2**52:
        r = round(value ** (1.0 / q))
        candidates: tuple[int, ...] = (r - 1, r, r + 1)
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
