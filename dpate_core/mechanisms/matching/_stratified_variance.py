"""A within-cell (stratified) sampling variance for Algorithm 1's matching estimate, and its pure
DP release from noisy per-cell sufficient statistics (``docs/explanation/inference.md``, "Stratified
variance"; the privacy proof is in ``docs/explanation/privacy.md``, "Stratified variance").

Why. The appendix's ``V_hat = 1/(2N^2) sum_i (1+L_i)^2 (Yhat_i(1) - Yhat_i(0))^2`` squares
cross-arm differences, which contain the effect itself: on Synth it is 135-156 times the sampling
variance of the matching estimate. Within a stratum ``x`` Algorithm 1's estimate is linear in the
outcomes: ``tau_hat = (1/N) sum_x [sum_{T_x} (1+L_i) Y_i - sum_{C_x} (1+L_i) Y_i]`` with ``L_i``
fixed by the arm sizes and the record order. Given ``(W, X)`` and with outcomes independent, of
variance ``sigma_g^2`` in cell ``g = (x, arm)``,

    Var(tau_hat | W, X) = (1/N^2) sum_x [K(|T_x|, |C_x|) sigma_xt^2 + K(|C_x|, |T_x|) sigma_xc^2]

with ``K(own, opp) = sum over the own arm of (1 + L_i)^2``: for ``opp = q own + r``,
``L = q + [rank < r]``, so ``K = own (q+1)^2 + r (2q + 3)`` (a function of the counts only; 0 in a
stratum with an empty arm, which contributes 0 to ``tau_hat``). The stratified estimate plugs in the
within-cell sample variances ``s_g^2`` (divisor ``n_g - 1``), which are unbiased for
``sigma_g^2``: so is the estimate.

Release. The cell counts, centred sums and centred sums of squares are released as three
Laplace vector queries (:func:`dpate_core.statistics.cell_statistics`,
:func:`dpate_core.statistics.cell_noise`; sensitivities 2, ``B``, ``B^2/2``; the adjusted
estimator's until stop 43), spending the variance part of a matching release split by
:data:`SUBSPLIT`; everything after the noise is post-processing. The variance part is
then ``(eps_2, 0)``-DP with no smooth sensitivity and no data-dependent scale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "SUBSPLIT",
    "conditional_variance",
    "match_use_weight",
    "stratified_noise",
    "stratified_variance",
]

#: shares of the variance part for (cell counts, centred sums, centred squares), chosen on Synth
#: (docs/explanation/results.md, "Stratified variance"): the counts' noise enters through ``S^2 / n``, so they
#: need as much as the squares
SUBSPLIT: tuple[Fraction, ...] = (Fraction(2, 5), Fraction(1, 5), Fraction(2, 5))


def match_use_weight(own: npt.ArrayLike, opp: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``K(own, opp) = sum over the own arm of (1 + L_i)^2`` (Algorithm 1: ``L_i = q + [j < r]``
    for ``opp = q own + r``), element-wise; 0 where an arm is empty. Arrays of non-negative
    integers (floats are rounded)."""
    own = np.rint(np.asarray(own, dtype=np.float64))
    opp = np.rint(np.asarray(opp, dtype=np.float64))
    ok = (own >= 1) & (opp >= 1)
    safe = np.where(ok, own, 1.0)
    q = np.floor(np.where(ok, opp, 0.0) / safe)
    r = np.where(ok, opp, 0.0) - q * safe
    return np.where(ok, safe * (q + 1.0) ** 2 + r * (2.0 * q + 3.0), 0.0)


def conditional_variance(
    treated_counts: npt.ArrayLike,
    control_counts: npt.ArrayLike,
    sigma2_t: npt.NDArray[np.float64] | float,
    sigma2_c: npt.NDArray[np.float64] | float,
) -> float:
    """``Var(tau_hat | W, X)`` for independent outcomes with per-cell variances ``sigma2_t[x]``,
    ``sigma2_c[x]`` (the true sampling variance the estimates are measured against)."""
    t = np.asarray(treated_counts, dtype=np.float64)
    c = np.asarray(control_counts, dtype=np.float64)
    n = t.sum() + c.sum()
    total = match_use_weight(t, c) * sigma2_t + match_use_weight(c, t) * sigma2_c
    return float(np.sum(total) / (n * n))


