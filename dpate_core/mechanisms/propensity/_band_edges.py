"""The propensity bands' edges under a fitted model, and the confounding they leave
(``docs/research/propensity.md``, "Bands of equal overlap").

The model's picture of the index is, per arm ``a``, a normal ``N(m_a, s_a^2)`` mixed by the arm
shares (:class:`~._fit.PropensityModel`). The bands are the ``K`` equal-probability bands of the
arms' **overlap density** ``sqrt(f_0 f_1)`` (``f_a`` the arm's share times its normal density),
which is itself proportional to a normal: precision ``(1/s_0^2 + 1/s_1^2) / 2``, mean the
precision-weighted mean of ``m_0`` and ``m_1``. So the edges are that normal's ``k / K``
quantiles (:func:`band_edges`), in closed form. Against the ``K`` quantiles of the mixture (the
equally filled bands until stop 52) they are narrower where both arms are common and wider in
the tails, where one arm is rare: ``sqrt(f_0 f_1) = f sqrt(e (1 - e))``, ``e`` the model's
propensity, so a band's mass is weighted by ``sqrt(e (1 - e))``. A band cell's noise in the
band estimate goes as ``1 / e_b^2`` (``e_b`` the band's treated share), so wider tail bands carry
less of it; they also leave more of the confounding, which the release carries as the shared sd.

What bands of an index leave of a confounder linear in it (Cochran 1968): the share of its
variance within the bands, ``c = 1 - sum_b p_b (mu_b - mu)^2 / sigma^2`` (``p_b``, ``mu_b`` the
band's mass and mean, ``mu``, ``sigma^2`` the whole distribution's), under the records'
distribution, the mixture. Equally filled bands of a normal give Cochran's table (0.10 for five;
:func:`residual_confounding_share`). The bands remove ``1 - c`` of the confounding
``C`` and leave ``c C``; the gap the release sees is what they removed, so what they leave is
``c / (1 - c)`` times it (:func:`residual_multiple`). All of it is a function of the model's
fitted means, variances and arm share (post-processing of the noisy model vector) and of ``K``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from dpate_core.intervals import normal_cdf

__all__ = [
    "OVERLAP_FROM",
    "band_edges",
    "band_moments",
    "filled_edges",
    "overlap_bands",
    "residual_confounding_share",
    "residual_multiple",
]

#: the model's own effective size ``N x epsilon_model`` from which the bands are of equal
#: overlap mass; below it the model's picture of the arms is mostly its own noise (a noisy
#: model's arms look further apart than the records' are), and the bands stay equally filled
#: (docs/research/propensity.md, "Bands of equal overlap": measured to help from 400, a site of
#: 1,000 records at epsilon 1 with two fifths to the model, and not at IHDP's and Lalonde's
#: 100-150; from 300 or 350 narrower, but 3-site combinations under strong confounding covered
#: 0.924-0.927, "Below the size, measured again"). Public and exact
OVERLAP_FROM = 400


def overlap_bands(n: int, epsilon_model: float | Fraction) -> bool:
    """Whether a release of ``n`` records whose model has ``epsilon_model`` bands its records by
    equal overlap mass (:func:`band_edges`) rather than equally filled (the mixture's quantiles,
    :meth:`~._fit.PropensityModel.edges`):
    public, ``N`` and the model's epsilon, exact."""
    return Fraction(n) * Fraction(epsilon_model) >= OVERLAP_FROM


#: the largest within-band share :func:`residual_multiple` reads (a model whose bands hold almost
#: nothing apart would otherwise give an unbounded multiple)
_MOST_LEFT = 0.99


