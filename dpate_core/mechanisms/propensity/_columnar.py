"""The propensity release's two compiled passes over columnar records, the ones a release runs
(``docs/reference/benchmarks.md``): the model vector (:func:`model_columns`) and the band cells
(:func:`band_columns`) over :class:`~dpate_core.mechanisms.propensity._model.Covariates`, a block
of rows at a time and a chunk of rows a thread (:func:`run_chunks`); and the copy of an ``(N, p)``
matrix into that form (:func:`split_rows`, :func:`column_codes`). Each entry they sum is an
integer on a public grid (the sums exact, in any order).

The covariates are kept by kind (categorical level codes as small integers, numeric values as
floats, each column contiguous), a chunk of rows at a time (the chunks' integer sums added
afterwards are exact in any order), blocks of :data:`BLOCK` rows within a chunk. The rules
are one flag per block; a flagged chunk returns at once and the caller runs the checked pass
of ``_kernels.py`` (or :func:`~._kernels.checked_columns`) for the rule's exact status.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from dpate_core.compile_cache import njit

from ._kernels import BAD_CODE, OK

__all__ = [
    "BLOCK",
    "band_columns",
    "column_codes",
    "model_columns",
    "power_of_two_inverse",
    "run_chunks",
    "split_rows",
]

#: the rows a block holds (the index and the cells of a block are computed column by column)
BLOCK = 2048
#: the largest level count whose (level, arm) counts are packed 12-bit counters in one int64
#: (a block of BLOCK < 2^12 rows at a time); above it, a count table
PACKED_LEVELS = 5


@njit(cache=True, nogil=True)
def split_rows(z: Any, kind: Any, levels: Any, codes: Any, values: Any) -> int:  # pragma: no cover
    """Copy the ``(N, p)`` matrix ``z`` into ``codes`` (``(p_cat, N)``, the categorical columns
    in order) and ``values`` (``(p_num, N)``, the numeric ones), a block of rows at a time.
    Returns OK, or BAD_CODE when a categorical entry is not a whole number in ``[0, levels)``
    (the copy then partial)."""
    p = kind.shape[0]
    n = z.shape[0]
    for b0 in range(0, n, BLOCK):
        b1 = min(b0 + BLOCK, n)
        c = 0
        v_at = 0
        for j in range(p):
            src = z[b0:b1, j]  # views of the block, indexed from 0 (vectorised loops)
            if kind[j] == 0:
                if _block_codes(src, np.float64(levels[j]), codes[c, b0:b1]):
                    return BAD_CODE
                c += 1
            else:
                vals = values[v_at, b0:b1]
                for r in range(src.shape[0]):
                    vals[r] = src[r]
                v_at += 1
    return OK


@njit(cache=True, nogil=True, inline="always")
def _block_codes(src: Any, top: float, out: Any) -> bool:  # pragma: no cover - compiled
    """One block of a categorical column copied into ``out`` as integers; True when an entry is
    not a whole number in ``[0, top)`` (written as 0)."""
    bad = False
    for r in range(src.shape[0]):
        v = np.float64(src[r])
        ok = v >= 0.0 and v < top
        bad |= not (ok and np.floor(v) == v)
        out[r] = np.int64(v) if ok else 0
    return bad


@njit(cache=True, nogil=True)
def column_codes(col: Any, levels: int, out: Any) -> int:  # pragma: no cover - compiled
    """Copy one categorical column into ``out`` (integers). Returns OK, or BAD_CODE when an
    entry is not a whole number in ``[0, levels)`` (the copy then partial)."""
    n = col.shape[0]
    top = np.float64(levels)
    for b0 in range(0, n, BLOCK):
        b1 = min(b0 + BLOCK, n)
        # views of the block, indexed from 0 (vectorised loops)
        if _block_codes(col[b0:b1], top, out[b0:b1]):
            return BAD_CODE
    return OK


@njit(cache=True, nogil=True)
def model_columns(
    w: Any,
    codes: Any,
    cat_levels: Any,
    values: Any,
    mid: Any,
    half: Any,
    inv: Any,
    g: int,
    start: int,
    stop: int,
) -> Any:  # pragma: no cover - compiled
    """The model vector's parts over rows ``[start, stop)``: ``(flag, treated, table, nsum)``,
    ``table[t, code, arm]`` the counts of categorical column ``t`` and ``nsum[t]`` numeric
    column ``t``'s ``(treated sum, sum, sum of squares)`` of ``rint(u 2^g)`` and
    ``rint(u^2 2^g)``; ``flag`` 1 when a rule is broken in the chunk (the parts then partial)."""
    p_cat = codes.shape[0]
    p_num = values.shape[0]
    width = 1
    for t in range(p_cat):
        width = max(width, cat_levels[t])
    table = np.zeros((p_cat, width, 2), np.int64)
    nsum = np.zeros((p_num, 3), np.int64)
    scale = 2.0**g
    treated = np.int64(0)
    for b0 in range(start, stop, BLOCK):
        # views of the block, indexed from 0 (the compiler then vectorises the loops)
        b1 = min(b0 + BLOCK, stop)
        wb = w[b0:b1]
        nb = wb.shape[0]
        bad = 0
        n1 = 0
        for r in range(nb):
            wi = wb[r]
            bad |= (wi != 0) & (wi != 1)
            n1 += wi
        treated += n1
        for t in range(p_cat):
            col = codes[t, b0:b1]
            lev = cat_levels[t]
            if lev == 2:  # the ones' count and their treated count; any other code sets a bit
                ones = 0
                ones_t = 0
                bits = col[0] & 0
                for r in range(nb):
                    v = col[r]
                    bits |= v
                    ones += v
                    ones_t += v & wb[r]
                bad |= (bits & ~1) != 0
                if bad:
                    return 1, treated, table, nsum
                table[t, 1, 1] += ones_t
                table[t, 1, 0] += ones - ones_t
                table[t, 0, 1] += n1 - ones_t
                table[t, 0, 0] += nb - n1 - (ones - ones_t)
                continue
            lo = col[0]
            hi = col[0]
            for r in range(nb):
                lo = min(lo, col[r])
                hi = max(hi, col[r])
            bad |= (lo < 0) | (hi >= lev)
            if bad:
                return 1, treated, table, nsum
            if lev <= PACKED_LEVELS:
                # one 12-bit count per level in an int64 (a block's count is below 2^12)
                acc = np.int64(0)
                acc_t = np.int64(0)
                for r in range(nb):
                    bit = np.int64(1) << (np.int64(12) * col[r])
                    acc += bit
                    acc_t += bit * np.int64(wb[r])
                for lv in range(lev):
                    c_all = (acc >> (12 * lv)) & 4095
                    c_t = (acc_t >> (12 * lv)) & 4095
                    table[t, lv, 1] += c_t
                    table[t, lv, 0] += c_all - c_t
            else:
                for r in range(nb):
                    table[t, col[r], wb[r]] += 1
        for t in range(p_num):
            vals = values[t, b0:b1]
            m, h = mid[t], half[t]
            s1 = np.int64(0)
            sa = np.int64(0)
            s2 = np.int64(0)
            finite = True
            if inv[t] != 0.0:  # a power-of-two half-width: the product is the quotient
                iv = inv[t]
                for r in range(nb):
                    v = np.float64(vals[r])
                    finite &= np.isfinite(v)
                    u = min(max((v - m) * iv, -1.0), 1.0)
                    q = np.int64(np.rint(u * scale))
                    s1 += q if wb[r] != 0 else 0
                    sa += q
                    s2 += np.int64(np.rint(u * u * scale))
            else:
                for r in range(nb):
                    v = np.float64(vals[r])
                    finite &= np.isfinite(v)
                    u = min(max((v - m) / h, -1.0), 1.0)
                    q = np.int64(np.rint(u * scale))
                    s1 += q if wb[r] != 0 else 0
                    sa += q
                    s2 += np.int64(np.rint(u * u * scale))
            nsum[t, 0] += s1
            nsum[t, 1] += sa
            nsum[t, 2] += s2
            bad |= not finite
        if bad:
            return 1, treated, table, nsum
    return 0, treated, table, nsum


@njit(cache=True, nogil=True)
def band_columns(
    w: Any,
    y: Any,
    codes: Any,
    values: Any,
    kind: Any,
    levels: Any,
    at: Any,
    mid: Any,
    half: Any,
    inv: Any,
    term_at: Any,
    terms: Any,
    intercept: float,
    edges: Any,
    bound: float,
    inv_bound: float,
    k: int,
    m: int,
    start: int,
    stop: int,
) -> Any:  # pragma: no cover - compiled
    """:func:`band_pass` on columnar records over rows ``[start, stop)`` (the codes already
    checked by the model's pass; ``edges`` sorted, so a record's band is the number of edges
    below its index): ``(flag, counts, sums, squares)``, ``flag`` 1 when a rule is broken."""
    n_edges = edges.shape[0]
    n_cells = 2 * (n_edges + 1)
    lanes = 4  # the cell sums in four interleaved copies (fewer stalls on a cell hit twice)
    counts = np.zeros((lanes, n_cells), np.int64)
    sums = np.zeros((lanes, n_cells), np.int64)
    squares = np.zeros((lanes, n_cells), np.int64)
    grid_s = 2.0**k
    grid_q = 2.0**m
    half_s = np.int64(1) << (k - 1)
    eta = np.empty(BLOCK, np.float64)
    cell = np.empty(BLOCK, np.int64)
    band = np.empty(BLOCK, np.int64)
    shares = np.empty(BLOCK, np.float64)
    qs = np.empty(BLOCK, np.int64)
    qq = np.empty(BLOCK, np.int64)
    for b0 in range(start, stop, BLOCK):
        # views of the block, indexed from 0 (the compiler then vectorises the loops)
        b1 = min(b0 + BLOCK, stop)
        wb = w[b0:b1]
        yb = y[b0:b1]
        nb = wb.shape[0]
        eb = eta[:nb]
        eb[:] = intercept
        for j in range(kind.shape[0]):  # in column order: the index's sum as numpy's
            a = term_at[j]
            if kind[j] == 0 and levels[j] == 2:  # a binary column: a choice, not a look-up
                col = codes[at[j], b0:b1]
                zero, one = terms[a], terms[a + 1]
                for r in range(nb):
                    eb[r] += one if col[r] != 0 else zero
            elif kind[j] == 0:
                col = codes[at[j], b0:b1]
                for r in range(nb):
                    eb[r] += terms[a + np.int64(col[r])]
            else:
                vals = values[at[j], b0:b1]
                slope, offset, mj, hj, iv = terms[a], terms[a + 1], mid[j], half[j], inv[j]
                if iv != 0.0:  # a power-of-two half-width: the product is the quotient
                    for r in range(nb):
                        u = min(max((np.float64(vals[r]) - mj) * iv, -1.0), 1.0)
                        eb[r] += slope * u + offset
                else:
                    for r in range(nb):
                        u = min(max((np.float64(vals[r]) - mj) / hj, -1.0), 1.0)
                        eb[r] += slope * u + offset
        tb = shares[:nb]  # y / B
        if inv_bound != 0.0:
            for r in range(nb):
                tb[r] = yb[r] * inv_bound
        else:
            for r in range(nb):
                tb[r] = yb[r] / bound
        bb = band[:nb]  # the number of edges below the index, an edge at a time (vectorised)
        bb[:] = 0
        for t in range(n_edges):
            edge = edges[t]
            for r in range(nb):
                bb[r] += edge < eb[r]
        bad = False
        for r in range(nb):
            b = bb[r]
            wi = np.int64(wb[r])
            yi = yb[r]
            bad |= ((wi != 0) & (wi != 1)) | (not (yi >= 0.0 and yi <= bound))
            t_ = tb[r]
            d = t_ - 0.5
            cell[r] = 2 * b + wi
            qs[r] = np.int64(np.rint(t_ * grid_s)) - half_s
            qq[r] = np.int64(np.rint(d * d * grid_q))
        if bad:  # before any cell is counted (a broken treatment is no cell)
            return 1, counts.sum(axis=0), sums.sum(axis=0), squares.sum(axis=0)
        for r in range(nb):
            lane = r & (lanes - 1)
            c = cell[r]
            counts[lane, c] += 1
            sums[lane, c] += qs[r]
            squares[lane, c] += qq[r]
    return 0, counts.sum(axis=0), sums.sum(axis=0), squares.sum(axis=0)


#: the fewest rows a chunk of a threaded pass holds (below it, one call)
CHUNK_ROWS = 1 << 18


def threads() -> int:
    """The threads a pass may use: the cores this process may run on (at most 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def power_of_two_inverse(x: float) -> float:
    """``1 / x`` when ``x`` is a power of two whose inverse is finite (``v * (1 / x)`` is then
    ``v / x`` to the bit: the same real number, rounded once), else 0."""
    x = float(x)
    if x > 0 and math.isfinite(x) and math.frexp(x)[0] == 0.5 and math.isfinite(1.0 / x):
        return 1.0 / x
    return 0.0


def run_chunks(kernel: Callable[..., Any], args: tuple[Any, ...], n: int) -> list[Any]:
    """``kernel(*args, start, stop)`` over consecutive chunks of the ``n`` rows, one thread
    each (the kernels release the GIL), in row order: the results' integer parts add up to the
    whole pass's exactly."""
    parts = max(1, min(threads(), n // CHUNK_ROWS))
    bounds = [n * i // parts for i in range(parts + 1)]
    if parts == 1:
        return [kernel(*args, 0, n)]
    with ThreadPoolExecutor(parts) as pool:
        futures = [pool.submit(kernel, *args, a, b) for a, b in itertools.pairwise(bounds)]
        return [f.result() for f in futures]