def stratified_variance(
    w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike, domain_size: int
) -> float:
    """The non-private stratified estimate of ``Var(tau_hat | W, X)`` (module docstring): within-
    cell sample variances (divisor ``n_g - 1``; a cell of one record contributes 0)."""
    w = np.asarray(w).astype(np.int64)
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x).astype(np.int64)
    g = 2 * x + w
    size = 2 * int(domain_size)
    cnt = np.bincount(g, minlength=size).astype(np.float64)
    mean = np.bincount(g, weights=y, minlength=size) / np.maximum(cnt, 1.0)
    ss = np.bincount(g, weights=(y - mean[g]) ** 2, minlength=size)
    s2 = np.where(cnt >= 2, ss / np.maximum(cnt - 1.0, 1.0), 0.0)
    n_c, n_t = cnt[0::2], cnt[1::2]
    total = match_use_weight(n_t, n_c) * s2[1::2] + match_use_weight(n_c, n_t) * s2[0::2]
    return float(np.sum(total) / (w.size * w.size))


def stratified_noise(
    cells: Any, scales: tuple[float, ...], min_count: float
) -> tuple[tuple[Any, ...], Callable[[Mapping[str, Any]], Any]]:
    """The noise sites of the stratified variance and the post-processing that turns their noisy
    values into the estimate (floats for a release, ``(reps,)`` arrays in simulations).

    ``cells``: :class:`dpate_core.statistics.CellStatistics`; ``scales``: the Laplace scales of the
    counts, sums and squares in the units they are noised in (grid units for the sums and
    squares), computed by the caller from the sensitivities and the shares; ``min_count``: a
    stratum is used when both noisy arm counts reach it (public). The noise sites are
    :func:`dpate_core.statistics.cell_noise`'s, named ``variance_*``: the sums and squares are
    multiplied by their grid units after the draw, so the post-processing reads outcome units.

    Post-processing, per cell: counts clipped to ``[0, N]``;
    ``SS = Q - (S^2 - 2 b_s^2) / (n c)`` (``2 b_s^2`` is the mean of the squared Laplace noise of
    ``S``, public: removing it makes ``S^2`` unbiased; ``c = 1 + 2 b_n^2 / n^2`` corrects the mean
    of ``1 / n`` at a noisy count to second order where ``n > 4 b_n``, else 1);
    ``s^2 = SS / (n - 1)`` (``n - 1`` at least 1), not clamped per cell; the estimate
    ``(1/N^2) sum_usable [K(n_t, n_c) s_t^2 + K(n_c, n_t) s_c^2]`` with ``K`` at the rounded noisy
    counts. The caller clamps the total at 0 for the reported variance.
    """
    from dpate_core.statistics import cell_noise

    noise = cell_noise(cells, scales, "variance_")
    scale_n = noise[0].scale
    b_s = noise[1].value_scale  # Laplace scale of a centred sum, outcome units
    n = cells.n
    half_b = cells.bound / 2.0
    max_var = cells.bound * cells.bound / 4.0

    def estimate(v: Mapping[str, Any]) -> Any:
        cnt = np.clip(np.asarray(v["variance_counts"], dtype=np.float64), 0.0, n)
        s = np.clip(np.asarray(v["variance_sums"], dtype=np.float64), -n * half_b, n * half_b)
        q = np.clip(np.asarray(v["variance_squares"], dtype=np.float64), -n * max_var, n * max_var)
        n_c, n_t = cnt[..., 0::2], cnt[..., 1::2]
        usable = (n_t >= min_count) & (n_c >= min_count)
        safe = np.maximum(cnt, 1.0)
        # E[1 / (n + Lap(b_n))] ~ (1 + 2 b_n^2 / n^2) / n where the expansion holds (n > 4 b_n)
        corr = np.where(safe > 4.0 * scale_n, 1.0 + 2.0 * scale_n * scale_n / (safe * safe), 1.0)
        ss = q - (s * s - 2.0 * b_s * b_s) / (safe * corr)
        s2 = ss / np.maximum(cnt - 1.0, 1.0)
        k_t = match_use_weight(np.maximum(n_t, 1.0), np.maximum(n_c, 1.0))
        k_c = match_use_weight(np.maximum(n_c, 1.0), np.maximum(n_t, 1.0))
        per = np.where(usable, k_t * s2[..., 1::2] + k_c * s2[..., 0::2], 0.0)
        return np.sum(per, axis=-1) / (float(n) * float(n))

    return noise, estimate
