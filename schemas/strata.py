"""Discretisation: a stratum id per record from the spec's public covariate declarations.

The stratum id is the mixed-radix number of the covariates' bin/level indices (first covariate
most significant); ``|X|`` (``StudySpec.domain_size``) is the product of the level counts.
Categorical values not among the declared levels go to the declared ``other`` level; numbers are
cut at the declared bin edges. Nothing about the discretisation is learned from the data.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt
import pandas as pd

from dpate.schemas.spec import StudySpec
from dpate.schemas.spec_columns import CategoricalCovariate

__all__ = ["stratum_ids"]

IntArray = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def _acc_codes(x: Any, size: int, lut: Any, codes: Any) -> None:  # pragma: no cover - compiled
    """``x = x * size + lut[code]`` per record, one pass (``lut[-1]`` serves code -1)."""
    for i in range(x.shape[0]):
        c = codes[i]
        x[i] = x[i] * size + lut[c if c >= 0 else lut.shape[0] - 1]


@numba.njit(cache=True, nogil=True)
def _acc_bins(x: Any, size: int, inner: Any, v: Any) -> None:  # pragma: no cover - compiled
    """``x = x * size + bin(v)`` per record, ``bin(v) = #{inner edges <= v}``: a branch-free
    count over a few edges, a binary search over many."""
    k = inner.shape[0]
    if k <= 32:
        for i in range(x.shape[0]):
            val = v[i]
            b = 0
            for j in range(k):
                b += val >= inner[j]
            x[i] = x[i] * size + b
    else:
        for i in range(x.shape[0]):
            lo, hi = 0, k
            val = v[i]
            while lo < hi:
                mid = (lo + hi) // 2
                if val >= inner[mid]:
                    lo = mid + 1
                else:
                    hi = mid
            x[i] = x[i] * size + lo


def stratum_ids(df: pd.DataFrame, spec: StudySpec) -> tuple[IntArray, dict[str, int]]:
    """Stratum id per record from the public covariate spec (mixed radix, first covariate most
    significant), and how many values each categorical covariate mapped to its 'other' level.
    Each covariate is one compiled pass over the records (a lookup per categorical code, a
    binary search over the public edges per number). ``df`` holds validated records."""
    n = len(df)
    x = np.zeros(n, dtype=np.int64)
    mapped: dict[str, int] = {}
    for c in spec.covariates:
        col = df[c.column]
        if isinstance(c, CategoricalCovariate):
            lut, codes = _level_lookup(col, c)
            unknown_cats = lut[:-1] < 0
            # without an 'other' level an unknown category can only be unused (its rows dropped
            # as missing, or in another batch): validation refused any row holding one
            if unknown_cats.any() and c.other is not None:
                other = c.all_levels.index(c.other)
                unknown_rows = unknown_cats.take(codes[codes >= 0])
                mapped[c.column] = int(np.count_nonzero(unknown_rows))
                lut[:-1][unknown_cats] = other
            _acc_codes(x, c.size, lut, codes)
        else:
            v = np.ascontiguousarray(col.to_numpy(dtype=np.float64))
            _acc_bins(x, c.size, np.asarray(c.edges[1:-1], dtype=np.float64), v)
    return x, mapped


def _level_lookup(col: pd.Series, c: CategoricalCovariate) -> tuple[IntArray, Any]:
    """The declared level index of each distinct value (-1: not declared), decided once per
    distinct value, with a last entry -1 for code -1 (missing; never after validation), and each
    record's code into it."""
    levels = c.all_levels
    if isinstance(levels[0], str):
        cat = col.cat  # decided per distinct value, gathered by the codes
        lut = pd.Index(levels).get_indexer(cat.categories.astype(str)).astype(np.int64)
        codes = cat.codes.to_numpy()
    else:
        codes, cats = pd.factorize(col.to_numpy(dtype=np.float64), use_na_sentinel=True)
        lut = pd.Index(np.asarray(levels, dtype=np.float64)).get_indexer(cats)
        lut = lut.astype(np.int64)
        codes = np.ascontiguousarray(codes)
    return np.append(lut, -1), codes
