"""The fixed-effects numerator and denominator as capped weighted-sum queries (the proofs in
docs/explanation/privacy.md, "DP subclassification", the derivation in
docs/explanation/adjusted.md, "The fixed-effects sums as weighted-sum queries").

Given the cells' noisy histogram (counts ``n_hat``, clipped to ``[-N, N]`` as the fixed-effects
weighting reads them), the numerator ``A = sum_x (s_tx n_cx - s_cx n_tx)`` is linear in the
cells' centred sums with coefficients ``n_hat_c`` (a treated cell) and ``-n_hat_t`` (a control
cell), and ``sum_x n_tx n_hat_cx`` is linear in the treated counts. Each coefficient is split at a
cap, ``n_hat = c + r``: the capped part ``c`` is one scalar query
(:mod:`dpate_core.mechanisms._weighted_query`) and the rest ``r`` (what lies beyond the cap) is
read from the histogram. In the numerator ``c = clip(n_hat, -C_a, C_a)`` and a record's term
``(Y - B/2) c / (C_a B)`` lies in ``[-1/2, 1/2]``; in the denominator ``c = clip(n_hat_c, -L_d,
C_d)``, ``L_d`` either 0 or ``C_d``, and a treated record's term ``c / (C_d + L_d)`` lies in an
interval of length 1 that holds 0, a control's term: sensitivity 1 each, so each query's noise is
set by its cap, whatever the largest stratum.

The caps are post-processing of the noisy counts (:func:`best_cap`): the one that minimises the
combined reading's noise variance, ``v S_nn - v^2 S_cn^2 / (v S_cc + beta C^2)`` (``S_cc = sum
c^2``, ``S_cn = sum c n_hat``, ``S_nn = sum n_hat^2``; ``beta C^2`` the query's noise variance),
over the noisy counts themselves as candidates. The capped part's two readings are combined by
their noise (:func:`combine`); the readings of ``c`` carry the counts' noise once (``sum (e_c s_t
- e_t s_c)`` and ``sum n_t e_c``) and no sum's noise nor product of two noises. Post-processing
of noisy values and public constants, except :func:`query_values` (private: the exact cells)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid

if TYPE_CHECKING:
    from ._weightings import PublicConstants

__all__ = [
    "DENOMINATOR",
    "NUMERATOR",
    "Combined",
    "QueryWeights",
    "best_cap",
    "caps",
    "combine",
    "denominator_variance",
    "query_values",
    "query_weights",
]

#: the two noise sites' names
NUMERATOR, DENOMINATOR = "fe_numerator", "fe_denominator"


def best_cap(values: Any, beta: float, signed: bool = True) -> tuple[Any, Any]:
    """Per row of ``values`` (noisy counts, ``(m,)`` or ``(reps, m)``), ``(C, gain)``: the cap
    ``C >= 1`` that maximises ``gain = S_cn(C)^2 / (S_cc(C) + beta C^2)`` with ``c =
    clip(values, -C, C)`` (``signed``) or ``clip(values, 0, C)``: the noise variance the capped
    query's reading removes from the histogram's, per unit of the histogram's variance per
    coefficient squared, ``beta C^2`` the query's own. The candidates are the values' magnitudes
    of at least 1 (negative values count only where ``signed``): with them sorted ``p_1 <= ... <=
    p_m``, at ``C = p_j`` ``S_cc = P2_j + (m - j) p_j^2`` and ``S_cn = P2_j + p_j (P1_m - P1_j)``
    (``P1``, ``P2`` the prefix sums of ``p`` and ``p^2``): ``O(m log m)``, no loop."""
    x = np.asarray(values, dtype=np.float64)
    p = np.sort(np.abs(x) if signed else np.maximum(x, 0.0), axis=-1)
    m = p.shape[-1]
    p1, p2 = np.cumsum(p, axis=-1), np.cumsum(p * p, axis=-1)
    above = m - 1 - np.arange(m)  # values after position j
    s_cc = p2 + above * p * p
    s_cn = p2 + p * (p1[..., -1:] - p1)
    gain = np.where(p >= 1.0, s_cn * s_cn / np.maximum(s_cc + beta * p * p, 1e-300), 0.0)
    j = np.argmax(gain, axis=-1)[..., None]
    best = np.take_along_axis(p, j, axis=-1)[..., 0]
    return np.maximum(best, 1.0), np.take_along_axis(gain, j, axis=-1)[..., 0]


def caps(c: PublicConstants, cnt: Any) -> tuple[Any, Any, Any]:
    """``(C_a, C_d, L_d)`` from the clipped noisy counts ``cnt``: the numerator's coefficients
    are capped to ``[-C_a, C_a]`` (:func:`best_cap` over every cell, ``beta = 2 (B b_a)^2 / v_s``:
    its sensitivity ``C_a B`` whatever the sign), the denominator's to ``[-L_d, C_d]``, ``L_d``
    either ``C_d`` (sensitivity ``2 C_d``, ``beta = 2 (2 b_d)^2 / v_n``) or 0 (``C_d``, ``beta =
    2 b_d^2 / v_n``), whichever removes more (over the control counts); ``b_a``, ``b_d`` the
    queries' Laplace scales in normalised units, :attr:`PublicConstants.query_scales`."""
    assert c.query_scales is not None
    scale_a, scale_d = c.query_scales
    cap_a = best_cap(cnt, 2.0 * (c.bound * scale_a) ** 2 / c.v_s)[0]
    both, gain_both = best_cap(cnt[..., 0::2], 2.0 * (2.0 * scale_d) ** 2 / c.v_n)
    above, gain_above = best_cap(cnt[..., 0::2], 2.0 * scale_d**2 / c.v_n, signed=False)
    signed = gain_both > gain_above
    return cap_a, np.where(signed, both, above), np.where(signed, both, 0.0)


