"""``dpate plan`` for the propensity release: its predicted sampling, noise and reported variances
from public inputs and stated assumptions (``docs/research/propensity.md``, "Planning").

The prediction follows the release's three steps:

1. the model's noise: the index noise the fitted model reports (:attr:`PropensityModel.noise_share`,
   :func:`~._model.fit_model`'s delta method), at the assumed arm counts spread evenly over each
   categorical covariate's levels and each numeric covariate's rescaled value with variance
   :data:`ASSUMED_NUMERIC_SPREAD`, against the true index's variance (the square of the stated
   ``Assumptions.propensity_sd``, else :data:`ASSUMED_INDEX_VARIANCE`): the noise share ``rho``
   (:func:`predicted_noise_share`);
2. the bands: the true index normal around the logit of the assumed treated share, the model's
   index that plus its noise, ``K`` equal bands of the latter; each band's treated share is the
   mean propensity of its records (:func:`band_counts`), so treated records gather in the upper
   bands as they do in a release, the more so the less noisy the model;
3. the estimate: the adjusted release's subclassification prediction on those band counts with
   the band cells' share of the budget, times the attenuation correction's factor
   ``(1 + k)^2``, plus the model-noise variance the release reports, ``rho^2 gap^2``, whose
   ``gap`` (the noisy crude difference less the noisy estimate) is the assumed confounding
   (:attr:`~dpate_core.planning.Assumptions.confounding`) plus the estimate's own error.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms.adjusted import ADJUSTED, AdjustedOptions
from dpate_core.privacy import BudgetSplit

from ._release import ATTENUATION_CAP, BANDS, DEFAULT_SPLIT

if TYPE_CHECKING:
    from dpate_core.planning import PredictionInputs

__all__ = [
    "ASSUMED_INDEX_VARIANCE",
    "ASSUMED_NUMERIC_SPREAD",
    "band_counts",
    "bands_of",
    "predict",
    "predicted_noise_share",
    "resolution",
]

#: the variance of the true propensity index (the logit of the propensity; sd 1: a c-statistic of
#: about 0.76) assumed unless the plan states it (``Assumptions.propensity_sd``), against which
#: the model's predicted noise gives its noise share
ASSUMED_INDEX_VARIANCE = 1.0
#: the assumed variance within an arm of a numeric covariate's value rescaled to ``[-1, 1]`` by
#: its public bounds (sd a third of the bounds' half-width: the bounds about three sd from the
#: middle)
ASSUMED_NUMERIC_SPREAD = 1.0 / 9.0


def bands_of(options: Any) -> int:
    """``K``, the number of bands of the estimator's options (None: the default)."""
    return BANDS if options is None else int(options.bands)


def _shares(inp: PredictionInputs) -> tuple[Fraction, ...]:
    d = inp.design
    return (
        BudgetSplit(d.split).shares
        if len(d.split) == 4
        else BudgetSplit.of(DEFAULT_SPLIT, 4).shares
    )


def _index_variance(inp: PredictionInputs) -> float:
    sd = inp.assumptions.propensity_sd
    return ASSUMED_INDEX_VARIANCE if sd is None else max(float(sd) ** 2, 1e-6)


def _columns(inp: PredictionInputs) -> tuple[tuple[int, ...], int]:
    """The categorical columns' level counts and the number of numeric ones: the spec's, else
    ``log2 |X|`` binary covariates (the strata's count if each covariate had two levels)."""
    if inp.covariate_sizes or inp.bounded_covariates:
        return tuple(s for s in inp.covariate_sizes if s > 1), int(inp.bounded_covariates)
    p = max(1, round(math.log2(max(inp.domain_size, 2))))
    return (2,) * p, 0


def predicted_noise_share(inp: PredictionInputs) -> tuple[float, float]:
    """``(rho, index noise)``: the model's predicted noise share and its index noise variance
    (module docstring, step 1). The model query's Laplace scale is ``Delta_m / eps_m`` in counts
    (``Delta_m = 2 + 2 p_cat + 3 p_num``); a categorical covariate with ``L`` levels adds
    ``v (1 / c_1^2 + 1 / c_0^2)``, ``c_a = n_a / L + scale`` its smoothed cell counts; a numeric
    one ``v (1 / n_1^2 + 1 / n_0^2) / s^2`` (``v = 2 scale^2``)."""
    d = inp.design
    levels, p_num = _columns(inp)
    eps_m = float(d.epsilon * _shares(inp)[0])
    scale = (2.0 + 2.0 * len(levels) + 3.0 * p_num) / eps_m
    v = 2.0 * scale * scale
    a = min(max(inp.assumptions.arm_share, 0.01), 0.99)
    n1, n0 = max(d.n * a, 1.0), max(d.n * (1 - a), 1.0)
    lv = np.asarray(levels, dtype=np.float64)
    cat = float(np.sum(v * (1.0 / (n1 / lv + scale) ** 2 + 1.0 / (n0 / lv + scale) ** 2)))
    num = p_num * v * (1.0 / (n1 + scale) ** 2 + 1.0 / (n0 + scale) ** 2) / ASSUMED_NUMERIC_SPREAD
    noise = cat + num
    return min(noise / (_index_variance(inp) + noise), 1.0), noise