def _overlap(means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The overlap density's normal, ``(mean, sd)`` per model (module docstring)."""
    precision = 1.0 / np.maximum(variances, 1e-12)
    total = precision.sum(axis=-1)
    return (means * precision).sum(axis=-1) / total, np.sqrt(2.0 / total)


def band_edges(means: npt.ArrayLike, variances: npt.ArrayLike, bands: int) -> np.ndarray:
    """The ``K - 1`` inner band edges of every model (``means``, ``variances``: ``(..., 2)``, the
    index's per-arm normal, control then treated; out ``(..., K - 1)``): the ``k / K`` quantiles
    of the arms' overlap density (module docstring). Exact."""
    m, v = np.asarray(means, dtype=np.float64), np.asarray(variances, dtype=np.float64)
    centre, sd = _overlap(m, v)
    normal = NormalDist()
    z = np.array([normal.inv_cdf(j / bands) for j in range(1, int(bands))], dtype=np.float64)
    return np.asarray(centre[..., None] + sd[..., None] * z, dtype=np.float64)


#: the points of :func:`filled_edges`' grid, from the smallest arm mean less 8 sds to the largest
#: plus 8 (a step of about a sixtieth of an sd)
_GRID = 1025


def filled_edges(
    means: npt.ArrayLike,
    variances: npt.ArrayLike,
    share: npt.ArrayLike,
    bands: int,
    cdf: Callable[[np.ndarray], np.ndarray] = normal_cdf,
) -> np.ndarray:
    """The ``K - 1`` inner edges of equally filled bands for every model (``means``,
    ``variances``: ``(..., 2)``, control then treated; ``share``: ``(...)``, the treated share;
    out ``(..., K - 1)``): the ``k / K`` quantiles of the model's index distribution, the arms'
    normals mixed by the arm shares, read off its cdf on a grid of :data:`_GRID` points
    (linear between them). ``cdf``: the standard normal's (``math.erf`` by default, as a release
    reads it; a prediction over many models may pass a faster approximation). The release's
    bands below :data:`OVERLAP_FROM` (:meth:`~._fit.PropensityModel.edges`) and ``dpate plan``'s
    simulated models both read this."""
    m, v = np.asarray(means, dtype=np.float64), np.asarray(variances, dtype=np.float64)
    pi = np.clip(np.asarray(share, dtype=np.float64), 1e-6, 1.0 - 1e-6)[..., None]
    sd = np.sqrt(np.maximum(v, 1e-12))
    lo = np.min(m - 8.0 * sd, axis=-1, keepdims=True)
    hi = np.max(m + 8.0 * sd, axis=-1, keepdims=True)
    grid = lo + (hi - lo) * np.linspace(0.0, 1.0, _GRID)  # (..., G)
    mixed = (1.0 - pi) * cdf((grid - m[..., :1]) / sd[..., :1])
    mixed = mixed + pi * cdf((grid - m[..., 1:]) / sd[..., 1:])
    levels = np.arange(1, int(bands)) / int(bands)
    # the first grid point at or above each level, and the one before it
    above = np.clip(np.sum(mixed[..., None, :] < levels[:, None], axis=-1), 1, _GRID - 1)
    c0, c1 = (np.take_along_axis(mixed, j, axis=-1) for j in (above - 1, above))
    x0, x1 = (np.take_along_axis(grid, j, axis=-1) for j in (above - 1, above))
    step = np.where(c1 > c0, (levels - c0) / np.where(c1 > c0, c1 - c0, 1.0), 0.0)
    return np.asarray(x0 + np.clip(step, 0.0, 1.0) * (x1 - x0), dtype=np.float64)


@functools.lru_cache(maxsize=64)
def residual_confounding_share(bands: int) -> float:
    """The share of a confounder's bias that subclassification on ``K`` equally filled bands of
    it leaves (Cochran 1968; a normal confounder, the outcome linear in it): ``1 - K sum_k
    (phi(a_{k-1}) - phi(a_k))^2``, ``a_k`` the standard normal's ``k / K`` quantile, the share of
    its variance the band means do not explain. 0.36, 0.21, 0.14, 0.10, 0.08 for ``K`` = 2-6
    (Cochran's 64-92% removed), 0.041 for 10. Public: a function of ``K`` only; the shared sd's
    multiple of equally filled bands (below :data:`OVERLAP_FROM`)."""
    if not 1 <= int(bands) <= 1000:
        raise ValueError(f"bands ({bands}) must be a whole number in [1, 1000]")
    k = int(bands)
    normal = NormalDist()
    a = [normal.inv_cdf(j / k) for j in range(1, k)]
    density = [0.0, *(normal.pdf(x) for x in a), 0.0]
    explained = k * math.fsum((density[j] - density[j + 1]) ** 2 for j in range(k))
    return max(0.0, 1.0 - explained)


def band_moments(
    means: npt.ArrayLike, variances: npt.ArrayLike, edges: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Each arm's normal mass and partial mean in every band, ``(..., 2, K)`` each, under the
    model's per-arm normals (``means``, ``variances``: ``(..., 2)``) and the bands of inner
    ``edges`` (``(..., K - 1)``): closed form, ``P_ab = Phi(z_b) - Phi(z_{b-1})`` and ``m_a P_ab -
    s_a (phi(z_b) - phi(z_{b-1}))``, ``z`` the edges standardised by the arm's normal. The arm's
    mean index within a band is their ratio."""
    m, v = np.asarray(means, dtype=np.float64), np.asarray(variances, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    sd = np.sqrt(np.maximum(v, 1e-12))
    # (..., 2, K + 1) standardised edges, the outer ones at -inf, +inf
    inf = np.full((*e.shape[:-1], 1), np.inf)
    cuts = np.concatenate([-inf, e, inf], axis=-1)[..., None, :]
    a = (cuts - m[..., None]) / sd[..., None]
    cdf = normal_cdf(a)
    pdf = np.exp(-0.5 * np.where(np.isfinite(a), a, 0.0) ** 2) / np.sqrt(2.0 * np.pi)
    pdf = np.where(np.isfinite(a), pdf, 0.0)
    mass = np.diff(cdf, axis=-1)
    return mass, m[..., None] * mass - sd[..., None] * np.diff(pdf, axis=-1)


def residual_multiple(
    means: npt.ArrayLike, variances: npt.ArrayLike, share: npt.ArrayLike, edges: npt.ArrayLike
) -> np.ndarray:
    """``c / (1 - c)`` for every model (``(...)``): ``c`` the share of the index's variance within
    the bands ``edges`` (``(..., K - 1)``) under the model's mixture of the arms' normals (module
    docstring), read at most :data:`_MOST_LEFT`. The shared sd is this times the confounding the
    corrected estimate removes. Closed form: per arm and band the normal's mass and partial mean
    (:func:`band_moments`)."""
    m, v = np.asarray(means, dtype=np.float64), np.asarray(variances, dtype=np.float64)
    pi = np.clip(np.asarray(share, dtype=np.float64), 1e-6, 1.0 - 1e-6)
    weights = np.stack([1.0 - pi, pi], axis=-1)  # (..., 2)
    mass, first = band_moments(m, v, edges)  # (..., 2, K) each
    p = (weights[..., None] * mass).sum(axis=-2)
    s1 = (weights[..., None] * first).sum(axis=-2)
    mu = (weights * m).sum(axis=-1)
    var = (weights * (v + m * m)).sum(axis=-1) - mu * mu
    between = (s1 * s1 / np.maximum(p, 1e-300)).sum(axis=-1) - mu * mu
    left = np.clip(1.0 - between / np.maximum(var, 1e-300), 0.0, _MOST_LEFT)
    return np.asarray(left / (1.0 - left), dtype=np.float64)
