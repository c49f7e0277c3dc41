"""Noise samplers and the analytic Gaussian calibration.

Two sources, chosen explicitly by the caller:

* ``rng=None`` (every real release): OpenDP's Laplace and Gaussian measurements. They draw from the
  operating system's cryptographically secure generator and sample on a discretised grid with exact
  arithmetic, which closes the floating-point attack on textbook samplers (Mironov 2012). See
  ``docs/explanation/privacy.md`` for why OpenDP and not a home-grown sampler. Integer statistics (counts and
  grid sums, :func:`integer_laplace_vector`) take the exact discrete Laplace sampler of
  :mod:`dpate_core.noise` instead: the same algorithm as OpenDP's, vectorised.
* ``rng=numpy.random.Generator`` (simulations, experiments and tests only): fast, seeded, vectorised,
  and **not** private. Nothing falls back to it silently: a release without an explicit generator
  always takes the secure path.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "gaussian",
    "integer_laplace_vector",
    "laplace",
    "laplace_vector",
]

Rng = np.random.Generator | None


@lru_cache(maxsize=1)
def _opendp() -> tuple[Any, Any]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = (dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float))
    return dp, space


def _check_rng(rng: Rng) -> None:
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng ({type(rng).__name__}) must be None (secure OpenDP noise, for releases) or a "
            f"numpy.random.Generator (simulations only)"
        )


def _check_scale(scale: float) -> None:
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"noise scale ({scale}) must be positive and finite")


_NON_FINITE = (
    "the value to be noised must be finite (no NaN or infinity): check the statistic before the "
    "release"
)


def _check_loc(loc: float) -> float:
    # the value is private: the message names the rule, never the value
    loc = float(loc)
    if not math.isfinite(loc):
        raise ValueError(_NON_FINITE)
    return loc


@lru_cache(maxsize=1)
def _opendp_vector() -> tuple[Any, Any]:
    dp, _ = _opendp()
    return dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)


def laplace(loc: float, scale: float, rng: Rng = None) -> float:
    """``loc + Lap(scale)``: secure (OpenDP) when ``rng`` is None, simulated otherwise."""
    return _scalar("laplace", loc, scale, rng)


def _scalar(kind: str, loc: float, scale: float, rng: Rng) -> float:
    """``loc`` plus one draw of ``kind`` (``"laplace"`` or ``"gaussian"``) noise of ``scale``:
    OpenDP's ``make_laplace`` / ``make_gaussian`` when ``rng`` is None, else ``rng``'s."""
    _check_rng(rng)
    _check_scale(scale)
    loc = _check_loc(loc)
    if rng is not None:
        draw = rng.laplace(0.0, scale) if kind == "laplace" else rng.normal(0.0, scale)
        return float(loc + draw)
    dp, space = _opendp()
    make = dp.m.make_laplace if kind == "laplace" else dp.m.make_gaussian
    return float(make(*space, scale=scale)(loc))


def laplace_vector(loc: npt.ArrayLike, scale: float, rng: Rng = None) -> npt.NDArray[np.float64]:
    """``loc + Lap(scale)`` independently per entry of the 1-d array ``loc``.

    The secure path (``rng`` None) is ONE OpenDP measurement on a vector domain with the L1
    distance (``make_laplace`` over ``vector_domain``): the same per-entry sampler as
    :func:`laplace`, and the privacy of the whole vector is ``L1 sensitivity / scale``.
    """
    _check_rng(rng)
    _check_scale(scale)
    arr = np.asarray(loc, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"a vector release needs a 1-d array of values (got {arr.ndim} dims)")
    if not np.isfinite(arr).all():
        raise ValueError(_NON_FINITE)
    if rng is not None:
        return arr + rng.laplace(0.0, scale, arr.shape)
    if arr.size == 0:
        return arr.copy()
    dp, _ = _opendp()
    measurement = dp.m.make_laplace(*_opendp_vector(), scale=scale)
    return np.asarray(measurement(arr.tolist()), dtype=np.float64)


def integer_laplace_vector(
    loc: npt.ArrayLike, scale: float, rng: Rng = None
) -> npt.NDArray[np.float64]:
    """``loc + noise`` per entry of the 1-d array ``loc`` of integer values (counts, grid sums).

    Secure (``rng`` None): exact discrete Laplace ``DLap(scale)`` (:mod:`dpate_core.noise`;
    the privacy map of continuous Laplace noise of the same scale: ``L1 sensitivity / scale`` for
    an integer query), or OpenDP's :func:`laplace_vector` when the scale is beyond the exact
    sampler's range (:func:`dpate_core.noise.fits`; the values are exact, so its map
    holds too). Simulated (``rng`` given): continuous ``Lap(scale)``, whose variance ``2 t^2``
    exceeds the discrete one by less than ``1/6`` (relative ``1 / (12 t^2)``)."""
    from dpate_core.noise._discrete_laplace import discrete_laplace_vector, fits

    _check_rng(rng)
    _check_scale(scale)
    arr = np.asarray(loc, dtype=np.float64)
    if rng is not None or not fits(scale):
        return laplace_vector(arr, scale, rng)
    if arr.ndim != 1:
        raise ValueError(f"a vector release needs a 1-d array of values (got {arr.ndim} dims)")
    if not np.isfinite(arr).all():
        raise ValueError(_NON_FINITE)
    return discrete_laplace_vector(arr, scale).astype(np.float64)


def gaussian(loc: float, scale: float, rng: Rng = None) -> float:
    """``loc + N(0, scale^2)``: secure (OpenDP) when ``rng`` is None, simulated otherwise."""
    return _scalar("gaussian", loc, scale, rng)


def _phi(t: float) -> float:
    """Standard normal CDF."""
    return 0.5 * math.erfc(-t / math.sqrt(2.0))


def analytic_gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """The exact delta of the Gaussian mechanism at ``epsilon`` (Balle and Wang 2018, Thm. 8)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    # e^eps * Phi(-a - b) computed in log space so large epsilon does not overflow
    tail = _phi(-a - b)
    second = 0.0 if tail == 0.0 else math.exp(epsilon + math.log(tail))
    return _phi(a - b) - second


def analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest sigma (rounded up) for which ``N(0, sigma^2)`` noise is (epsilon, delta)-DP.

    The analytic Gaussian mechanism of Balle and Wang (2018) holds for every epsilon > 0, unlike the
    classic ``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon`` that the paper's Lemma uses (valid only
    for epsilon < 1; correction 4). Bisection on the exact delta curve, which decreases in sigma;
    the upper end of the final bracket is returned, then padded by one part in 10^9 against
    rounding in the delta evaluation.
    """
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity ({sensitivity}) must be positive and finite")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon ({epsilon}) must be positive and finite")
    if not (0 < delta < 1):
        raise ValueError(f"delta ({delta}) must lie strictly between 0 and 1")
    lo, hi = sensitivity * 1e-6, sensitivity
    while analytic_gaussian_delta(hi, sensitivity, epsilon) > delta:
        lo, hi = hi, hi * 2.0
    while analytic_gaussian_delta(lo, sensitivity, epsilon) <= delta and lo > 1e-300:
        lo /= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if analytic_gaussian_delta(mid, sensitivity, epsilon) > delta:
            lo = mid
        else:
            hi = mid
    return hi * (1.0 + 1e-9)
