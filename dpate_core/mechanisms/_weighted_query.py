"""One scalar query of a weighted sum over a release's cells, on a public grid (stop 46).

A release whose estimate is linear in its cells' statistics given noisy values drawn before
(the propensity release's corrected estimate in the band cells' sums; the adjusted release's
fixed-effects numerator and denominator) can release that linear combination as one scalar
query. Its coefficients are post-processing of the earlier noisy outputs; normalised by the
query's sensitivity ``S`` (the largest contribution one record can make less the smallest,
public: a function of those outputs and the public bounds) the value has sensitivity 1. It is
rounded to the grid ``2^-QUERY_BITS`` and noised with the exact discrete Laplace at scale
``(2^QUERY_BITS + margin) / eps`` grid units: the rounding moves a value by at most half a unit,
and the float evaluation of a sum of ``cells`` products whose normalised terms total at most
``N`` errs by at most ``(2 cells + 4) N 2^-53`` of the normalised value
(:func:`query_margin`), so two neighbours' grid values differ by at most ``2^QUERY_BITS +
margin`` units and the query is ``(eps, 0)``-DP for every fixed earlier output
(docs/explanation/privacy.md, "Stage 3: the weighted sum").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpate_core.privacy import PrivacyParams
from dpate_core.release import NoiseSpec

__all__ = ["QUERY_BITS", "on_grid", "query_margin", "query_site", "query_units"]

#: the grid: ``2^-QUERY_BITS`` of the query's sensitivity (the rounding adds one unit, a
#: thousandth of the noise scale)
QUERY_BITS = 10


def query_margin(n: int, cells: int) -> int:
    """The sensitivity margin in grid units: one for the rounding and a bound on the float
    evaluation's error, ``(2 cells + 4) N 2^(QUERY_BITS - 53)`` rounded up. Public: ``N`` and the
    number of cells."""
    return 1 + max(1, math.ceil((2 * cells + 4) * n * math.ldexp(1.0, QUERY_BITS - 53)))


def query_units(n: int, cells: int) -> int:
    """The query's sensitivity in grid units: ``2^QUERY_BITS`` (its normalised sensitivity 1)
    plus :func:`query_margin`."""
    return (1 << QUERY_BITS) + query_margin(n, cells)


def query_site(name: str, part: PrivacyParams, n: int, cells: int, entries: int = 1) -> NoiseSpec:
    """The query's noise site: one entry (its value is computed later, a
    :class:`~dpate_core.release.Stage`'s), exact discrete Laplace at :func:`query_units` over
    the part's epsilon (rounded up), read in units of the normalised value. ``entries`` values
    of which one record moves each by at most its normalised sensitivity 1 (the propensity
    release's two arms' squares' sums): L1 sensitivity ``entries`` times :func:`query_units`."""
    scale = part.laplace_scale(entries * query_units(n, cells))
    unit = math.ldexp(1.0, -QUERY_BITS)
    return NoiseSpec(name, np.zeros(entries), scale, "integer_laplace", unit=unit)


def on_grid(normalised: Any) -> Any:
    """The private value on the grid: ``round(2^QUERY_BITS x)`` for the value ``x`` over its
    sensitivity."""
    return np.rint(np.asarray(normalised, dtype=np.float64) * math.ldexp(1.0, QUERY_BITS))
