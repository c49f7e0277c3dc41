"""The aggregators a study may name, each declared once: what it is called, how it is drawn, what
the result document says about each site, and ONE vectorised implementation.

An :class:`Aggregator` holds

- ``name`` (the spec's ``aggregator = "..."``) and ``label`` (tables and figures);
- ``why_used`` / ``why_not_used``: the reason the result document gives for a site the combiner
  used, or left out although its report was valid (``tasks/aggregate.py``);
- ``style``: its matplotlib line style in the experiments' figures (``dpate/experiments/figures.py``);
- ``combine``: the combiner on ``(reps, J)`` arrays (:class:`Rows` in, :class:`Combination` out):
  which sites each row uses, their raw (unnormalised) weights, the per-site variance the reported
  variance is computed from, and per-row extra statistics.

The server's call (:meth:`Aggregator.one`, i.e. :func:`dpate_core.aggregation.aggregate`) is the
one-row case of ``combine``: unusable sites are excluded first (with their reasons, see
:mod:`dpate_core.aggregation`), ``combine`` runs on the one row of usable sites, and the weighted
mean is taken with the same floating-point operations as before the registry existed
(``w @ tau``), so published results keep their bytes. Simulations (:meth:`Aggregator.many`, i.e.
:func:`dpate_core.simulation.aggregate_many`) call ``combine`` on every row at once.

Adding an aggregator is one :func:`register` call (or one entry in :data:`AGGREGATORS` below): the
spec's choices, the aggregation task's wording and the experiments' labels and styles follow
(``docs/how-to/extending.md``).

The result types, a combiner's :class:`Rows` and :class:`Combination`, and the shared halves (the
inputs checked, the final weighted mean) are in :mod:`dpate_core.aggregation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np

from dpate_core.aggregation._parts import (
    UNRESOLVED,
    AggregateMany,
    AggregateResult,
    Combination,
    NoUsableSiteError,
    Rows,
    many_inputs,
    row_dot,
    scalar_inputs,
    shared_sds,
    shared_term,
    weighted_many,
    weighted_one,
)

__all__ = [
    "AGGREGATORS",
    "UNRESOLVED",
    "AggregateMany",
    "AggregateResult",
    "Aggregator",
    "Combination",
    "NoUsableSiteError",
    "RegistryView",
    "Rows",
    "aggregator_of",
    "register",
    "row_dot",
    "unregister",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Aggregator:
    """One server-side combiner as a study names it (see the module docstring)."""

    name: str
    label: str
    why_used: str
    combine: Callable[[Rows], Combination]
    why_not_used: str = "not used"
    #: matplotlib keywords: color, marker, ls
    style: Mapping[str, str] = field(default_factory=lambda: {"marker": "x", "ls": "-"})
    #: the paper's section or our docs, for the docstring of the scalar function
    reference: str = ""
    #: it chooses a subset of the sites by their reports (a plan predicts that subset without the
    #: sites it predicts uninformative)
    selects: bool = False

    def one(
        self, tau: Any, n: Any, variance: Any, resolved: Any = None, shared: Any = None
    ) -> AggregateResult:
        """The server's combination of one set of sites (see :mod:`dpate_core.aggregation`); a
        site not ``resolved`` is never combined (excluded as :data:`UNRESOLVED`). ``shared``:
        per site, the sd of the part of its error common to every site (in its own variance
        already), whose cross terms the combination's variance adds (:func:`shared_term`)."""
        t, nn, v, ok, excluded = scalar_inputs(tau, n, variance, resolved)
        rows = Rows(t[ok][None, :], nn[ok][None, :], v[ok][None, :], np.ones((1, ok.size), bool))
        comb = self.combine(rows)
        pick = np.flatnonzero(comb.chosen[0] & rows.ok[0])
        if pick.size == 0:
            raise NoUsableSiteError(f"{self.name} chose no site among {ok.size} usable ones")
        extra = {k: float(x[0]) for k, x in comb.extra.items()}
        tau_used, var_used, w_raw = t[ok][pick], comb.var[0][pick], comb.weights[0][pick]
        res = weighted_one(self.name, tau_used, var_used, ok[pick], w_raw, excluded, extra)
        b = shared_sds(shared, t.shape)
        if b is None:
            return res
        add = float(shared_term(np.asarray(res.weights), b[np.asarray(res.used, dtype=np.intp)]))
        return replace(res, variance=res.variance + add)

    def many(self, tau: Any, n: Any, variance: Any, shared: Any = None) -> AggregateMany:
        """Row by row, what :meth:`one` computes; a row with no usable site gives NaN. An
        unresolved site carries NaN in its row (``Outputs``), so it is never combined."""
        rows = many_inputs(tau, n, variance)
        comb = self.combine(rows)
        res = weighted_many(
            self.name, rows.tau, comb.var, comb.weights, comb.chosen & rows.ok, comb.extra
        )
        b = shared_sds(shared, rows.tau.shape)
        if b is None:
            return res
        return replace(res, variance=res.variance + shared_term(res.weights, b))