def _capped(cnt: Any, low: Any, high: Any) -> Any:
    return np.clip(
        cnt,
        -np.asarray(low, dtype=np.float64)[..., None],
        np.asarray(high, dtype=np.float64)[..., None],
    )


def query_values(c: PublicConstants, cnt: Any, counts: Any, sums: Any) -> dict[str, Any]:
    """The two private values on the grid from the exact cells (``counts``, centred ``sums`` in
    outcome units) and the clipped noisy counts ``cnt`` (``(cells,)`` or ``(reps, cells)``)."""
    cap_a, cap_d, low_d = caps(c, cnt)
    part = _capped(cnt, cap_a, cap_a)
    coef = np.empty_like(part)
    coef[..., 0::2], coef[..., 1::2] = -part[..., 1::2], part[..., 0::2]
    a = np.sum(coef * np.asarray(sums, dtype=np.float64), axis=-1) / (cap_a * c.bound)
    part_d = _capped(cnt[..., 0::2], low_d, cap_d)
    spread = cap_d + low_d
    d = np.sum(part_d * np.asarray(counts, dtype=np.float64)[..., 1::2], axis=-1) / spread
    return {NUMERATOR: on_grid(a)[..., None], DENOMINATOR: on_grid(d)[..., None]}


class QueryWeights(NamedTuple):
    """How the queries' readings enter: the numerator's capped part moves ``lam`` of its sums'
    noise to the numerator query (noise variance ``b``), the denominator's ``mu`` of its treated
    counts' noise to the denominator query (``b_r``); the caps and each cell's capped part
    (``part``: every cell's numerator coefficient, ``part_d``: every stratum's denominator one),
    computed once from the noisy counts."""

    lam: Any
    mu: Any
    b: Any
    b_r: Any
    cap_a: Any
    cap_d: Any
    low_d: Any
    part: Any
    part_d: Any

    def kept(self, cnt: Any) -> tuple[Any, Any, Any]:
        """Per stratum, the coefficients of the noise the histogram's readings keep: of the
        treated and the control sums' noise, ``n_hat_t - lam c_t`` and ``n_hat_c - lam c_c``, and
        of the treated counts' noise in the denominator, ``n_hat_c - mu c_c``."""
        lam, mu = (np.asarray(x, dtype=np.float64)[..., None] for x in (self.lam, self.mu))
        n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
        keep_c = n_c - mu * self.part_d
        return n_t - lam * self.part[..., 1::2], n_c - lam * self.part[..., 0::2], keep_c


class Combined(NamedTuple):
    """The fixed-effects numerator and denominator with the queries' readings combined in."""

    big_a: Any
    big_d: Any
    var_d: Any  # the combined denominator's noise variance (what the resolution rule reads)
    weights: QueryWeights  # for the noise numerator V(t)


