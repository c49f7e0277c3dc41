"""The propensity release's checked passes over the records, one row at a time: the model vector
(:func:`model_pass`), the band cells (:func:`band_pass`) and the rules of columnar records
(:func:`checked_columns`). They name the first broken rule when a block's flag fires in the
columnar passes a release runs (``_columnar.py``), and are the reference those equal to the bit
(tests). Each entry they sum is an integer on a public grid (the sums exact, in any order); the
statuses a pass returns, since compiled code cannot raise, are defined here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpate_core.compile_cache import njit

__all__ = ["band_pass", "checked_columns", "model_pass"]

#: what a pass returns (it cannot raise): OK, or the first rule broken
OK, BAD_W, BAD_Y, BAD_CODE, BAD_VALUE = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def model_pass(
    w: Any, z: Any, kind: Any, levels: Any, mid: Any, half: Any, offset: Any, size: int, g: int
) -> Any:  # pragma: no cover - compiled
    """The model vector in grid units ``2^-g`` (int64): arm counts, then per column its block
    at ``offset[j]`` (categorical: ``2 code + w``; numeric: the arm sums of ``rint(u 2^g)`` and
    the sum of ``rint(u^2 2^g)``). Returns ``(status, vector)``."""
    out = np.zeros(size, np.int64)
    unit = np.int64(1) << g
    scale = 2.0**g
    cats = np.flatnonzero(kind == 0)
    nums = np.flatnonzero(kind == 1)
    for i in range(w.shape[0]):
        wi = np.int64(w[i])
        if wi != 0 and wi != 1:
            return BAD_W, out
        out[wi] += unit
        for j in cats:
            v = z[i, j]
            code = np.int64(v)
            if not (code >= 0 and code < levels[j] and code == v):
                return BAD_CODE, out
            out[offset[j] + 2 * code + wi] += unit
        for j in nums:
            v = np.float64(z[i, j])
            if not np.isfinite(v):
                return BAD_VALUE, out
            u = min(max((v - mid[j]) / half[j], -1.0), 1.0)
            out[offset[j] + wi] += np.int64(np.rint(u * scale))
            out[offset[j] + 2] += np.int64(np.rint(u * u * scale))
    return OK, out


@njit(cache=True, nogil=True)
def band_pass(
    w: Any,
    y: Any,
    z: Any,
    kind: Any,
    mid: Any,
    half: Any,
    term_at: Any,
    terms: Any,
    intercept: float,
    edges: Any,
    bound: float,
    k: int,
    m: int,
) -> Any:  # pragma: no cover - compiled
    """Each record's band (the index ``intercept + sum_j term_j(z_ij)`` against ``edges``, as
    ``numpy.searchsorted``) and the adjusted release's three cell vectors over (band, arm):
    counts, centred grid sums ``rint(Y/B 2^k) - 2^(k-1)``, squares ``rint((Y/B - 1/2)^2 2^m)``.
    Returns ``(status, counts, sums, squares)``."""
    n_cells = 2 * (edges.shape[0] + 1)
    counts = np.zeros(n_cells, np.int64)
    sums = np.zeros(n_cells, np.int64)
    squares = np.zeros(n_cells, np.int64)
    grid_s = 2.0**k
    grid_q = 2.0**m
    half_s = np.int64(1) << (k - 1)
    for i in range(w.shape[0]):
        wi, yi = np.int64(w[i]), y[i]
        if wi != 0 and wi != 1:
            return BAD_W, counts, sums, squares
        if not (yi >= 0.0 and yi <= bound):
            return BAD_Y, counts, sums, squares
        eta = intercept
        for j in range(kind.shape[0]):  # in column order: the index's sum as numpy's
            if kind[j] == 0:
                eta += terms[term_at[j] + np.int64(z[i, j])]
            else:
                u = min(max((np.float64(z[i, j]) - mid[j]) / half[j], -1.0), 1.0)
                eta += terms[term_at[j]] * u + terms[term_at[j] + 1]
        b = 0
        while b < edges.shape[0] and edges[b] < eta:  # searchsorted, side "left"
            b += 1
        t = yi / bound
        d = t - 0.5
        cell = 2 * b + wi
        counts[cell] += 1
        sums[cell] += np.int64(np.rint(t * grid_s)) - half_s
        squares[cell] += np.int64(np.rint(d * d * grid_q))
    return OK, counts, sums, squares


@njit(cache=True, nogil=True)
def checked_columns(w: Any, codes: Any, cat_levels: Any, values: Any) -> int:  # pragma: no cover
    """The first broken rule of the columnar records in :func:`model_pass`'s order (row by row:
    the treatment, the categorical codes, the numeric values), or OK."""
    for i in range(w.shape[0]):
        if w[i] != 0 and w[i] != 1:
            return BAD_W
        for t in range(codes.shape[0]):
            if not (codes[t, i] >= 0 and codes[t, i] < cat_levels[t]):
                return BAD_CODE
        for t in range(values.shape[0]):
            if not np.isfinite(np.float64(values[t, i])):
                return BAD_VALUE
    return OK
