"""The fixed-effects sandwich's squares as one weighted-sum query (since stop 50; the proof in
docs/explanation/privacy.md, "The fixed-effects squares as one query", the derivation in
docs/explanation/adjusted.md, "The sandwich's squares as one query").

A fixed-effects release reads the cells' centred squares ``q`` in one place only, its sandwich
(``_weightings._fixed_effects_sampling``), and there linearly: the sandwich's raw value is ``(L +
R) / D^2`` with ``R`` free of the squares and

    ``L = sum_x (alpha_tx q_tx + alpha_cx q_cx)``, ``alpha_tx = n_hat_cx^2 - v_n - D_h u_tx``,
    ``alpha_cx = n_hat_tx^2 - v_n - D_h u_cx``,

``n_hat`` the histogram's noisy counts (clipped to ``[-N, N]``), ``D_h = sum_x n_hat_tx
n_hat_cx`` its denominator and ``u`` each arm's pooled within-cell variance's weights
(:func:`arm_weights`): the influences' ``n_c^2 q_t + n_t^2 q_c``, less their noise's mean ``v_n
(q_t + q_c)``, less the plug-in's ``D (sigma_t^2 + sigma_c^2)``. So the release queries ``L``
itself, one scalar, in place of the squares' vector: its coefficients are post-processing of the
histogram, a record's term ``alpha (Y - B/2)^2`` lies in ``[min(alpha, 0), max(alpha, 0)] B^2/4``,
so ``L`` has sensitivity ``S = (max(alpha, 0) - min(alpha, 0)) B^2 / 4`` (:func:`sensitivity`) and
``L / S`` sensitivity 1 (:mod:`dpate_core.mechanisms._weighted_query`: its grid and float margin).
Its noise variance ``2 (S b)^2`` (``b`` the query's scale in normalised units) against the
squares' vector's ``v_q sum alpha^2`` at the same budget (``v_q = 2 (B^2 / (2 eps_q))^2``): at most
a quarter of it where no coefficient is negative, less by about the number of well-filled cells.

Post-processing of the histogram and public constants, except :func:`query_value` (private: the
exact squares).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid

if TYPE_CHECKING:
    from ._weightings import PublicConstants

__all__ = [
    "SQUARES",
    "SquaresPart",
    "arm_weights",
    "clipped_squares",
    "coefficients",
    "pooled_df",
    "query_value",
    "query_variance",
    "reading",
    "sensitivity",
]

#: the query's noise site
SQUARES = "fe_squares"


def pooled_df(usable: Any, nn: Any) -> Any:
    """The degrees of freedom of a pooled within-cell variance: the records of the usable cells
    less one per cell (each cell's mean is estimated), at least 1. ``usable``: a mask, or the
    probability that each cell is used (the plan's expectation)."""
    return np.maximum(np.sum(usable * (nn - 1.0), axis=-1), 1.0)


def arm_weights(c: PublicConstants, nn: Any) -> Any:
    """One arm's weights ``u`` on its cells' squares in its within-cell variance: ``1 / df`` on
    the cells whose noisy count reaches ``min_count`` (the variance pooled over them,
    :func:`pooled_df`), or, where no cell of the arm does, ``1 / N_a`` on every cell (the arm's
    variance over all strata, ``N_a`` its noisy total, at least 1)."""
    kept = nn >= c.min_count
    pooled = kept / pooled_df(kept, np.where(kept, nn, 1.0))[..., None]
    total = np.ones_like(nn) / np.maximum(np.sum(nn, axis=-1), 1.0)[..., None]
    return np.where(np.any(kept, axis=-1, keepdims=True), pooled, total)


def arm_sums_part(c: PublicConstants, nn: Any, ss: Any) -> Any:
    """The part of one arm's within-cell variance that its sums give (the squares' part being
    ``sum u q``, :func:`arm_weights`): ``-sum_kept s^2 / n / df``, or ``-(sum s)^2 / N_a^2``
    where no cell is kept."""
    kept = nn >= c.min_count
    safe = np.where(kept, nn, 1.0)
    pooled = -np.sum(np.where(kept, ss * ss / safe, 0.0), axis=-1) / pooled_df(kept, safe)
    tot = np.maximum(np.sum(nn, axis=-1), 1.0)
    total = -(np.sum(ss, axis=-1) ** 2) / (tot * tot)
    return np.where(np.any(kept, axis=-1), pooled, total)


def coefficients(c: PublicConstants, cnt: Any) -> tuple[Any, Any]:
    """``(alpha, D_h)``: every cell's coefficient in ``L`` (module docstring) from the clipped
    noisy counts ``cnt`` (``(cells,)`` or ``(reps, cells)``, control then treated per stratum),
    and the histogram's denominator ``D_h = sum n_hat_t n_hat_c``."""
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    big_d = np.sum(n_t * n_c, axis=-1)
    d = big_d[..., None]
    alpha = np.empty_like(cnt, dtype=np.float64)
    alpha[..., 0::2] = n_t * n_t - c.v_n - d * arm_weights(c, n_c)
    alpha[..., 1::2] = n_c * n_c - c.v_n - d * arm_weights(c, n_t)
    return alpha, big_d


def sensitivity(c: PublicConstants, alpha: Any) -> Any:
    """``S = (max(alpha, 0) - min(alpha, 0)) B^2 / 4``, at least ``B^2 / 4``: how much one
    record moves ``L`` (its term lies in ``[min(alpha, 0), max(alpha, 0)] B^2 / 4``)."""
    spread = np.max(np.maximum(alpha, 0.0), axis=-1) - np.min(np.minimum(alpha, 0.0), axis=-1)
    return np.maximum(spread, 1.0) * c.max_var


def query_variance(c: PublicConstants, alpha: Any) -> Any:
    """The query's noise variance in ``L``'s units at these coefficients, ``2 (S b)^2`` (``b``:
    :attr:`PublicConstants.squares_scale`, its scale in normalised units): what the release
    reads and ``dpate plan`` predicts. 0 where the release has no query (a binary outcome)."""
    return 2.0 * (sensitivity(c, alpha) * (c.squares_scale or 0.0)) ** 2


def query_value(c: PublicConstants, cnt: Any, squares: Any) -> dict[str, Any]:
    """The private value on the grid, ``L / S``, from the exact centred squares (outcome units)
    and the clipped noisy counts ``cnt``."""
    alpha, _ = coefficients(c, cnt)
    value = np.sum(alpha * np.asarray(squares, dtype=np.float64), axis=-1)
    return {SQUARES: on_grid(value / sensitivity(c, alpha))[..., None]}


class SquaresPart(NamedTuple):
    """What the sandwich reads of the squares: ``L`` (``big_l``), its noise variance, the
    histogram's denominator ``D_h`` its coefficients used, and per-cell squares for the
    derivatives of the sandwich's noise (:func:`reading`)."""

    big_l: Any
    variance: Any
    big_d: Any
    cells: Any


def reading(c: PublicConstants, cnt: Any, s: Any, v: Mapping[str, Any]) -> SquaresPart:
    """``L`` as the release reads it: the query's noisy value times ``S`` where the release has
    it (``v[SQUARES]``, noise variance ``2 (S b)^2``), else ``sum alpha q`` of the cells' squares
    in ``v["squares"]`` (a binary outcome's, post-processing of its counts; or a caller's
    noise-free cells), noise variance ``v_q sum alpha^2``. The per-cell squares for the
    sandwich's noise derivatives: the given ones, or for the query ``s^2 / n + n sigma^2`` with
    one within-cell variance ``sigma^2 = (L - sum alpha s^2 / n) / sum alpha n`` read from ``L``
    (clipped to ``[0, B^2/4]``). Post-processing."""
    alpha, big_d = coefficients(c, cnt)
    if SQUARES in v and c.squares_scale is not None:
        big_l = sensitivity(c, alpha) * np.asarray(v[SQUARES], dtype=np.float64)[..., 0]
        variance = query_variance(c, alpha)
        size = np.maximum(cnt, 1.0)
        mean_part = s * s / size
        weight = np.sum(alpha * size, axis=-1)
        sigma2 = (big_l - np.sum(alpha * mean_part, axis=-1)) / np.where(weight > 0, weight, 1.0)
        sigma2 = np.clip(np.where(weight > 0, sigma2, 0.0), 0.0, c.max_var)
        return SquaresPart(big_l, variance, big_d, mean_part + size * sigma2[..., None])
    q = clipped_squares(c, v["squares"])
    return SquaresPart(np.sum(alpha * q, axis=-1), c.v_q * np.sum(alpha * alpha, axis=-1), big_d, q)


def clipped_squares(c: PublicConstants, squares: Any) -> Any:
    """A squares' vector clipped to ``N B^2 / 4`` in absolute value (the most a true one can
    hold; it may stay negative for a raw variance)."""
    bound = c.n * c.max_var
    return np.clip(np.asarray(squares, dtype=np.float64), -bound, bound)