def _weight(v: float, s_cn: Any, s_cc: Any, query_var: Any) -> Any:
    """The share of the capped part's histogram noise a query's reading replaces: ``v S_cn /
    (v S_cc + query_var)``, which minimises ``v sum (n_hat - w c)^2 + w^2 query_var``."""
    return v * s_cn / np.maximum(v * s_cc + query_var, 1e-300)


def combine(
    c: PublicConstants, vectors: tuple[Any, Any], histogram: tuple[Any, Any], v: Any
) -> Combined:
    """The histogram's readings ``histogram = (A_h, D_h)`` of its clipped noisy counts and sums
    (``vectors``) combined with the queries' (their noisy values in ``v``, Laplace scales
    :attr:`PublicConstants.query_scales` in normalised units): ``A = A_h - lambda (A_h^c -
    A_q)``, ``A_h^c = sum (c_c s_hat_t - c_t s_hat_c)`` the histogram's reading of the capped
    part, ``A_q`` the query's (noise variance ``b = 2 (C_a B b_a)^2``), ``lambda`` by
    :func:`_weight` from the noisy counts; ``D = D_h - mu (sum c_c n_hat_t - D_r)``, ``b_r = 2
    (C_d b_d)^2``, so that ``Var(D) = v_n sum n_t^2 + v_n sum (n_hat_c - mu c_c)^2 + mu^2 b_r``
    (the first term's squares of noisy counts less their noise variance, at least 0)."""
    big_a_h, big_d_h = histogram
    cnt, s = vectors
    weights = query_weights(c, cnt)
    part, part_c = weights.part, weights.part_d
    read_a = weights.cap_a * c.bound * np.asarray(v[NUMERATOR], dtype=np.float64)[..., 0]
    spread = weights.cap_d + weights.low_d
    read_d = spread * np.asarray(v[DENOMINATOR], dtype=np.float64)[..., 0]
    hist_a = np.sum(part[..., 0::2] * s[..., 1::2] - part[..., 1::2] * s[..., 0::2], axis=-1)
    big_a = big_a_h - weights.lam * (hist_a - read_a)
    big_d = big_d_h - weights.mu * (np.sum(part_c * cnt[..., 1::2], axis=-1) - read_d)
    return Combined(big_a, big_d, denominator_variance(c, cnt, weights), weights)


def query_weights(c: PublicConstants, cnt: Any) -> QueryWeights:
    """The caps (:func:`caps`), the queries' noise variances ``b = 2 (C_a B b_a)^2`` and ``b_r =
    2 (C_d b_d)^2`` and the weights ``lambda``, ``mu`` (:func:`_weight`) from the clipped noisy
    counts alone: what :func:`combine` applies and ``dpate plan`` simulates."""
    assert c.query_scales is not None
    scale_a, scale_d = c.query_scales
    cap_a, cap_d, low_d = caps(c, cnt)
    part = _capped(cnt, cap_a, cap_a)
    part_c = _capped(cnt[..., 0::2], low_d, cap_d)
    b = 2.0 * (cap_a * c.bound * scale_a) ** 2
    b_r = 2.0 * ((cap_d + low_d) * scale_d) ** 2
    lam = _weight(c.v_s, np.sum(part * cnt, axis=-1), np.sum(part * part, axis=-1), b)
    n_c = cnt[..., 0::2]
    mu = _weight(c.v_n, np.sum(part_c * n_c, axis=-1), np.sum(part_c * part_c, axis=-1), b_r)
    return QueryWeights(lam, mu, b, b_r, cap_a, cap_d, low_d, part, part_c)


def denominator_variance(c: PublicConstants, cnt: Any, weights: QueryWeights) -> Any:
    """The combined denominator's noise variance, ``v_n sum n_t^2 + v_n sum (n_hat_c - mu
    c_c)^2 + mu^2 b_r``, the first term's squares of noisy counts less their noise variance (at
    least 0): what the resolution rule reads."""
    n_t = cnt[..., 1::2]
    keep_d = weights.kept(cnt)[2]
    sq_t = np.maximum(np.sum(n_t * n_t - c.v_n, axis=-1), 0.0)
    return c.v_n * (sq_t + np.sum(keep_d * keep_d, axis=-1)) + weights.mu**2 * weights.b_r
