"""One within-cell variance common to both arms, from one scalar query of the used cells' squares
(since stop 51: the propensity release below a public size; the proof in
docs/explanation/privacy.md, "The band cells' squares as one sum", the measurements in
docs/research/propensity.md, "One within-cell variance for both arms").

Subclassification reads the cells' centred squares ``q`` only through each arm's within-cell
variance pooled over the used strata (``_weightings._pooled_variance``): ``sigma_a^2 = sum_used
(q_ax - s_ax^2 / n_ax) / df_a``. Where both arms are assumed to spread alike within a cell, one
variance pooled over both arms serves both,

    ``sigma^2 = (Q - sum_used (s_tx^2 / n_tx + s_cx^2 / n_cx)) / (df_t + df_c)``,
    ``Q = sum_used (q_tx + q_cx)``,

and ``Q`` is all the release needs of the squares: one scalar whose coefficients (1 on the used
strata's cells, 0 elsewhere) are post-processing of the histogram's noisy counts
(:func:`~._weightings.used_strata`). A record's term ``(Y - B/2)^2`` lies in ``[0, B^2/4]``, so
``Q`` has sensitivity ``B^2/4`` (a record moving between cells, used or not, moves it by at most
that) against the squares' vector's ``B^2/2``, and ``Q / (B^2/4)`` is queried on the weighted-sum
grid (:mod:`dpate_core.mechanisms._weighted_query`). At the same budget its noise in ``sigma^2``
is ``2 (B^2/4 b)^2 / (df_t + df_c)^2`` against the vector's ``v_q k_a / df_a^2`` in each arm's:
a quarter for the sensitivity, ``1 / k`` for summing before the noise (``k`` the used cells),
and the smaller arm's degrees of freedom replaced by both arms'.

What it assumes: where the arms' within-cell variances differ, ``sigma^2`` is their average
weighted by degrees of freedom, and the sampling part of the variance is biased towards the
larger arm's (a treated arm of a fifth of the records with twice the controls' sd: about a third
low on its own part). The propensity release uses it only below a public size, where the cells'
noise is most of the variance and the vector's noise made its sampling part mostly noise
(``dpate_core.mechanisms.propensity.is_common_variance``).

Post-processing of the histogram and public constants, except :func:`query_value` (private: the
exact squares).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid

from ._fe_squares import pooled_df

if TYPE_CHECKING:
    from ._weightings import PublicConstants

__all__ = ["COMMON_SQUARES", "cell_squares", "query_value", "query_variance", "variance_noise"]

#: the query's noise site
COMMON_SQUARES = "common_squares"


def query_value(c: PublicConstants, used: Any, squares: Any) -> dict[str, Any]:
    """The private value on the grid, ``Q / (B^2/4)``, from the exact centred squares (outcome
    units, control then treated per stratum) and the used strata (``used``:
    :func:`~._weightings.used_strata` of the histogram's noisy counts)."""
    cells = np.repeat(np.asarray(used, dtype=bool), 2, axis=-1)
    value = np.sum(np.where(cells, squares, 0.0), axis=-1)
    return {COMMON_SQUARES: on_grid(value / c.max_var)[..., None]}


def query_variance(c: PublicConstants) -> float:
    """``Q``'s noise variance in outcome units, ``2 (B^2/4 b)^2`` (``b``:
    :attr:`~._weightings.PublicConstants.common_scale`, the query's scale in normalised units);
    0 where the release has no such query."""
    return 2.0 * (c.max_var * (c.common_scale or 0.0)) ** 2


def cell_squares(
    c: PublicConstants, usable: Any, counts: tuple[Any, Any], sums: tuple[Any, Any], noisy: Any
) -> tuple[Any, Any]:
    """Per-cell squares ``(q_t, q_c)`` that give both arms the common variance ``sigma^2``
    (module docstring) where subclassification pools them: ``s^2 / n + (n - 1) sigma^2`` in a
    used cell (``counts`` the used cells' noisy counts, 1 elsewhere), 0 elsewhere. ``noisy``: the
    query's noisy value in its normalised units, ``(..., 1)``. Unclamped (the release clamps the
    variance it reads, and its raw variance keeps the sign)."""
    nt, nc = counts
    s_t, s_c = sums
    mean_t = np.where(usable, s_t * s_t / nt, 0.0)
    mean_c = np.where(usable, s_c * s_c / nc, 0.0)
    big_q = c.max_var * np.asarray(noisy, dtype=np.float64)[..., 0]
    df = pooled_df(usable, nt) + pooled_df(usable, nc)
    sigma2 = ((big_q - np.sum(mean_t + mean_c, axis=-1)) / df)[..., None]
    return (
        np.where(usable, mean_t + (nt - 1.0) * sigma2, 0.0),
        np.where(usable, mean_c + (nc - 1.0) * sigma2, 0.0),
    )


def variance_noise(
    c: PublicConstants, usable: Any, arms: tuple[tuple[Any, Any], tuple[Any, Any]], raw: Any
) -> tuple[Any, Any]:
    """``(value, sigma2)``: the unclamped ``sigma^2`` (``raw``, ``(..., 1)``) and the variance of
    its estimate, summed as ``_weightings._pooled_variance_noise`` sums one arm's: per used cell
    its sum's and count's noise through ``s^2 / n`` (``4 m^2 v_s + v_n m^4``, ``m`` the centred
    cell mean), plus the query's (:func:`query_variance`), over both arms' degrees of freedom
    squared, plus the sampling variance of a variance estimate ``2 sigma^4 / df``. ``arms``:
    ``((n_t, m_t), (n_c, m_c))``; ``usable`` a mask or the plan's probabilities that each
    stratum is used."""
    df = sum(pooled_df(usable, n) for n, _ in arms)
    noise = query_variance(c) + sum(
        np.sum(usable * (4.0 * m * m * c.v_s + c.v_n * (m * m) ** 2), axis=-1) for _, m in arms
    )
    value = raw[..., 0]
    return value, noise / df**2 + 2.0 * np.clip(value, 0.0, c.max_var) ** 2 / df
