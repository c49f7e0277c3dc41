"""The server's combiners of site estimates (post-processing: no privacy cost).

Every aggregator a study may name is an :class:`Aggregator` in the registry :data:`AGGREGATORS`
(:func:`register`, :func:`unregister`, :func:`aggregator_of`): MVAgg, AggAll, AggLargest,
inverse variance and random effects, each with ONE vectorised implementation. :func:`aggregate`
combines one set of site estimates into an :class:`AggregateResult`. A site may say which part
of its error it shares with every other site (``shared``: its sd, e.g. the propensity release's
residual-confounding allowance); the combined variance adds that part's cross terms
(:func:`shared_term`), which a weighted mean does not average out.
"""

from ._aggregate import (
    COMBINERS,
    AggregateResult,
    NoUsableSiteError,
    agg_all,
    agg_largest,
    aggregate,
    combiner,
    inverse_variance,
    mvagg,
    mvagg_brute_force,
    random_effects,
)
from ._parts import (
    many_inputs,
    scalar_inputs,
    shared_term,
    weighted_many,
    weighted_one,
)
from ._registry import (
    AGGREGATORS,
    UNRESOLVED,
    AggregateMany,
    Aggregator,
    Combination,
    RegistryView,
    Rows,
    aggregator_of,
    register,
    row_dot,
    unregister,
)

__all__ = [
    "AGGREGATORS",
    "COMBINERS",
    "UNRESOLVED",
    "AggregateMany",
    "AggregateResult",
    "Aggregator",
    "Combination",
    "NoUsableSiteError",
    "RegistryView",
    "Rows",
    "agg_all",
    "agg_largest",
    "aggregate",
    "aggregator_of",
    "combiner",
    "inverse_variance",
    "many_inputs",
    "mvagg",
    "mvagg_brute_force",
    "random_effects",
    "register",
    "row_dot",
    "scalar_inputs",
    "shared_term",
    "unregister",
    "weighted_many",
    "weighted_one",
]
