"""The bands of a released propensity model (``docs/research/propensity.md``): the fitted model
and its band edges from one noisy model vector (:func:`model_fit`, stage 2's post-processing),
and the band of every stratum (:func:`strata_bands`) or record (:func:`record_bands`) under
them. The release bands its records with these, and a later covariate-balance table bands them
with the same functions of the recorded vector: post-processing of a DP output, no refit on
records, no new draw."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpate_core.privacy import BudgetSplit, Number, PrivacyParams

from ._band_edges import overlap_bands
from ._fit import PropensityModel, fit_model
from ._model import (
    Categorical,
    Column,
    Covariates,
    model_bits,
    model_sensitivity,
    with_arm_counts,
)

__all__ = ["model_fit", "record_bands", "strata_bands"]


def model_fit(
    n: int,
    columns: Sequence[Column],
    epsilon: Number,
    split: Sequence[Number],
    bands: int,
) -> Callable[[npt.ArrayLike], tuple[PropensityModel, np.ndarray]]:
    """Stage 2's post-processing of a noisy model vector (in outcome units: the ``"model"``
    value of a draw): the fitted model and its ``bands - 1`` inner band edges, from public
    constants only (``N``, the columns, the release's epsilon and split, ``K``; from them
    whether the bands are of equal overlap mass, :func:`~._band_edges.overlap_bands`). The release
    bands its records with it, and a later covariate-balance table bands them with the same
    function of the recorded vector (no refit on records, no new draw)."""
    g = model_bits(n)
    shares = BudgetSplit.of(split, len(split))  # four parts, or three (a binary outcome)
    p_m = shares.apply(PrivacyParams(PrivacyParams.of(epsilon, 0).epsilon, Fraction(0)))[0]
    # the pseudo-count: the count noise scale, in counts
    smoothing = max(1.0, p_m.laplace_scale(model_sensitivity(columns, g)) * math.ldexp(1.0, -g))
    k = int(bands)
    overlap = overlap_bands(n, p_m.epsilon)

    def fitted(noisy: npt.ArrayLike) -> tuple[PropensityModel, np.ndarray]:
        row = np.asarray(noisy, dtype=np.float64)
        model = fit_model(with_arm_counts(row, columns), columns, g, n, smoothing)
        if overlap:
            model = dataclasses.replace(model, overlap=True)
        return model, model.edges(k)

    return fitted


def strata_bands(model: PropensityModel, edges: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The band of every stratum (its covariates' level ``codes``, ``(|X|, p)``) under a fitted
    model and its inner edges: how the release from strata bands its records."""
    return np.searchsorted(edges, model.index(codes)).astype(np.int64)


def record_bands(model: PropensityModel, edges: np.ndarray, z: Covariates) -> np.ndarray:
    """The band of every record under a fitted model and its inner edges, as the release from
    records bands it (:func:`~._columnar.band_columns`: the index summed in column order from
    the intercept, a numeric value mapped to ``u = clip((v - mid) / half, -1, 1)``, the band the
    number of edges strictly below the index). Vectorised over records, a column at a time."""
    eta = np.full(z.n, model.intercept)
    c = v = 0  # the next row of the codes (categorical columns) and of the values (numeric)
    for col, term in zip(model.columns, model.terms, strict=True):
        if isinstance(col, Categorical):
            eta += term[z.codes[c].astype(np.int64)]
            c += 1
        else:
            mid, half = (col.lo + col.hi) / 2.0, (col.hi - col.lo) / 2.0
            u = np.clip((np.asarray(z.values[v], dtype=np.float64) - mid) / half, -1.0, 1.0)
            eta += term[0] * u + term[1]
            v += 1
    return np.searchsorted(edges, eta).astype(np.int64)
