"""``dpate plan`` for the propensity release: its predicted sampling, noise and reported variances
from public inputs and stated assumptions (``docs/research/propensity.md``, "Planning").

The prediction follows the release's steps:

1. the model's releases, simulated (:func:`simulated_releases`, seeded numpy noise): the model
   query's Laplace noise at the release's scale on the model vector of records as the plan
   assumes them (each categorical covariate's levels equally common, each numeric covariate's
   rescaled value around the middle of its bounds, :data:`ASSUMED_NUMERIC_CENTRE`, with variance
   :data:`ASSUMED_NUMERIC_SPREAD`, none associated with the treatment), fitted as
   :func:`~._model.fit_model` fits it; per release, each band's share of the records (the
   model's band edges against the records' index: a noisy model's edges miss where the records
   lie, and at a few hundred records most releases put nearly all of them in one or two bands)
   and the noise share the release reports (its index noise over the stated true index's
   variance, ``Assumptions.propensity_sd``, plus the spread its noise gives the model's index).
   ``Assumptions.band_occupancy`` states the occupancy instead (:func:`occupancy_fractions`);
2. the bands' treated shares: the true index normal around the logit of the assumed treated
   share, the model's index that plus its predicted noise (:func:`predicted_noise_share`); a
   band's treated share is the mean propensity of its records (:func:`band_counts`), so treated
   records gather in the upper bands as they do in a release, the more so the less noisy the
   model;
3. per release, the adjusted release's subclassification prediction on those band counts with
   the band cells' share of the budget, and the release's own variance on it
   (:func:`released_variance`, the one place the prediction mirrors
   :func:`~._release.attenuation_correction`): times the correction's factor ``(1 + k)^2``, plus
   the model-noise variance ``rho^2 gap^2``, ``gap^2`` the assumed confounding squared
   (:attr:`~dpate_core.planning.Assumptions.confounding`) plus the gap's noise
   (:func:`gap_noise`: the crude difference pools the unused bands' noisy cells too);
4. the expected half-width over the releases (an unresolved one counts as the whole range).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dpate_core.mechanisms.adjusted import ADJUSTED, THRESHOLD_FACTOR, AdjustedOptions
from dpate_core.privacy import BudgetSplit
from dpate_core.statistics import COUNT_SENSITIVITY

from ._model import (
    Categorical,
    Column,
    Numeric,
    count_sensitivity,
    released_part,
    with_arm_counts,
)
from ._release import ATTENUATION_CAP, BANDS, DEFAULT_SPLIT

if TYPE_CHECKING:
    from dpate_core.planning import PredictionInputs

__all__ = [
    "ASSUMED_INDEX_VARIANCE",
    "ASSUMED_NUMERIC_CENTRE",
    "ASSUMED_NUMERIC_SPREAD",
    "OCCUPANCY_DRAWS",
    "FittedModels",
    "band_counts",
    "band_occupancy",
    "bands_of",
    "fitted_models",
    "gap_noise",
    "occupancy_fractions",
    "predict",
    "predicted_noise_share",
    "released_variance",
    "resolution",
    "simulated_releases",
]

#: the variance of the true propensity index (the logit of the propensity; sd 1: a c-statistic of
#: about 0.76) assumed unless the plan states it (``Assumptions.propensity_sd``), against which
#: the model's predicted noise gives its noise share
ASSUMED_INDEX_VARIANCE = 1.0
#: the assumed variance within an arm of a numeric covariate's value rescaled to ``[-1, 1]`` by
#: its public bounds (sd a third of the bounds' half-width: the bounds about three sd from the
#: middle)
ASSUMED_NUMERIC_SPREAD = 1.0 / 9.0
#: where a numeric covariate's values are assumed to lie within their public bounds: around the
#: middle (``u = 0`` on the rescaled ``[-1, 1]``)
ASSUMED_NUMERIC_CENTRE = 0.0
#: how many model releases the predicted band occupancy is simulated over (seeded numpy noise:
#: the same plan every time)
OCCUPANCY_DRAWS = 2000
#: how many groups of them, by occupancy, the band subclassification's prediction runs on (once
#: per group: :func:`_parts`)
OCCUPANCY_EVALUATED = 40
_OCCUPANCY_SEED = 5


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
    """``(rho, index noise)``: the model's noise share and index noise variance in closed form at
    evenly spread cells (module docstring, step 2: the bands' sorting of the treated; the noise
    share a release reports is the simulated releases'). The model query's Laplace scale is
    ``Delta_m / eps_m`` in counts (:func:`~._model.count_sensitivity`); a categorical covariate
    with ``L`` levels adds ``v (1 / c_1^2 + 1 / c_0^2)``, ``c_a = n_a / L + scale`` its smoothed
    cell counts; a numeric one ``v (1 / n_1^2 + 1 / n_0^2) / s^2`` (``v = 2 scale^2``)."""
    d = inp.design
    levels, p_num = _columns(inp)
    eps_m = float(d.epsilon * _shares(inp)[0])
    columns = tuple(Categorical(int(lv)) for lv in levels) + (Numeric(-1.0, 1.0),) * p_num
    scale = float(count_sensitivity(columns, d.n)) / eps_m
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


def _erf(x: np.ndarray) -> np.ndarray:
    """``erf`` to about ``1.5e-7`` (Abramowitz and Stegun 7.1.26), vectorised: a prediction's
    band shares, not a release's edges."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.asarray(np.sign(x) * (1.0 - poly * np.exp(-x * x)), dtype=np.float64)


def _phi(t: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf(t / math.sqrt(2.0)))


def _expected_statistics(
    n: int, share: float, columns: tuple[Column, ...], centre: float, spread: float
) -> np.ndarray:
    """The model vector (in counts and sums of ``u``) of ``n`` records as the occupancy
    prediction assumes them: a treated share ``share``; each categorical covariate's levels
    equally common in both arms; each numeric one's ``u`` with mean ``centre`` and variance
    ``spread`` in both arms (no covariate associated with the treatment)."""
    n1 = share * n
    n0 = n - n1
    out = [np.array([n0, n1])]
    for col in columns:
        if isinstance(col, Categorical):
            out.append(np.tile([n0 / col.levels, n1 / col.levels], col.levels))
        else:
            out.append(np.array([n0 * centre, n1 * centre, n * (spread + centre * centre)]))
    return np.concatenate(out)


@functools.lru_cache(maxsize=256)
def simulated_releases(
    n: int,
    share: float,
    levels: tuple[int, ...],
    p_num: int,
    eps_m: float,
    bands: int,
    index_variance: float = ASSUMED_INDEX_VARIANCE,
    draws: int = OCCUPANCY_DRAWS,
) -> tuple[np.ndarray, np.ndarray]:
    """``(fractions, noise shares)`` of simulated model releases (:func:`occupancy_fractions`):
    ``(draws, K)``, each band's share of the records, and ``(draws,)``, the noise share each
    release reports, the model's index noise over ``index_variance`` (the true index's) plus
    the spread the model's noise gives its index. The models are :func:`fitted_models`; the
    records' index is normal with the assumed covariates' mean and variance of the fitted
    terms. Seeded: the same plan every time."""
    columns: tuple[Column, ...] = tuple(Categorical(int(lv)) for lv in levels)
    columns += (Numeric(-1.0, 1.0),) * p_num
    centre, spread = ASSUMED_NUMERIC_CENTRE, ASSUMED_NUMERIC_SPREAD
    scale = float(count_sensitivity(columns, n)) / eps_m
    stats = _expected_statistics(n, share, columns, centre, spread)
    rng = np.random.default_rng(_OCCUPANCY_SEED)
    exact = released_part(stats, columns)
    noisy = with_arm_counts(exact + rng.laplace(0.0, scale, (draws, exact.size)), columns)
    fit = fitted_models(noisy, columns, n, max(1.0, scale), bands, centre, spread)
    noise_share = np.clip(fit.index_noise / (index_variance + fit.model_spread), 0.0, 1.0)
    sd = np.sqrt(np.maximum(fit.record_variance, 1e-12))
    cdf = _phi((fit.edges - fit.record_mean[:, None]) / sd[:, None])
    ones = np.ones((draws, 1))
    return np.diff(np.concatenate([0.0 * ones, cdf, ones], axis=1), axis=1), noise_share


class FittedModels(NamedTuple):
    """Many fitted models at once (:func:`fitted_models`), one row per noisy model vector."""

    #: ``(R, K - 1)``: the band edges (:meth:`~._model.PropensityModel.edges`)
    edges: np.ndarray
    #: ``(R,)``: the index noise the delta method gives (:func:`~._model.fit_model`)
    index_noise: np.ndarray
    #: ``(R,)``: the variance of the index under the model's own distribution of the records
    model_spread: np.ndarray
    #: ``(R,)``: the mean and variance of the index of records as the plan assumes them
    record_mean: np.ndarray
    record_variance: np.ndarray


def fitted_models(
    noisy: np.ndarray,
    columns: tuple[Column, ...],
    n: int,
    smoothing: float,
    bands: int,
    centre: float = ASSUMED_NUMERIC_CENTRE,
    spread: float = ASSUMED_NUMERIC_SPREAD,
) -> FittedModels:
    """:func:`~._model.fit_model` and its band edges for every row of ``noisy`` (``(R, W)``
    model vectors in counts and sums of ``u``), vectorised over the rows; and the index of
    records whose categorical levels are equally common and whose numeric ``u`` has mean
    ``centre`` and variance ``spread`` (``fit_model(row).noise_share`` is ``min(1, index_noise /
    model_spread)``)."""
    v = np.asarray(noisy, dtype=np.float64)
    draws = v.shape[0]
    v_count = 2.0 * smoothing * smoothing
    arm = np.maximum(v[:, :2], 1.0)
    arm_share = arm[:, 1] / arm.sum(axis=1)
    intercept = np.log(arm[:, 1] / arm[:, 0])
    means = np.repeat(intercept[:, None], 2, axis=1)  # the model's index mean in control, treated
    variances = np.zeros((draws, 2))
    rec_mean, rec_var = intercept.copy(), np.zeros(draws)  # the records' index
    index_noise = np.zeros(draws)
    at = 2
    for col in columns:
        block = v[:, at : at + col.width]
        at += col.width
        if isinstance(col, Categorical):
            cells = np.maximum(block.reshape(draws, col.levels, 2), 0.0) + smoothing
            freq = cells / cells.sum(axis=1, keepdims=True)
            term = np.log(freq[:, :, 1]) - np.log(freq[:, :, 0])
            mix = (1 - arm_share[:, None]) * freq[:, :, 0] + arm_share[:, None] * freq[:, :, 1]
            inv = 1 / cells[:, :, 0] ** 2 + 1 / cells[:, :, 1] ** 2
            index_noise += np.sum(mix * v_count * inv, axis=1)
            m = np.einsum("rla,rl->ra", freq, term)
            means += m
            variances += np.einsum("rla,rla->ra", freq, (term[:, :, None] - m[:, None, :]) ** 2)
            rec_mean += term.mean(axis=1)
            rec_var += term.var(axis=1)
        else:
            m_arm = np.clip(block[:, :2] / arm, -1.0, 1.0)
            pooled = (block[:, 2] - np.sum(block[:, :2] ** 2 / arm, axis=1)) / float(n)
            s2 = np.clip(pooled, 1e-2, 1.0)
            slope = (m_arm[:, 1] - m_arm[:, 0]) / s2
            offset = -(m_arm[:, 1] ** 2 - m_arm[:, 0] ** 2) / (2.0 * s2)
            index_noise += v_count * np.sum(1.0 / arm**2, axis=1) / s2
            means += slope[:, None] * m_arm + offset[:, None]
            variances += (slope * slope * s2)[:, None]
            rec_mean += slope * centre + offset
            rec_var += slope * slope * spread
    model_spread = (1 - arm_share) * variances[:, 0] + arm_share * variances[:, 1]
    model_spread += arm_share * (1 - arm_share) * (means[:, 1] - means[:, 0]) ** 2
    edges = _model_edges(means, variances, arm_share, bands)
    return FittedModels(edges, index_noise, model_spread, rec_mean, rec_var)


def _model_edges(
    means: np.ndarray, variances: np.ndarray, share: np.ndarray, bands: int
) -> np.ndarray:
    """:meth:`~._model.PropensityModel.edges` of many models at once: the ``k / K`` quantiles of
    the model's index distribution (two normals mixed by the arm shares), by bisection between
    the same outer limits."""
    share = np.clip(share, 1e-6, 1 - 1e-6)[:, None]
    sds = np.sqrt(np.maximum(variances, 1e-12))
    lo = np.repeat(np.min(means - 8 * sds, axis=1, keepdims=True), bands - 1, axis=1)
    hi = np.repeat(np.max(means + 8 * sds, axis=1, keepdims=True), bands - 1, axis=1)
    levels = np.arange(1, bands) / bands
    for _ in range(36):
        mid = 0.5 * (lo + hi)
        cdf = (1 - share) * _phi((mid - means[:, :1]) / sds[:, :1])
        cdf = cdf + share * _phi((mid - means[:, 1:]) / sds[:, 1:])
        below = cdf < levels
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.asarray(0.5 * (lo + hi), dtype=np.float64)


def _stated_fractions(occupancy: float, bands: int) -> np.ndarray:
    """``(1, K)``: band shares whose effective number ``1 / sum f_b^2`` is ``occupancy``: ``m =
    floor(occupancy)`` bands equally filled and one partly filled, the middle ones first (their
    treated share is the overall one's), the rest empty."""
    k = min(max(float(occupancy), 1.0), float(bands))
    m = math.floor(k)
    fill = np.zeros(bands)
    if m >= bands or k == m:
        fill[:m] = 1.0 / m
    else:  # m a^2 + (1 - m a)^2 = 1 / k, the root with a >= 1 - m a
        a = (m + math.sqrt(max(m * m - (m + m * m) * (1.0 - 1.0 / k), 0.0))) / (m + m * m)
        fill[:m], fill[m] = a, max(1.0 - m * a, 0.0)
    middle_first = np.argsort(np.abs(np.arange(bands) - (bands - 1) / 2.0), kind="stable")
    out = np.zeros(bands)
    out[middle_first] = fill
    return out[None, :]


def occupancy_fractions(inp: PredictionInputs) -> np.ndarray:
    """``(draws, K)``: each band's share of a site's records over the releases the prediction
    averages (:func:`band_occupancy` is their mean effective number). Stated
    (``Assumptions.band_occupancy``): one row. Else simulated from public inputs: the model
    query's Laplace noise on the model vector of records whose categorical levels are equally
    common, whose numeric covariates lie around the middle of their bounds
    (:data:`ASSUMED_NUMERIC_CENTRE`) with variance :data:`ASSUMED_NUMERIC_SPREAD`, with no
    covariate associated with the treatment; the fitted model's band edges against the
    records' index. A noisy model's edges follow its own noisy picture of the covariates and
    miss where the records lie: at a few hundred records per site most releases put nearly
    all of them in one or two bands."""
    stated = inp.assumptions.band_occupancy
    if stated is not None:
        return _stated_fractions(stated, bands_of(inp.options))
    return _simulated(inp)[0]


def _check_occupancy(inp: PredictionInputs) -> None:
    stated = inp.assumptions.band_occupancy
    if stated is not None and not 1 <= stated <= bands_of(inp.options):
        raise ValueError(
            f"band occupancy ({stated}) must be at least 1 (one band holding every record) and "
            f"at most K = {bands_of(inp.options)} (every band equally filled): give one in that "
            f"range"
        )


def _simulated(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray]:
    levels, p_num = _columns(inp)
    eps_m = float(inp.design.epsilon * _shares(inp)[0])
    a = min(max(inp.assumptions.arm_share, 0.01), 0.99)
    bands = bands_of(inp.options)
    return simulated_releases(inp.design.n, a, levels, p_num, eps_m, bands, _index_variance(inp))


def band_occupancy(inp: PredictionInputs) -> float:
    """The predicted effective number of usable bands: the mean over the releases of
    ``1 / sum_b f_b^2`` (``f_b`` a band's share of the records; ``K`` when the bands fill
    equally, 1 when one band holds every record)."""
    f = occupancy_fractions(inp)
    return float(np.mean(1.0 / np.sum(f * f, axis=1)))


def _band_inputs(inp: PredictionInputs, index_noise: float) -> PredictionInputs:
    """The adjusted subclassification's prediction inputs on the ``K`` bands with the band
    cells' share of the budget (the model's share spent first) and the bands' assumed counts
    (:func:`band_counts`, equally filled bands; :func:`_parts` refills them per release)."""
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


def _factor(rho: Any) -> Any:
    k = np.minimum(rho / np.maximum(1.0 - rho, 1e-12), ATTENUATION_CAP)
    return (1.0 + k) ** 2


def gap_noise(base: PredictionInputs, treated: np.ndarray, control: np.ndarray) -> float:
    """The noise variance of ``gap = crude - tau`` (:func:`~._release.attenuation_correction`)
    at these band counts: the crude difference pools every band's noisy cells, used or not,
    the subclassification only the used bands'. Per arm ``a`` and band ``b`` the cells' noise
    ``x = s - m_a c`` (sum and count noise, ``m_a`` the centred arm mean; variance ``v_s + m_a^2
    v_n``) enters the gap with weight ``1/n_a - [b used] w_b / n_ab`` (``w_b`` the band's share of
    the used records): a band is used when both noisy counts reach the threshold. Filled bands
    equally sorted cancel; the empty bands' noise stays whole."""
    p_n, p_s, _ = base.parts()
    b = base.bound
    scale_n = COUNT_SENSITIVITY / p_n.epsilon_float
    v_n, v_s = 2.0 * scale_n**2, 2.0 * (b / p_s.epsilon_float) ** 2
    m = max(2.0, THRESHOLD_FACTOR * scale_n)

    def kept(c: np.ndarray) -> np.ndarray:  # P(c + Lap(scale_n) >= m)
        d = (m - c) / scale_n
        return np.where(d > 0, 0.5 * np.exp(-np.abs(d)), 1.0 - 0.5 * np.exp(-np.abs(d)))

    used = kept(treated) * kept(control)
    n_used = max(float(np.sum(used * (treated + control))), 1.0)
    w = (treated + control) / n_used
    a = base.assumptions
    centre = a.mean(b) - b / 2.0
    total = 0.0
    for counts, mean in ((treated, centre + a.effect / 2.0), (control, centre - a.effect / 2.0)):
        n_a = max(float(counts.sum()), 1.0)
        u = v_s + mean * mean * v_n
        inside = (1.0 / n_a - w / np.maximum(counts, 1e-12)) ** 2
        total += u * float(np.sum(used * inside + (1.0 - used) / n_a**2))
    return total


def _model_variance(inp: PredictionInputs, rho: Any, sampling: float, gap: float) -> Any:
    """The model-noise variance the release reports, ``rho^2 gap^2`` in expectation: ``gap^2``
    is the assumed confounding squared plus the gap's noise (:func:`gap_noise`) and the
    estimate's sampling variance."""
    c = inp.assumptions.confounding
    return rho * rho * (c * c + sampling + gap)


def released_variance(
    inp: PredictionInputs, rho: Any, sampling: float, noise: float, gap: float
) -> tuple[Any, Any]:
    """``(sampling, noise)`` of the released estimate from the band subclassification's: the one
    place the prediction mirrors the release's variance (:func:`~._release.attenuation_correction`):
    both times the correction's factor ``(1 + k)^2``, the noise plus the model-noise variance
    ``rho^2 gap^2`` (:func:`_model_variance`; ``gap`` the gap's noise variance). ``rho``: a noise
    share or an array of them."""
    f = _factor(rho)
    return sampling * f, noise * f + _model_variance(inp, rho, sampling, gap)


def _band_parts(
    base: PredictionInputs, fractions: np.ndarray, treated_share: np.ndarray
) -> tuple[float, float, float, float, float]:
    """``(p, v, sampling, noise, gap)`` of the band subclassification whose bands hold these
    shares of the records, each band with its treated share (``gap``: :func:`gap_noise`)."""
    n = float(base.design.n)
    counts = (n * fractions * treated_share, n * fractions * (1.0 - treated_share))
    band = dataclasses.replace(base, strata_counts=counts)
    assert ADJUSTED.resolution is not None
    p, v = ADJUSTED.resolution(band)
    if p <= 0.0 or not math.isfinite(v):
        return 0.0, math.inf, math.inf, math.inf, math.inf
    sampling, noise, _ = ADJUSTED.predict(band)
    return p, v, sampling, noise, gap_noise(base, *counts)


@functools.lru_cache(maxsize=512)
def _parts(inp: PredictionInputs) -> tuple[float, float, float, float]:
    """``(sampling, noise, p, sd)`` over the simulated releases (:func:`simulated_releases`):
    the means of the released sampling and noise variances when resolved, the probability of
    resolving and the mean resolved sd, ``E[p_r sd_r] / p``. Each release's bands hold its
    shares of the records (or the stated occupancy's), each band with :func:`band_counts`'
    treated share; its variance is :func:`released_variance` at the noise share it reports. The
    releases are cut into :data:`OCCUPANCY_EVALUATED` groups by occupancy; the subclassification
    runs once per group, on its middle release's bands, and the variance at every release's own
    noise share."""
    _check_occupancy(inp)
    _, index_noise = predicted_noise_share(inp)
    base = _band_inputs(inp, index_noise)
    assert base.strata_counts is not None
    treated, control = base.strata_counts
    treated_share = treated / np.maximum(treated + control, 1e-300)
    fractions, shares = _simulated(inp)
    stated = inp.assumptions.band_occupancy
    if stated is not None:
        fractions = _stated_fractions(stated, bands_of(inp.options))
        groups = [np.arange(shares.size)]
    else:
        order = np.argsort(1.0 / np.sum(fractions * fractions, axis=1), kind="stable")
        groups = np.array_split(order, min(OCCUPANCY_EVALUATED, shares.size))
    out = np.zeros((shares.size, 4))  # p, p sd, sampling, noise
    for group in groups:
        row = fractions[0] if stated is not None else fractions[group[group.size // 2]]
        p, _, sampling, noise, gap = _band_parts(base, row, treated_share)
        if p <= 0.0:
            continue
        s, e = released_variance(inp, shares[group], sampling, noise, gap)
        out[group] = np.column_stack([np.full(group.size, p), p * np.sqrt(s + e), s, e])
    p_mean = float(out[:, 0].mean())
    if p_mean <= 0.0:
        return math.inf, math.inf, 0.0, math.inf
    kept = out[:, 0] > 0
    sampling, noise = (float(out[kept, j].mean()) for j in (2, 3))
    return sampling, noise, p_mean, float(out[:, 1].mean()) / p_mean


def _cached(inp: PredictionInputs) -> tuple[float, float, float, float]:
    try:
        return _parts(inp)
    except TypeError:  # unhashable options or counts: no cache
        return _parts.__wrapped__(inp)


def predict(inp: PredictionInputs) -> tuple[float, float, float]:
    """``dpate plan`` for the propensity release (module docstring): ``(sampling, noise,
    reported)`` variances, the noise including the model's (the correction's factor and the
    model-noise variance); the reported variance is the one whose normal half-width is the
    expected half-width over the predicted band occupancy and whether the release resolves (an
    unresolved release counts as the whole range, half-width ``B``)."""
    sampling, noise, p, sd = _cached(inp)
    if p <= 0.0:
        return sampling, noise, inp.bound * inp.bound / 3.0
    half_b = inp.bound / 1.959963984540054
    return sampling, noise, (p * sd + (1.0 - p) * half_b) ** 2


def resolution(inp: PredictionInputs) -> tuple[float, float]:
    """The probability that the release resolves an estimate and the variance it then reports
    (the band subclassification's over the predicted band occupancy, with the model's noise)."""
    _, _, p, sd = _cached(inp)
    return p, sd * sd
