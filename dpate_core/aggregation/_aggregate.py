"""Server-side combiners of site estimates (post-processing: no privacy cost).

Every combiner takes ``tau``, ``n`` and ``variance`` per site and returns an
:class:`AggregateResult` with the estimate, its variance, a 95% confidence interval and which sites
were used. Each is declared once, in :mod:`dpate_core.aggregation` (name, label, wording, plot
style and one vectorised implementation); the functions here are its one-row case, kept under
their historical names.

Rule for unusable sites: a site whose release is not resolved (``resolved``, see
:attr:`dpate_core.release.SiteEstimate.resolved`: its ``tau`` and ``variance`` are NaN), whose
``tau`` or ``variance`` is not finite, whose variance is not positive, or whose ``n`` is not a
finite number >= 1, is excluded before combining and listed in ``excluded`` (site index -> reason:
"unresolved at this budget" for the first; a released variance always includes the positive
DP-noise term, so a non-positive one is malformed). If no site is usable,
:class:`NoUsableSiteError` (a ``ValueError``) is raised: the combination has no answer.

>>> res = aggregate("all", [1.0, 3.0], [10, 30], [0.5, 0.5])
>>> res.estimate, res.used, res.weights
(2.5, (0, 1), (0.25, 0.75))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from itertools import combinations
from typing import Any

import numpy as np

from dpate_core.aggregation._parts import scalar_inputs, weighted_one
from dpate_core.aggregation._registry import (
    AggregateResult,
    NoUsableSiteError,
    RegistryView,
    aggregator_of,
)

__all__ = [
    "AggregateResult",
    "NoUsableSiteError",
    "agg_all",
    "agg_largest",
    "aggregate",
    "combiner",
    "inverse_variance",
    "mvagg",
    "mvagg_brute_force",
    "random_effects",
]

Combiner = Callable[[Any, Any, Any], AggregateResult]


#: ``{name: combiner}`` for every registered aggregator (:data:`dpate_core.aggregation.AGGREGATORS`)
COMBINERS: Mapping[str, Combiner] = RegistryView(lambda a: a.one)


def mvagg(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """MVAgg (Algorithm 3), exact: the subset ``I`` minimising
    ``sum_{j in I} (N_j / N_I)^2 var_j``, then the ``N_j``-weighted mean over ``I``.

    No search over 2^J subsets (correction 6): an optimal set is a prefix of the sites sorted by
    ``N_j var_j`` ascending, so sorting and one pass of prefix sums find it in O(J log J). Ties in
    the objective go to the shortest prefix.
    """
    return aggregator_of("mvagg").one(tau, n, variance)


def mvagg_brute_force(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """Algorithm 3 literally (all 2^J - 1 subsets). For tests and the benchmark only."""
    t, nn, var, ok, excluded = scalar_inputs(tau, n, variance)
    best_val, best_set = math.inf, ok[:1]
    for size in range(1, ok.size + 1):
        for subset in combinations(ok.tolist(), size):
            s = np.array(subset)
            val = float((nn[s] ** 2) @ var[s] / nn[s].sum() ** 2)
            if val < best_val:
                best_val, best_set = val, s
    return weighted_one("mvagg", t[best_set], var[best_set], best_set, nn[best_set], excluded)


def agg_all(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """AggAll: the ``N_j``-weighted mean of every usable site."""
    return aggregator_of("all").one(tau, n, variance)


def agg_largest(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """AggLargest: the site with the largest ``N_j`` (the first of equals, as in the paper)."""
    return aggregator_of("largest").one(tau, n, variance)


def inverse_variance(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """Fixed-effect inverse-variance weighting: weights ``1/var_j``, variance ``1/sum(1/var_j)``."""
    return aggregator_of("inverse_variance").one(tau, n, variance)


def random_effects(tau: Any, n: Any, variance: Any) -> AggregateResult:
    """DerSimonian-Laird random effects; ``extra`` holds Cochran's ``Q``, ``I^2`` and ``tau^2``.

    ``Q = sum w_j (tau_j - tau_FE)^2`` with ``w_j = 1/var_j``;
    ``tau^2 = max(0, (Q - (k-1)) / (sum w - sum w^2 / sum w))``; weights ``1/(var_j + tau^2)``;
    ``I^2 = max(0, (Q - (k-1)) / Q)``. The reported variance is ``1 / sum 1/(var_j + tau^2)``.
    """
    return aggregator_of("random_effects").one(tau, n, variance)


def combiner(table: Mapping[str, Callable[..., Any]], method: str) -> Callable[..., Any]:
    """The combiner named ``method`` in ``table``, or an error listing the valid names."""
    try:
        return table[method]
    except KeyError:
        raise ValueError(f"aggregator ({method!r}) is not one of {sorted(table)}") from None


def aggregate(
    method: str, tau: Any, n: Any, variance: Any, resolved: Any = None, shared: Any = None
) -> AggregateResult:
    """Dispatch by the study spec's aggregator name; ``resolved`` (one flag per site, default
    all True) marks the sites whose release resolved an estimate: the others are excluded.
    ``shared`` (one sd per site, default none): the part of each site's error common to every
    site, whose cross terms the combined variance adds (``dpate_core.aggregation.shared_term``)."""
    return aggregator_of(method).one(tau, n, variance, resolved, shared)
