"""The band cells read by regression on the model's index, within and across the bands
(docs/research/propensity.md, "Regression on the index within and across the bands").

The band estimate compares each band's own noisy arm means, ``tau = sum_b w_b (m_tb - m_cb)``.
Where the confounding is strong two things hold it back: a tail band's rare arm (a cell of a few
records whose noisy mean carries most of the cells' noise) and the confounding left within the
bands (a band's treated sit higher on the index than its controls). From the public size
:data:`REGRESSION_FROM` the release reads the same noisy cells through a line per arm ``a``:

* each usable band's arm mean ``m_ab`` sits at the arm's mean index in the band under the
  model's own picture, ``x_ab`` (:func:`band_positions`; stage 1's post-processing);
* the line ``p_a(x) = m_a + beta_a (x - x_a)`` is the weighted least-squares fit through them,
  each weighted by ``1 / V_ab``, ``V_ab = (v_s + m_ab^2 v_n) / n_ab^2 + s_a^2 / n_ab`` (its sum's
  and count's noise at the public scales and its sampling from the arm's pooled within-band
  variance): ``m_a``, ``x_a`` the weighted means, ``beta_a`` the weighted slope;
* both arms' lines are read at the band's own mean index ``x_b`` (the arms' positions mixed by
  the band's noisy counts): ``tau_R = sum_b w_b (p_t(x_b) - p_c(x_b))``.

A tail band's rare arm borrows from the other bands, and within a band the arms are compared at
the same index (Rosenbaum and Rubin's covariance adjustment on the score). ``tau_R`` is linear in
the cell means, ``sum_b g_tb m_tb - g_cb m_cb`` with ``g_ab = W (omega_ab / Omega_a) (1 + (X -
x_a) (x_ab - x_a) Omega_a / S_a)``, ``omega_ab = 1 / V_ab``, ``Omega_a`` their sum, ``S_a =
sum_b omega_ab (x_ab - x_a)^2``, ``W = sum_b w_b`` (about 1) and ``X = sum_b w_b x_b / W``;
its delta method is the band estimate's with ``g`` for ``w`` (:func:`band_regression`). A
release with fewer than :data:`REGRESSION_BANDS` usable bands keeps the band estimate.

The release (:func:`~._release._assemble`) does not extrapolate ``tau_R`` by the attenuation
correction: the regression on the noisy index removes nearly all the confounding the correction
assumes the noisy bands left (measured on the mild Synth at 2,000 records per site: ``tau_R``
+0.0006 from an effect of 0.3, the corrected ``-0.0026``; with strong confounding +0.004, which
the shared sd carries). Its variance is the band estimate's sampling and cells' noise parts each
scaled by the regression's delta method over the band estimate's at the same per-cell
variances, plus the model draw's ``(rho (tau_crude - tau_R))^2`` and the square of its shared
sd, :data:`REGRESSION_SHARED` of the band estimate's. Everything here is post-processing of the
model vector and the band cells: the privacy proof does not change.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from dpate_core.mechanisms.adjusted import Linearisation, PublicConstants
from dpate_core.privacy import Number

from ._band_edges import band_moments
from ._fit import PropensityModel

__all__ = [
    "REGRESSION_BANDS",
    "REGRESSION_FROM",
    "REGRESSION_SHARED",
    "BandRegression",
    "band_positions",
    "band_regression",
    "is_regressed",
    "variance_scales",
]

#: the model's own size ``N x epsilon_model`` from which the release regresses: below it the
#: model's picture of the arms is mostly its own noise, its positions far apart, and the lines
#: extrapolate wildly (IHDP's and Lalonde's sites, 100-150: root mean squared errors of 0.8 to
#: 26 on outcomes in [0, 1]); from 400, with the attenuation correction applied, the mild Synth
#: at 1,000 records per site came out biased (-0.009 to -0.011 on 0.3) and under-covered
#: (0.91-0.93). The corrected estimate's own delta method's size,
#: :data:`~._release.LINEARISED_FROM`. Public
REGRESSION_FROM = 750
#: the fewest usable bands a release regresses on (a line through two bands' means is exact and
#: its slope all noise)
REGRESSION_BANDS = 3
#: the shared sd's multiple where the release regresses: what the bands leave of the
#: confounding, ``r (1 + k) |gap|`` of the band estimate, is mostly the part linear in the
#: index, which the regression within the bands removes; the rest was chosen by measurement
#: (docs/research/propensity.md, in a what-if with the attenuation correction applied: the
#: whole multiple over-covered strong confounding from 2,000 records per site, 0.97-1.00, none
#: under-covered extreme confounding at 5,000, 0.89-0.93)
REGRESSION_SHARED = Fraction(1, 2)


def is_regressed(n: int, epsilon_model: Number) -> bool:
    """Whether a release of ``n`` records whose model has ``epsilon_model`` reads its band cells
    by regression on the index (public: ``N`` and the model's epsilon, exact)."""
    return Fraction(n) * Fraction(epsilon_model) >= REGRESSION_FROM


def band_positions(model: PropensityModel, edges: np.ndarray) -> np.ndarray:
    """``(2, K)``: each arm's (control, treated) mean index in every band of inner ``edges``
    (at least one) under the model's per-arm normals (:func:`~._band_edges.band_moments`);
    where an arm's normal has no mass in a band, the band's middle (an outer band's: half a unit
    beyond its edge)."""
    mass, first = band_moments(model.means, model.variances, edges)
    cuts = np.concatenate([[edges[0] - 1.0], edges, [edges[-1] + 1.0]])
    middle = 0.5 * (cuts[:-1] + cuts[1:])
    inner = np.where(mass > 1e-12, first / np.maximum(mass, 1e-300), middle[None, :])
    return np.asarray(inner, dtype=np.float64)


def variance_scales(own: tuple[Any, Any], band: tuple[Any, Any]) -> tuple[Any, Any]:
    """The regression's sampling and cells' noise variances over the band estimate's, each the
    ratio of their delta methods' ``k``-free terms at the same per-cell variances (``own``,
    ``band``: :func:`~._release.correction_coefficients` of the regression's and of the band
    estimate's linearisation); 1 where the band estimate's term is 0. The release scales the
    band estimate's reported parts by them, and ``dpate plan`` its predicted parts."""
    out = []
    for a, b in zip(own, band, strict=True):
        num, den = np.asarray(a[0], dtype=np.float64), np.asarray(b[0], dtype=np.float64)
        out.append(np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), 1.0))
    return out[0], out[1]


