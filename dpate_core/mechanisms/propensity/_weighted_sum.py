"""The corrected estimate's outcome part as one scalar query: the propensity release's third stage
(stop 46; docs/research/propensity.md, "The weighted sum"; the proof in
docs/explanation/privacy.md, "Stage 3: the weighted sum").

Given the noisy model and the band cells' noisy histogram, the corrected estimate
``T = (1 + k) tau - k tau_crude`` is linear in the cells' centred sums: ``T = sum_j D_j s_j``
(``D_j = (1 + k) w_b / n_j - k / n_a`` for a used cell ``j`` of band ``b`` and arm ``a``, the
control's negated; 0 for a cell of a band left out), with ``D`` a function of noisy values only.
The histogram's sums carry noise of variance ``v_s`` each, so ``T``'s outcome noise is ``v_s
sum_j D_j^2``: it grows with the number of cells. One scalar query of the same weighted sum of
the records' outcomes has sensitivity ``max |D| B`` (one record leaves a cell and enters
another), whatever the number of cells, and Laplace variance ``2 (max |D| B / eps)^2``; at equal
budget that is ``2 sum D^2 / max D^2`` times less (6 on Synth's five bands at 2,000 records).

The query centres each record's outcome at its arm's centre ``c_a = B/2 + CENTRE_SHRINK m_a``
(``m_a`` the arm's noisy centred mean over the used bands; public after stage 2), so that the
counts' noise in ``D`` multiplies ``ybar_j - c_a`` rather than ``ybar_j - B/2``:
``Q = sum_i Dn_i (Y_i - c_a(i))``, ``Dn = D / max|D|``. Its sensitivity ``S`` is the largest
value of ``Dn_j (y - c_a)`` over cells and ``y`` in ``[0, B]`` less the smallest (``S >= B``,
``S = B`` at ``c_a = B/2``), public. The release draws ``Q / S`` on the grid of
:mod:`dpate_core.mechanisms._weighted_query` (exact discrete Laplace, a margin for the rounding
and the float evaluation), so the stage is ``(eps_q, 0)``-DP for every fixed earlier output.

The estimate (:func:`combine`): the query reads ``T`` as ``max|D| S Q_noisy + sum_j D_j n_hat_j
(c_a - B/2)``; the histogram reads it with independent noise; the two are combined by their
noise variances (``lambda = a / (a + b)``, ``a = v_s sum D^2``, ``b`` the query's). Post-processing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from dpate_core.mechanisms._weighted_query import on_grid
from dpate_core.mechanisms.adjusted import (
    Linearisation,
    PublicConstants,
    subclassification_linearisation,
)

__all__ = [
    "CENTRE_SHRINK",
    "WeightedSum",
    "band_outcome_noise",
    "combine",
    "count_derivatives",
    "query_value",
    "weighted_sum",
]

#: the arms' centres ``B/2 + CENTRE_SHRINK m_a``: measured 0 to 1 (stop 46); the full arm mean
#: makes the query's sensitivity up to twice ``max|D| B``, ``B/2`` leaves the counts' noise
#: times the arm's distance from ``B/2``
CENTRE_SHRINK = 1.0 / 3.0


def _interleaved(control: Any, treated: Any) -> Any:
    """Per-band control and treated values as one cell vector (control, treated interleaved)."""
    c, t = np.broadcast_arrays(np.asarray(control, float), np.asarray(treated, float))
    out = np.empty((*c.shape[:-1], 2 * c.shape[-1]), dtype=np.float64)
    out[..., 0::2], out[..., 1::2] = c, t
    return out


def _arm_totals(lin: Linearisation) -> tuple[Any, Any]:
    """Each arm's noisy count over the used bands (at least 1), broadcast over the bands."""
    used = lin.usable
    tot_t = np.maximum(np.sum(np.where(used, lin.nt, 0.0), axis=-1), 1.0)[..., None]
    tot_c = np.maximum(np.sum(np.where(used, lin.nc, 0.0), axis=-1), 1.0)[..., None]
    return tot_t, tot_c


