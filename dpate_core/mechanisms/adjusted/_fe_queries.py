"""The fixed-effects numerator and denominator as weighted-sum queries (stop 46; the proof in
docs/explanation/privacy.md, "DP subclassification", and the derivation in
docs/explanation/adjusted.md, "The fixed-effects sums as weighted-sum queries").

Given the cells' noisy histogram (counts ``n_hat``, clipped to ``[-N, N]`` as the fixed-effects
weighting reads them), the numerator ``A = sum_x (s_tx n_cx - s_cx n_tx)`` is linear in the
cells' centred sums with coefficients ``n_hat_c`` (a treated cell) and ``-n_hat_t`` (a control
cell), and ``sum_x n_tx n_hat_cx`` is linear in the treated counts. Each is one scalar query
(:mod:`dpate_core.mechanisms._weighted_query`): a record's term in the numerator, ``(Y - B/2)
coef / (max|coef| B)``, lies in ``[-1/2, 1/2]``; in the denominator a treated record's is
``n_hat_cx / S_d`` and a control's 0, ``S_d`` the largest of these terms (0 included) less the
smallest (the noisy counts may be negative: not clipped, which would bias the reading upwards
where strata are sparse): sensitivity 1 each. The readings carry
the counts' noise once (``sum (e_c s_t - e_t s_c)`` and ``sum n_t e_c``) and no sum's noise nor
product of two noises, whose ``|X| (2 v_s v_n + v_n^2)`` dominates the histogram's reading on
sparse strata; the release combines each pair of readings by their noise
(:func:`combine`). Post-processing of noisy values and public constants, except
:func:`query_values` (private: the exact cells)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid

if TYPE_CHECKING:
    from ._weightings import PublicConstants

__all__ = ["DENOMINATOR", "NUMERATOR", "Combined", "combine", "query_values"]

#: the two noise sites' names
NUMERATOR, DENOMINATOR = "fe_numerator", "fe_denominator"


def _coefficients(cnt: Any) -> tuple[Any, Any, Any, Any]:
    """``(numerator coefficients per cell, their largest |.|, denominator coefficients per
    stratum, their spread with 0)`` from the clipped noisy counts (at least 1 each, a
    divisor)."""
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    coef_a = np.empty_like(cnt)
    coef_a[..., 0::2], coef_a[..., 1::2] = -n_t, n_c
    top_a = np.maximum(np.max(np.abs(coef_a), axis=-1), 1.0)
    spread = np.maximum(np.max(n_c, axis=-1), 0.0) - np.minimum(np.min(n_c, axis=-1), 0.0)
    return coef_a, top_a, n_c, np.maximum(spread, 1.0)


def query_values(c: PublicConstants, cnt: Any, counts: Any, sums: Any) -> dict[str, Any]:
    """The two private values on the grid from the exact cells (``counts``, centred ``sums`` in
    outcome units) and the clipped noisy counts ``cnt`` (``(cells,)`` or ``(reps, cells)``)."""
    coef_a, top_a, coef_d, spread_d = _coefficients(cnt)
    a = np.sum(coef_a * np.asarray(sums, dtype=np.float64), axis=-1) / (top_a * c.bound)
    d = np.sum(coef_d * np.asarray(counts, dtype=np.float64)[..., 1::2], axis=-1) / spread_d
    return {NUMERATOR: on_grid(a)[..., None], DENOMINATOR: on_grid(d)[..., None]}


class Combined(NamedTuple):
    """The fixed-effects numerator and denominator with the queries' readings combined in."""

    big_a: Any
    big_d: Any
    var_d: Any  # the combined denominator's noise variance (what the resolution rule reads)
    weights: tuple[Any, Any, Any, Any]  # (lambda, mu, b, b_r): for the noise numerator V(t)


def combine(
    c: PublicConstants, cnt: Any, histogram: tuple[Any, Any], v: Any, scales: tuple[float, float]
) -> Combined:
    """The histogram's readings ``histogram = (A_h, D_h)`` combined with the queries' (their
    noisy values in ``v``, Laplace ``scales`` in normalised units): ``A = (1 - lambda) A_h +
    lambda A_q``, ``lambda = H / (H + b)``, ``H = v_s sum (n_t^2 + n_c^2) + 2 |X| v_s v_n`` (the
    part of the histogram's reading the query does not share); ``D = (1 - mu) D_h + mu D_r``,
    ``mu = G / (G + b_r)``, ``G = v_n sum n_c^2 + |X| v_n^2`` (``sum n_t e_c`` is in both), so
    ``Var(D) = v_n sum n_t^2 + G b_r / (G + b_r)``; the squares of noisy counts less their noise
    variance, each sum at least its pure-noise part."""
    big_a_h, big_d_h = histogram
    _, top_a, _, spread_d = _coefficients(cnt)
    v_n, v_s, k = c.v_n, c.v_s, c.n_strata
    n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
    read_a = top_a * c.bound * np.asarray(v[NUMERATOR], dtype=np.float64)[..., 0]
    read_d = spread_d * np.asarray(v[DENOMINATOR], dtype=np.float64)[..., 0]
    b = 2.0 * (top_a * c.bound * scales[0]) ** 2
    b_r = 2.0 * (spread_d * scales[1]) ** 2
    sq_t = np.maximum(np.sum(n_t * n_t - v_n, axis=-1), 0.0)
    sq_c = np.maximum(np.sum(n_c * n_c - v_n, axis=-1), 0.0)
    h = v_s * (sq_t + sq_c) + 2.0 * k * v_s * v_n
    g = v_n * sq_c + k * v_n * v_n
    lam, mu = h / (h + b), g / (g + b_r)
    big_a = (1.0 - lam) * big_a_h + lam * read_a
    big_d = (1.0 - mu) * big_d_h + mu * read_d
    var_d = v_n * sq_t + g * b_r / (g + b_r)
    return Combined(big_a, big_d, var_d, (lam, mu, b, b_r))