# ---------------------------------------------------------------------------------------------
# the combiners, each once, on (reps, J)


def _mvagg(r: Rows) -> Combination:
    """MVAgg (Algorithm 3), exact: sort the usable sites by ``N_j var_j`` ascending (stable), take
    the prefix minimising ``sum_{j<=k} N_j^2 var_j / (sum_{j<=k} N_j)^2`` (the first minimum, i.e.
    the shortest optimal prefix; correction 6: no search over 2^J subsets), weights ``N_j``."""
    key = np.where(r.ok, r.n * r.var, np.inf)
    order = np.argsort(key, axis=1, kind="stable")  # unusable sites sort last
    n_s = np.take_along_axis(r.n, order, axis=1)
    v_s = np.take_along_axis(r.var, order, axis=1)
    ok_s = np.take_along_axis(r.ok, order, axis=1)
    num = np.cumsum(np.where(ok_s, n_s**2 * v_s, 0.0), axis=1)
    den = np.cumsum(np.where(ok_s, n_s, 0.0), axis=1) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        objective = np.where(ok_s, num / den, np.inf)
    best = np.argmin(objective, axis=1)  # first minimum
    chosen_sorted = np.arange(r.tau.shape[1])[None, :] <= best[:, None]
    chosen = np.zeros_like(r.ok)
    np.put_along_axis(chosen, order, chosen_sorted, axis=1)
    return Combination(chosen & r.ok, r.n, r.var)


def _all(r: Rows) -> Combination:
    """AggAll: every usable site, weights ``N_j``."""
    return Combination(r.ok, r.n, r.var)


def _largest(r: Rows) -> Combination:
    """AggLargest: the usable site with the largest ``N_j`` (the first of equals, as the paper)."""
    j = np.argmax(np.where(r.ok, r.n, -np.inf), axis=1)
    pick = np.zeros_like(r.ok)
    pick[np.arange(r.tau.shape[0]), j] = True
    return Combination(pick & r.ok, np.ones_like(r.n), r.var)


def _inverse_variance(r: Rows) -> Combination:
    """Fixed-effect inverse-variance weighting: weights ``1/var_j``, variance
    ``1/sum(1/var_j)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(r.ok, 1.0 / r.var, 0.0)
    return Combination(r.ok, w, r.var)


def _random_effects(r: Rows) -> Combination:
    """DerSimonian-Laird random effects; ``extra`` holds Cochran's ``Q``, ``I^2`` and ``tau^2``.

    ``Q = sum w_j (tau_j - tau_FE)^2`` with ``w_j = 1/var_j``;
    ``tau^2 = max(0, (Q - (k-1)) / (sum w - sum w^2 / sum w))``; weights ``1/(var_j + tau^2)``;
    ``I^2 = max(0, (Q - (k-1)) / Q)``. The reported variance uses ``var_j + tau^2``.
    (A subnormal ``Q`` overflows ``(Q - (k-1)) / Q`` to ``-inf``: ``I^2`` is then 0, as it should.)
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = np.where(r.ok, 1.0 / r.var, 0.0)
        t = np.where(r.ok, r.tau, 0.0)
        sw = w.sum(axis=1)
        fe = row_dot(w, t) / sw
        q = row_dot(w, np.where(r.ok, t - fe[:, None], 0.0) ** 2)
        dof = r.ok.sum(axis=1) - 1
        c = sw - row_dot(w, w) / sw
        x = (q - dof) / c
        tau2 = np.where(c > 0, np.where(x > 0, x, 0.0), 0.0)
        tau2 = np.where(np.isfinite(tau2), tau2, 0.0)
        y = (q - dof) / q
        i2 = np.where(q > 0, np.where(y > 0, y, 0.0), 0.0)
        v_star = r.var + tau2[:, None]
        w_star = np.where(r.ok, 1.0 / v_star, 0.0)
    return Combination(r.ok, w_star, v_star, {"Q": q, "I2": i2, "tau2": tau2})