class WeightedSum(NamedTuple):
    """What the third stage and the assembly both read, from noisy values only."""

    d: Any  # d T / d s per cell (control, treated interleaved), 0 for a band left out
    offset: Any  # B/2 - c_a per cell: the query's centring, relative to the histogram's
    counts: Any  # the clipped noisy counts D was built from
    scale: Any  # max|D| S: one unit of the normalised query in outcome units of T


def weighted_sum(c: PublicConstants, v: Mapping[str, Any], k: Any) -> WeightedSum:
    """``D``, the centring and the scale from the noisy histogram's vectors ``v`` (counts and
    sums, as :func:`~dpate_core.mechanisms.adjusted.histogram_vectors` gives them) and the
    correction's multiple ``k`` (from the noisy model). ``(cells,)`` or ``(reps, cells)``."""
    lin = subclassification_linearisation(c, v, np.zeros(np.shape(v["counts"])[:-1]))
    used, w = lin.usable, lin.weight
    tot_t, tot_c = _arm_totals(lin)
    kk = np.asarray(k, dtype=np.float64)[..., None]
    d = _interleaved(
        -np.where(used, (1.0 + kk) * w / lin.nc - kk / tot_c, 0.0),
        np.where(used, (1.0 + kk) * w / lin.nt - kk / tot_t, 0.0),
    )
    offset = _interleaved(
        np.broadcast_to(-CENTRE_SHRINK * np.asarray(lin.mean_c)[..., None], w.shape),
        np.broadcast_to(-CENTRE_SHRINK * np.asarray(lin.mean_t)[..., None], w.shape),
    )
    top = np.max(np.abs(d), axis=-1)
    unit = np.where(top > 0.0, top, 1.0)
    dn = d / unit[..., None]
    lo, hi = dn * (offset - c.half_b), dn * (offset + c.half_b)
    spread = np.max(np.maximum(lo, hi), axis=-1) - np.min(np.minimum(lo, hi), axis=-1)
    sens = np.maximum(spread, c.bound)  # at least one cell spans B (|Dn| = 1 there)
    counts = np.clip(np.asarray(v["counts"], dtype=np.float64), 0.0, c.n)
    return WeightedSum(d, offset, counts, unit * sens)


def query_value(ws: WeightedSum, sums: Any, counts: Any) -> Any:
    """The private value in grid units (:func:`~dpate_core.mechanisms._weighted_query.on_grid`
    of ``sum_j D_j (s_j + n_j offset_j) / scale``) from the exact cells' centred sums and counts
    (outcome units)."""
    scale = np.where(ws.scale > 0.0, ws.scale, 1.0)
    raw = np.sum(ws.d * (np.asarray(sums) + np.asarray(counts) * ws.offset), axis=-1) / scale
    return on_grid(raw)


def count_derivatives(lin: Linearisation, k: Any) -> Any:
    """``d T / d n_hat`` per cell (control, treated interleaved) of the corrected estimate read
    from the histogram: the band estimate's (``lin``, its linearisation at its noisy point and
    estimate) times ``1 + k``, less ``k`` times the crude difference's (``-m_a / n_a`` for the
    treated, ``m_c / n_c`` for the controls, over the used bands)."""
    kk = np.asarray(k, dtype=np.float64)[..., None]
    used = lin.usable
    tot_t, tot_c = _arm_totals(lin)
    y_t = np.where(used, -np.asarray(lin.mean_t)[..., None] / tot_t, 0.0)
    y_c = np.where(used, np.asarray(lin.mean_c)[..., None] / tot_c, 0.0)
    return _interleaved((1.0 + kk) * lin.d_nc - kk * y_c, (1.0 + kk) * lin.d_nt - kk * y_t)


def band_outcome_noise(lin: Linearisation, v_s: float) -> Any:
    """The band estimate's outcome part's noise variance, ``v_s sum_b w_b^2 (1/n_tb^2 +
    1/n_cb^2)`` over the used bands: what a release that keeps the factor ``(1 + k)^2`` scales
    by it (the release's and the plan's)."""
    w = lin.weight
    per_band = w * w * (1.0 / lin.nt**2 + 1.0 / lin.nc**2)
    return v_s * np.sum(np.where(lin.usable, per_band, 0.0), axis=-1)