def band_counts(
    n: int, arm_share: float, index_noise: float, bands: int, index_variance: float = 1.0
) -> tuple[Any, Any]:
    """The assumed ``(treated, control)`` counts of the ``K`` bands (module docstring, step 2):
    the true index ``eta ~ N(mu, s^2)`` (``s^2`` ``index_variance``, ``mu`` such that
    the mean propensity is the treated share: ``mu = logit(a) sqrt(1 + pi s^2 / 8)``, the probit
    approximation), the model's index ``eta + e`` with ``Var e`` the index noise; a band's
    treated share is the mean over its records of ``E[expit(eta) | eta + e]`` (probit
    approximation again), on a fine grid of the model's index."""
    a = min(max(arm_share, 0.01), 0.99)
    s2 = float(index_variance)
    mu = math.log(a / (1 - a)) * math.sqrt(1 + math.pi * s2 / 8)
    total = s2 + max(index_noise, 0.0)
    # the model's index on a grid of its quantiles, each point 1/G of the records
    grid = 4000
    q = (np.arange(grid) + 0.5) / grid
    z = np.asarray(np.frompyfunc(NormalDist().inv_cdf, 1, 1)(q), dtype=np.float64)
    observed = mu + math.sqrt(total) * z
    cond_mean = mu + (s2 / total) * (observed - mu)
    cond_var = s2 * max(index_noise, 0.0) / total
    e = 1.0 / (1.0 + np.exp(-cond_mean / np.sqrt(1.0 + math.pi * cond_var / 8.0)))
    band = (np.arange(grid) * bands) // grid
    share = np.bincount(band, weights=e, minlength=bands) / np.bincount(band, minlength=bands)
    per_band = n / bands
    treated = per_band * share
    return treated, per_band - treated


def _band_inputs(inp: PredictionInputs, index_noise: float) -> PredictionInputs:
    """The adjusted subclassification's prediction inputs on the ``K`` bands with the band
    cells' share of the budget (the model's share spent first) and the bands' assumed counts."""
    d = inp.design
    shares = _shares(inp)
    rest = 1 - shares[0]
    design = dataclasses.replace(
        d, epsilon=d.epsilon * rest, delta=Fraction(0), split=tuple(s / rest for s in shares[1:])
    )
    bands = bands_of(inp.options)
    assumptions = dataclasses.replace(inp.assumptions, occupied_strata=None)
    return dataclasses.replace(
        inp,
        design=design,
        domain_size=bands,
        assumptions=assumptions,
        options=AdjustedOptions(weighting="subclassification"),
        strata_counts=band_counts(
            d.n, inp.assumptions.arm_share, index_noise, bands, _index_variance(inp)
        ),
    )


def _factor(rho: float) -> float:
    k = min(rho / max(1.0 - rho, 1e-12), ATTENUATION_CAP)
    return (1.0 + k) ** 2


def _model_variance(inp: PredictionInputs, rho: float, sampling: float, noise: float) -> float:
    """The model-noise variance the release reports, ``rho^2 gap^2`` in expectation: ``gap`` is
    the assumed confounding plus the error of the estimate before the correction (its sampling
    and noise variances; the crude difference's own error is small beside it)."""
    c = inp.assumptions.confounding
    return rho * rho * (c * c + sampling + noise)


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
    """``dpate plan`` for the propensity release (module docstring): ``(sampling, noise,
    reported)`` variances, the noise including the model's (the correction's factor and the
    model-noise variance)."""
    rho, index_noise = predicted_noise_share(inp)
    band = _band_inputs(inp, index_noise)
    sampling, noise, _ = ADJUSTED.predict(band)
    assert ADJUSTED.resolution is not None
    p, v = ADJUSTED.resolution(band)
    f = _factor(rho)
    model = _model_variance(inp, rho, sampling, noise)
    if p <= 0.0 or not math.isfinite(v):
        return sampling * f, noise * f + model, inp.bound * inp.bound / 3.0
    resolved = v * f + model
    half_b = inp.bound / 1.959963984540054
    reported = (p * math.sqrt(resolved) + (1.0 - p) * half_b) ** 2
    return sampling * f, noise * f + model, reported


def resolution(inp: PredictionInputs) -> tuple[float, float]:
    """The probability that the release resolves an estimate and the variance it then reports
    (the band subclassification's, with the model's noise)."""
    rho, index_noise = predicted_noise_share(inp)
    band = _band_inputs(inp, index_noise)
    assert ADJUSTED.resolution is not None
    p, v = ADJUSTED.resolution(band)
    sampling, noise, _ = ADJUSTED.predict(band)
    return p, v * _factor(rho) + _model_variance(inp, rho, sampling, noise)