class BandRegression(NamedTuple):
    """The regression's estimate and its delta method (:func:`band_regression`)."""

    #: ``tau_R`` per release; the band estimate's where fewer than :data:`REGRESSION_BANDS`
    #: bands are usable
    tau: Any
    #: ``tau_R``'s linearisation over the band cells: the band estimate's with ``g_t`` for its
    #: weight (``weight``) and ``g_c`` for the controls' (``weight_c``), and the counts'
    #: derivatives through the arm means and the bands' weights
    lin: Linearisation
    #: whether the release regressed (enough usable bands)
    regressed: Any


def band_regression(
    lin: Linearisation, positions: Any, tau: Any, c: PublicConstants
) -> BandRegression:
    """``tau_R`` (module docstring) from the band estimate's linearisation ``lin`` (its usable
    bands, noisy arm counts and means, weights and pooled within-band variances) and each
    release's arm ``positions`` (``(..., 2, K)``, :func:`band_positions`); ``tau`` the band
    estimate, kept where fewer than :data:`REGRESSION_BANDS` bands are usable. Vectorised over
    releases; post-processing."""
    used = np.asarray(lin.usable, dtype=bool)
    x = np.asarray(positions, dtype=np.float64)
    x_c, x_t = x[..., 0, :], x[..., 1, :]
    n_t, n_c = np.asarray(lin.nt, np.float64), np.asarray(lin.nc, np.float64)
    # the band's own mean index: the arms' positions mixed by the band's noisy counts
    x_b = (n_t * x_t + n_c * x_c) / np.maximum(n_t + n_c, 1e-12)
    w = np.asarray(lin.weight, dtype=np.float64)
    # the bands' weights sum to W (about 1: N_used is read with less noise than the bands'
    # sizes); both lines are read at X = sum_b w_b x_b / W
    total_w = np.sum(w, axis=-1, keepdims=True)
    at = np.sum(w * x_b, axis=-1, keepdims=True) / np.maximum(total_w, 1e-300)
    coefficient, fitted = [], []
    arms = ((n_t, lin.cell_t, x_t, lin.var_t), (n_c, lin.cell_c, x_c, lin.var_c))
    for n, cell, pos, s2 in arms:
        m = np.where(used, np.asarray(cell, np.float64), 0.0)
        var = (c.v_s + m * m * c.v_n) / (n * n) + np.asarray(s2, np.float64) / n
        omega = np.where(used, 1.0 / np.maximum(var, 1e-300), 0.0)
        total = np.maximum(np.sum(omega, axis=-1, keepdims=True), 1e-300)
        x_a = np.sum(omega * pos, axis=-1, keepdims=True) / total
        m_a = np.sum(omega * m, axis=-1, keepdims=True) / total
        s_a = np.sum(omega * (pos - x_a) ** 2, axis=-1, keepdims=True)
        apart = s_a > 1e-12 * total  # else the positions do not separate: the constant
        safe = np.where(apart, s_a, 1.0)
        beta = np.where(apart, np.sum(omega * (pos - x_a) * (m - m_a), axis=-1, keepdims=True), 0.0)
        lever = np.where(apart, (at - x_a) * total / safe, 0.0)
        coefficient.append(total_w * omega / total * (1.0 + lever * (pos - x_a)))
        fitted.append(m_a + beta / safe * (x_b - x_a))
    g_t, g_c = coefficient
    regressed = np.sum(used, axis=-1) >= REGRESSION_BANDS
    tau_r = np.where(regressed, np.sum(w * (fitted[0] - fitted[1]), axis=-1), tau)
    # the counts' derivatives: through the arm means (g over the count, as the band estimate's
    # w) and through the bands' weights, each band's fitted effect at its own index standing
    # for its noisy difference (:func:`~dpate_core.mechanisms.adjusted._count_gradients`)
    half = c.half_b
    effect = np.clip(fitted[0] - fitted[1], -c.bound, c.bound)
    alpha = np.asarray(lin.share_used, dtype=np.float64)[..., None]
    through = (effect - alpha * np.nan_to_num(tau_r)[..., None]) / np.asarray(lin.den)[..., None]
    in_t = np.clip(np.asarray(lin.cell_t, np.float64), -half, half)
    in_c = np.clip(np.asarray(lin.cell_c, np.float64), -half, half)
    keep = regressed[..., None] & used
    reg = lin._replace(
        weight=np.where(keep, g_t, w),
        weight_c=np.where(keep, g_c, w),
        d_nt=np.where(keep, through - g_t * in_t / n_t, lin.d_nt),
        d_nc=np.where(keep, through + g_c * in_c / n_c, lin.d_nc),
    )
    return BandRegression(tau_r, reg, regressed)