def mean_noise(lin: Linearisation, k: Any, v_s: float) -> Any:
    """The part of ``sum g^2`` (:func:`count_derivatives`) that the noise in the noisy cell means
    adds in expectation (the delta method at the noisy point reads ``E[g^2] = g^2 + Var g``): per
    used band, ``d tau / d n_t = (m_t - m_c - ...) / N_used - w m_t / n_t`` moves with the
    treated mean (noise variance ``v_s / n_t^2``) by ``1 / N_used - w / n_t`` and with the control
    mean by ``1 / N_used``; the controls' alike. Times ``(1 + k)^2``."""
    kk = np.asarray(k, dtype=np.float64)
    used, w = lin.usable, lin.weight
    den = np.sum(np.where(used, lin.nt + lin.nc, 0.0), axis=-1, keepdims=True)
    den = np.maximum(den, 1.0)
    e_t, e_c = v_s / lin.nt**2, v_s / lin.nc**2
    var_t = (1.0 / den - w / lin.nt) ** 2 * e_t + e_c / den**2
    var_c = (w / lin.nc - 1.0 / den) ** 2 * e_c + e_t / den**2
    return (1.0 + kk) ** 2 * np.sum(np.where(used, var_t + var_c, 0.0), axis=-1)


class Combined(NamedTuple):
    """The corrected estimate with the query's reading combined in (:func:`combine`)."""

    tau: Any
    weight: Any  # lambda: the query's weight in the outcome part (its noise: a (1 - lambda))
    histogram_noise: Any  # a = v_s sum D^2: the histogram's alone
    counts_before: Any  # v_n sum g^2: the counts' part as the histogram's reading reports it
    counts_after: Any  # v_n sum (g - lambda D offset)^2 less the means' noise in it, >= 0
    gap_noise: Any  # the noise variance of (tau_crude - T) / (1 + k) from the outcome parts


def combine(
    c: PublicConstants,
    ws: WeightedSum,
    estimate: tuple[Any, Linearisation, Any],
    sums: Any,
    noisy: Any,
    noise_scale: float,
) -> Combined:
    """The corrected estimate read from the histogram (``estimate``: the estimate, the band
    estimate's linearisation and the correction's multiple ``k``; ``sums`` the histogram's
    noisy centred sums) with the query's reading of its outcome part: ``noisy`` the query's value
    in normalised units (its grid value times the site's unit), ``noise_scale`` its Laplace scale
    in the same units. Post-processing of noisy values (module docstring)."""
    tau, lin, k = estimate
    d = ws.d
    from_histogram = np.sum(d * np.asarray(sums, dtype=np.float64), axis=-1)
    from_query = ws.scale * np.asarray(noisy, dtype=np.float64) - np.sum(
        d * ws.counts * ws.offset, axis=-1
    )
    a = c.v_s * np.sum(d * d, axis=-1)
    b = 2.0 * (ws.scale * noise_scale) ** 2
    lam = np.where(a + b > 0.0, a / np.where(a + b > 0.0, a + b, 1.0), 0.0)
    out = np.asarray(tau, dtype=np.float64) + lam * (from_query - from_histogram)
    g = count_derivatives(lin, k)
    moved = g - lam[..., None] * d * ws.offset
    before = c.v_n * np.sum(g * g, axis=-1)
    after = np.maximum(c.v_n * (np.sum(moved * moved, axis=-1) - mean_noise(lin, k, c.v_s)), 0.0)
    # the gap reads the crude difference (coefficients y on the histogram's sums) less T, whose
    # histogram part carries 1 - lambda of its sums' noise and whose query part lambda of b
    y = crude_coefficients(lin)
    resid = y - (1.0 - lam[..., None]) * d
    kk = np.asarray(k, dtype=np.float64)
    gap = (c.v_s * np.sum(resid * resid, axis=-1) + lam * lam * b) / (1.0 + kk) ** 2
    return Combined(out, lam, a, before, after, gap)


def crude_coefficients(lin: Linearisation) -> Any:
    """The crude difference's derivatives with respect to each cell's centred sum: ``1 / n_t``
    over the used bands' treated cells, ``-1 / n_c`` over their controls' (0 elsewhere)."""
    used = lin.usable
    tot_t, tot_c = _arm_totals(lin)
    return _interleaved(np.where(used, -1.0 / tot_c, 0.0), np.where(used, 1.0 / tot_t, 0.0))
