"""The used cells' squares as sums, in place of their vector (since stop 51: the propensity
release's band cells; the proofs in docs/explanation/privacy.md, "The band cells' squares as
sums", the measurements in docs/research/propensity.md, "The band squares as sums").

Subclassification reads the cells' centred squares ``q`` only through each arm's within-cell
variance pooled over the used strata (``_weightings._pooled_variance``): ``sigma_a^2 = sum_used
(q_ax - s_ax^2 / n_ax) / df_a``, so of the squares it needs each arm's sum over the used cells,
``Q_a = sum_used q_ax``, whose coefficients (1 on the used strata's cells of arm ``a``, 0
elsewhere) are post-processing of the histogram's noisy counts (:func:`~._weightings.used_strata`).
A record's term ``(Y - B/2)^2`` lies in ``[0, B^2/4]``. Two forms, each queried on the
weighted-sum grid (:mod:`dpate_core.mechanisms._weighted_query`) in units of ``B^2/4``:

- **each arm's sum** (:data:`ARM_SQUARES`): the pair ``(Q_c, Q_t)``, L1 sensitivity ``B^2/2`` (a
  record leaves one arm's sum and joins the other's), the same as the squares' vector; but each
  arm's variance carries one noise draw where the vector put one in each of its ``k_a`` used
  cells: ``v_q / df_a^2`` in place of ``k_a v_q / df_a^2``;
- **one sum for both arms** (:data:`COMMON_SQUARES`): ``Q = Q_c + Q_t``, sensitivity ``B^2/4``,
  and one variance pooled over both arms, ``sigma^2 = (Q - sum_used (s_t^2 / n_t + s_c^2 / n_c))
  / (df_t + df_c)``: a quarter of the noise variance for the sensitivity and both arms' degrees of
  freedom in place of each arm's. It assumes the arms spread alike within a cell; where they do
  not, ``sigma^2`` is their average by degrees of freedom and the sampling part is biased towards
  the larger arm's (a treated arm of a fifth of the records with twice the controls' sd: about a
  third low on its own part), so the propensity release uses it only below a public size, where
  the cells' noise is most of the variance (``dpate_core.mechanisms.propensity.squares_mode``).

Post-processing of the histogram and public constants, except :func:`query_value` (private: the
exact squares).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid
from dpate_core.mechanisms._weighted_query import query_site as weighted_query_site
from dpate_core.privacy import PrivacyParams
from dpate_core.release import NoiseSpec

from ._fe_squares import clipped_squares, pooled_df

if TYPE_CHECKING:
    from ._weightings import PublicConstants

__all__ = [
    "ARM_SQUARES",
    "COMMON_SQUARES",
    "cell_squares",
    "query_site",
    "query_value",
    "query_variance",
    "variance_noise",
    "with_scale",
]

#: one sum over both arms' used cells (one noise site, one entry)
COMMON_SQUARES = "common_squares"
#: each arm's sum over its used cells (one noise site, two entries: control, treated)
ARM_SQUARES = "arm_squares"
#: the site of each form (``squares_mode``'s ``"common"`` and ``"arms"``)
SITES = {"common": COMMON_SQUARES, "arms": ARM_SQUARES}


def query_site(mode: str, part: PrivacyParams, n: int, cells: int) -> NoiseSpec:
    """The sums' noise site at the squares' budget part (``mode``: ``"common"`` or ``"arms"``):
    the weighted-sum grid's (:func:`~dpate_core.mechanisms._weighted_query.query_site`), values
    in units of ``B^2/4``, one entry for the one sum and two for the pair (L1: a record leaves
    one arm's sum and joins the other's). Public: ``N``, the number of cells and the part."""
    return weighted_query_site(SITES[mode], part, n, cells, 1 if mode == "common" else 2)


def with_scale(c: PublicConstants, mode: str, scale: float) -> PublicConstants:
    """``c`` with the sums' scale (in normalised units, :func:`query_site`'s ``value_scale``) in
    the field its ``mode`` reads, and without the squares' vector's noise."""
    if mode == "common":
        return dataclasses.replace(c, v_q=0.0, common_scale=scale, arm_scale=None)
    return dataclasses.replace(c, v_q=0.0, common_scale=None, arm_scale=scale)


def query_value(c: PublicConstants, mode: str, used: Any, squares: Any) -> dict[str, Any]:
    """The private values on the grid, ``Q / (B^2/4)`` or ``(Q_c, Q_t) / (B^2/4)``, from the exact
    centred squares (outcome units, control then treated per stratum) and the used strata
    (``used``: :func:`~._weightings.used_strata` of the histogram's noisy counts)."""
    cells = np.asarray(used, dtype=bool)
    q = np.asarray(squares, dtype=np.float64)
    q_c = np.sum(np.where(cells, q[..., 0::2], 0.0), axis=-1)
    q_t = np.sum(np.where(cells, q[..., 1::2], 0.0), axis=-1)
    value = (q_c + q_t)[..., None] if mode == "common" else np.stack([q_c, q_t], axis=-1)
    return {SITES[mode]: on_grid(value / c.max_var)}


def query_variance(c: PublicConstants) -> float:
    """One sum's noise variance in outcome units, ``2 (B^2/4 b)^2`` (``b`` its scale in normalised
    units, :attr:`~._weightings.PublicConstants.common_scale` or ``arm_scale``); 0 where the
    release reads the squares' vector."""
    return 2.0 * (c.max_var * (c.common_scale or c.arm_scale or 0.0)) ** 2


def cell_squares(
    c: PublicConstants, usable: Any, counts: tuple[Any, Any], sums: tuple[Any, Any], v: Any
) -> tuple[Any, Any]:
    """Per-cell squares ``(q_t, q_c)`` that give each arm the variance the sums give it where
    subclassification pools them: ``s^2 / n + (n - 1) sigma^2`` in a used cell (``counts`` the
    used cells' noisy counts, 1 elsewhere), 0 elsewhere; ``sigma^2`` each arm's own from its sum
    (``v[ARM_SQUARES]``), or the one pooled over both arms (``v[COMMON_SQUARES]``, module
    docstring). Unclamped (the release clamps the variance it reads; its raw variance keeps the
    sign)."""
    nt, nc = counts
    s_t, s_c = sums
    mean_t = np.where(usable, s_t * s_t / nt, 0.0)
    mean_c = np.where(usable, s_c * s_c / nc, 0.0)
    if COMMON_SQUARES in v:  # (the sums clipped as the vector was: |Q| <= N B^2/4)
        big_q = clipped_squares(c, c.max_var * np.asarray(v[COMMON_SQUARES], np.float64))[..., 0]
        df = pooled_df(usable, nt) + pooled_df(usable, nc)
        sigma_t = sigma_c = ((big_q - np.sum(mean_t + mean_c, axis=-1)) / df)[..., None]
    else:
        pair = clipped_squares(c, c.max_var * np.asarray(v[ARM_SQUARES], dtype=np.float64))
        sigma_t = ((pair[..., 1] - np.sum(mean_t, axis=-1)) / pooled_df(usable, nt))[..., None]
        sigma_c = ((pair[..., 0] - np.sum(mean_c, axis=-1)) / pooled_df(usable, nc))[..., None]
    return (
        np.where(usable, mean_t + (nt - 1.0) * sigma_t, 0.0),
        np.where(usable, mean_c + (nc - 1.0) * sigma_c, 0.0),
    )


def variance_noise(
    c: PublicConstants, usable: Any, arms: tuple[tuple[Any, Any], tuple[Any, Any]], raw: Any
) -> tuple[Any, Any]:
    """``(value, sigma2)`` of the variance pooled over both arms: the unclamped ``sigma^2``
    (``raw``, ``(..., 1)``) and the variance of its estimate, summed as
    ``_weightings._pooled_variance_noise`` sums one arm's: per used cell its sum's and count's
    noise through ``s^2 / n`` (``4 m^2 v_s + v_n m^4``, ``m`` the centred cell mean), plus the
    query's (:func:`query_variance`), over both arms' degrees of freedom squared, plus the
    sampling variance of a variance estimate ``2 sigma^4 / df``. ``arms``: ``((n_t, m_t), (n_c,
    m_c))``; ``usable`` a mask or the plan's probabilities that each stratum is used. (Each arm's
    own sum: ``_pooled_variance_noise`` with :func:`query_variance` in place of the vector's.)"""
    df = sum(pooled_df(usable, n) for n, _ in arms)
    noise = query_variance(c) + sum(
        np.sum(usable * (4.0 * m * m * c.v_s + c.v_n * (m * m) ** 2), axis=-1) for _, m in arms
    )
    value = raw[..., 0]
    return value, noise / df**2 + 2.0 * np.clip(value, 0.0, c.max_var) ** 2 / df