_REGISTRY: dict[str, Aggregator] = {}

#: every aggregator a study may name, by name (read-only; add one with :func:`register`)
AGGREGATORS: Mapping[str, Aggregator] = MappingProxyType(_REGISTRY)


class RegistryView(Mapping[str, T]):
    """``{name: pick(aggregator)}`` over the live registry (a registered aggregator appears), e.g.
    the scalar combiners ``RegistryView(lambda a: a.one)``."""

    def __init__(self, pick: Callable[[Aggregator], T]) -> None:
        self._pick = pick

    def __getitem__(self, name: str) -> T:
        return self._pick(_REGISTRY[name])

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


def register(aggregator: Aggregator) -> Aggregator:
    """Add ``aggregator`` to :data:`AGGREGATORS` (refused if its name is taken); returns it."""
    if aggregator.name in _REGISTRY:
        raise ValueError(f"aggregator {aggregator.name!r} is already registered: pick another name")
    _REGISTRY[aggregator.name] = aggregator
    return aggregator


def unregister(name: str) -> None:
    """Remove an aggregator (for tests that register a toy one)."""
    _REGISTRY.pop(name, None)


def aggregator_of(name: str) -> Aggregator:
    """The aggregator called ``name``, or an error listing the valid names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"aggregator ({name!r}) is not one of {sorted(_REGISTRY)}") from None


for _agg in (
    Aggregator(
        name="mvagg",
        label="MVAgg",
        why_used=(
            "in the subset minimising sum_j (N_j/N_I)^2 var_j (MVAgg, Algorithm 3); weight N_j/N_I"
        ),
        why_not_used=(
            "MVAgg left it out: adding it would raise the variance of the combined estimate"
        ),
        style={"color": "#d62728", "marker": "o", "ls": "-"},
        combine=_mvagg,
        reference="Algorithm 3; correction 6",
        selects=True,
    ),
    Aggregator(
        name="all",
        label="AggAll",
        why_used="AggAll uses every valid report; weight N_j/N",
        style={"color": "#1f77b4", "marker": "s", "ls": "-"},
        combine=_all,
        reference="section 4 (baseline)",
    ),
    Aggregator(
        name="largest",
        label="AggLargest",
        why_used="the largest N_j (AggLargest)",
        why_not_used="AggLargest uses only the site with the largest N_j",
        style={"color": "#2ca02c", "marker": "^", "ls": "-"},
        combine=_largest,
        reference="section 4 (baseline)",
        selects=True,
    ),
    Aggregator(
        name="inverse_variance",
        label="Inverse variance",
        why_used="inverse-variance weight 1/var_j",
        style={"color": "#9467bd", "marker": "v", "ls": "--"},
        combine=_inverse_variance,
        reference="fixed-effect meta-analysis",
    ),
    Aggregator(
        name="random_effects",
        label="Random effects (DL)",
        why_used="random-effects weight 1/(var_j + tau^2) (DerSimonian-Laird)",
        style={"color": "#8c564b", "marker": "D", "ls": ":"},
        combine=_random_effects,
        reference="DerSimonian and Laird (1986)",
    ),
):
    register(_agg)
