"""``dpate plan`` for the propensity release, step 1: the band occupancy of the model's releases
(``docs/research/propensity.md``, "Planning"; the steps: ``_prediction.py``).

The model's releases are simulated (:func:`simulated_releases`, seeded numpy noise): the model
query's Laplace noise at the release's scale on the model vector of records as the plan assumes
them (each categorical covariate's levels equally common unless ``Assumptions.level_shares``
states their shares, each numeric covariate's rescaled value around the middle of its bounds,
:data:`ASSUMED_NUMERIC_CENTRE`, with variance :data:`ASSUMED_NUMERIC_SPREAD`, none associated
with the treatment), fitted as
:func:`~._fit.fit_model` fits it, many at once (:func:`fitted_models`); per release, each
band's share of the records (the model's band edges against the records' index: a noisy model's
edges miss where the records lie, and at a few hundred records most releases put nearly all of
them in one or two bands) and the noise share the release reports (its index noise over the
stated true index's variance, ``Assumptions.propensity_sd``, plus the spread its noise gives the
model's index). ``Assumptions.band_occupancy`` states the occupancy instead
(:func:`occupancy_fractions`). Also here: what the prediction reads from its public inputs (the
model's budget share, the assumed columns, the true index's variance).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from dpate_core.privacy import BudgetSplit

from ._band_edges import (
    band_edges,
    filled_edges,
    overlap_bands,
    residual_confounding_share,
    residual_multiple,
)
from ._model import (
    Categorical,
    Column,
    Numeric,
    count_sensitivity,
    released_part,
    with_arm_counts,
)
from ._release import BANDS, DEFAULT_SPLIT

if TYPE_CHECKING:
    from dpate_core.planning import PredictionInputs

__all__ = [
    "ASSUMED_INDEX_VARIANCE",
    "ASSUMED_NUMERIC_CENTRE",
    "ASSUMED_NUMERIC_SPREAD",
    "OCCUPANCY_DRAWS",
    "FittedModels",
    "assumed_column_specs",
    "assumed_columns",
    "assumed_index_variance",
    "band_occupancy",
    "bands_of",
    "budget_shares",
    "check_occupancy",
    "fitted_models",
    "level_shares",
    "numeric_moments",
    "occupancy_fractions",
    "simulated",
    "simulated_releases",
    "stated_fractions",
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
_OCCUPANCY_SEED = 5


def bands_of(options: Any) -> int:
    """``K``, the number of bands of the estimator's options (None or ``"auto"`` not yet
    resolved for a study: the default)."""
    bands = BANDS if options is None else options.bands
    return BANDS if bands == "auto" else int(bands)


def budget_shares(inp: PredictionInputs) -> tuple[Fraction, ...]:
    """The release's budget shares: the design's split (three parts: the model, the band
    cells' histogram and squares; four with the weighted sum; two for a binary outcome: the
    model and the band cells' histogram), else the default split."""
    d = inp.design
    return (
        BudgetSplit(d.split).shares
        if len(d.split) in (2, 3, 4)
        else BudgetSplit.of(DEFAULT_SPLIT, 3).shares
    )


def assumed_index_variance(inp: PredictionInputs) -> float:
    """The true propensity index's variance: the stated ``propensity_sd`` squared, else
    :data:`ASSUMED_INDEX_VARIANCE`."""
    sd = inp.assumptions.propensity_sd
    return ASSUMED_INDEX_VARIANCE if sd is None else max(float(sd) ** 2, 1e-6)


def assumed_columns(inp: PredictionInputs) -> tuple[tuple[int, ...], int]:
    """The categorical columns' level counts and the number of numeric ones: the spec's, else
    ``log2 |X|`` binary covariates (the strata's count if each covariate had two levels)."""
    if inp.covariate_sizes or inp.bounded_covariates:
        return tuple(s for s in inp.covariate_sizes if s > 1), int(inp.bounded_covariates)
    p = max(1, round(math.log2(max(inp.domain_size, 2))))
    return (2,) * p, 0


def assumed_column_specs(levels: Sequence[int], p_num: int) -> tuple[Column, ...]:
    """The columns a prediction assumes (:func:`assumed_columns`' counts): a categorical column
    per level count, then ``p_num`` numeric ones on ``[-1, 1]`` (already rescaled)."""
    return tuple(Categorical(int(lv)) for lv in levels) + (Numeric(-1.0, 1.0),) * p_num


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


def numeric_moments(
    p_num: int, stated: Sequence[tuple[float, float]] = ()
) -> tuple[tuple[float, float], ...]:
    """Each numeric covariate's assumed ``(mean, variance)`` of its rescaled value ``u``: the
    stated ``(mean, sd)`` pairs (``Assumptions.numeric_covariates``), else
    (:data:`ASSUMED_NUMERIC_CENTRE`, :data:`ASSUMED_NUMERIC_SPREAD`)."""
    if not stated:
        return ((ASSUMED_NUMERIC_CENTRE, ASSUMED_NUMERIC_SPREAD),) * p_num
    if len(stated) != p_num:
        raise ValueError(
            f"numeric covariates: {len(stated)} assumed (mean, sd) pairs for {p_num} covariates "
            f"with public bounds; give one per covariate, or none"
        )
    return tuple((float(m), float(sd) ** 2) for m, sd in stated)


def level_shares(
    levels: Sequence[int], stated: Sequence[Sequence[float]] = ()
) -> tuple[tuple[float, ...], ...]:
    """Each categorical covariate's assumed share of the records per level: the stated ones
    (``Assumptions.level_shares``, one tuple per covariate of ``levels``), else equally common
    levels."""
    if not stated:
        return tuple((1.0 / lv,) * int(lv) for lv in levels)
    if len(stated) != len(levels) or any(
        len(s) != lv for s, lv in zip(stated, levels, strict=True)
    ):
        raise ValueError(
            f"level shares: {[len(s) for s in stated]} shares stated for categorical covariates "
            f"with {list(levels)} levels; give one share per level of every such covariate, or "
            f"none"
        )
    return tuple(tuple(float(x) for x in s) for s in stated)


def _expected_statistics(
    n: int,
    share: float,
    columns: tuple[Column, ...],
    moments: Sequence[tuple[float, float]],
    shares: Sequence[Sequence[float]] = (),
) -> np.ndarray:
    """The model vector (in counts and sums of ``u``) of ``n`` records as the occupancy
    prediction assumes them: a treated share ``share``; each categorical covariate's levels at
    their shares (``shares``, default equally common) in both arms; each numeric one's ``u``
    with its ``(mean, variance)`` from ``moments`` in both arms (no covariate associated with
    the treatment)."""
    n1 = share * n
    n0 = n - n1
    out = [np.array([n0, n1])]
    numeric = iter(moments)
    cats = iter(shares or level_shares([c.levels for c in columns if isinstance(c, Categorical)]))
    for col in columns:
        if isinstance(col, Categorical):
            pi = np.asarray(next(cats), dtype=np.float64)
            out.append(np.column_stack([n0 * pi, n1 * pi]).ravel())
        else:
            centre, spread = next(numeric)
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
    moments: tuple[tuple[float, float], ...] = (),
    shares: tuple[tuple[float, ...], ...] = (),
    overlap: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fractions, noise shares, residual multiples)`` of simulated model releases
    (:func:`occupancy_fractions`): ``(draws, K)``, each band's share of the records, and
    ``(draws,)``, the noise share each release reports, the model's index noise across the true
    index (:attr:`FittedModels.even_along` taken off) over ``index_variance`` (the true index's)
    plus the spread the model's noise gives its index, and the shared sd's multiple each reads
    (:attr:`FittedModels.residual`). The models are :func:`fitted_models`; the
    records' index is normal with the assumed covariates' mean and variance of the fitted
    terms (``moments``: each numeric covariate's ``(mean, variance)`` of ``u``, default
    :func:`numeric_moments`'; ``shares``: each categorical covariate's level shares, default
    :func:`level_shares`'; ``overlap``: the release's bands, :func:`~._band_edges.overlap_bands`).
    Seeded: the same plan every time."""
    columns = assumed_column_specs(levels, p_num)
    moments = moments or numeric_moments(p_num)
    shares = shares or level_shares(levels)
    scale = float(count_sensitivity(columns, n)) / eps_m
    stats = _expected_statistics(n, share, columns, moments, shares)
    rng = np.random.default_rng(_OCCUPANCY_SEED)
    exact = released_part(stats, columns)
    noisy = with_arm_counts(exact + rng.laplace(0.0, scale, (draws, exact.size)), columns)
    fit = fitted_models(noisy, columns, n, max(1.0, scale), bands, moments, shares, overlap)
    across = fit.index_noise - fit.even_along
    noise_share = np.clip(across / (index_variance + fit.model_spread), 0.0, 1.0)
    sd = np.sqrt(np.maximum(fit.record_variance, 1e-12))
    cdf = _phi((fit.edges - fit.record_mean[:, None]) / sd[:, None])
    ones = np.ones((draws, 1))
    fractions = np.diff(np.concatenate([0.0 * ones, cdf, ones], axis=1), axis=1)
    return fractions, noise_share, fit.residual


class FittedModels(NamedTuple):
    """Many fitted models at once (:func:`fitted_models`), one row per noisy model vector."""

    #: ``(R, K - 1)``: the band edges (:meth:`~._fit.PropensityModel.edges`)
    edges: np.ndarray
    #: ``(R,)``: the index noise the delta method gives (:func:`~._fit.fit_model`)
    index_noise: np.ndarray
    #: ``(R,)``: the part of it along the true index, as the release estimates it from its own
    #: noisy terms (:func:`~._fit.fit_model`'s ``along / signal``)
    along: np.ndarray
    #: ``(R,)``: the part along a true index whose variance is spread evenly over the
    #: covariates' degrees of freedom (``L - 1`` per categorical covariate, 1 per numeric one):
    #: ``sum_j c_j n_j / dof``, ``n_j`` covariate ``j``'s index noise, ``c_j`` ``1 - sum_l
    #: pi_l^2`` over its level shares (``(L - 1) / L`` for ``L`` equally common levels) or 1
    #: (numeric). The plan's records carry no association
    #: (module docstring), so the release's own estimate would find none; this is the plan's
    #: assumption in its place
    even_along: np.ndarray
    #: ``(R,)``: the variance of the index under the model's own distribution of the records
    model_spread: np.ndarray
    #: ``(R,)``: the mean and variance of the index of records as the plan assumes them
    record_mean: np.ndarray
    record_variance: np.ndarray
    #: ``(R,)``: what the bands leave of the confounding over what they remove, under the
    #: model's distribution (:meth:`~._fit.PropensityModel.residual_multiple`)
    residual: np.ndarray


def fitted_models(
    noisy: np.ndarray,
    columns: tuple[Column, ...],
    n: int,
    smoothing: float,
    bands: int,
    moments: Sequence[tuple[float, float]] = (),
    shares: Sequence[Sequence[float]] = (),
    overlap: bool = False,
) -> FittedModels:
    """:func:`~._fit.fit_model` and its band edges for every row of ``noisy`` (``(R, W)``
    model vectors in counts and sums of ``u``), vectorised over the rows; and the index of
    records whose categorical levels have the shares ``shares`` (default equally common) and
    whose numeric ``u`` has, per numeric column, the ``(mean, variance)`` of ``moments``
    (default :func:`numeric_moments`'); ``overlap``: the bands of equal overlap mass
    (:func:`~._band_edges.overlap_bands`), else equally filled
    (``fit_model(row).noise_share`` is ``min(1, max(index_noise - along, 0) /
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
    index_noise, along, signal, even = (np.zeros(draws) for _ in range(4))
    dof = sum(c.levels - 1 if isinstance(c, Categorical) else 1 for c in columns)
    numeric = iter(moments or numeric_moments(sum(not isinstance(c, Categorical) for c in columns)))
    cats = iter(shares or level_shares([c.levels for c in columns if isinstance(c, Categorical)]))
    at = 2
    for col in columns:
        block = v[:, at : at + col.width]
        at += col.width
        if isinstance(col, Categorical):
            cells = np.maximum(block.reshape(draws, col.levels, 2), 0.0) + smoothing
            freq = cells / cells.sum(axis=1, keepdims=True)
            term = np.log(freq[:, :, 1]) - np.log(freq[:, :, 0])
            mix = (1 - arm_share[:, None]) * freq[:, :, 0] + arm_share[:, None] * freq[:, :, 1]
            v_level = v_count * (1 / cells[:, :, 0] ** 2 + 1 / cells[:, :, 1] ** 2)
            noise = np.sum(mix * v_level, axis=1)
            index_noise += noise
            centred = term - np.sum(mix * term, axis=1, keepdims=True)
            t2 = np.maximum(centred**2 - v_level, 0.0)
            along += np.sum(mix * mix * v_level * t2, axis=1)
            signal += np.sum(mix * t2, axis=1)
            pi = np.asarray(next(cats), dtype=np.float64)
            even += noise * (1.0 - float(np.sum(pi * pi)))
            m = np.einsum("rla,rl->ra", freq, term)
            means += m
            variances += np.einsum("rla,rla->ra", freq, (term[:, :, None] - m[:, None, :]) ** 2)
            r_mean = term @ pi
            rec_mean += r_mean
            rec_var += ((term - r_mean[:, None]) ** 2) @ pi
        else:
            centre, spread = next(numeric)
            m_arm = np.clip(block[:, :2] / arm, -1.0, 1.0)
            pooled = (block[:, 2] - np.sum(block[:, :2] ** 2 / arm, axis=1)) / float(n)
            s2 = np.clip(pooled, 1e-2, 1.0)
            slope = (m_arm[:, 1] - m_arm[:, 0]) / s2
            offset = -(m_arm[:, 1] ** 2 - m_arm[:, 0] ** 2) / (2.0 * s2)
            v_slope = v_count * np.sum(1.0 / arm**2, axis=1) / (s2 * s2)
            index_noise += v_slope * s2
            t2 = np.maximum(slope * slope - v_slope, 0.0) * s2
            along += v_slope * s2 * t2
            signal += t2
            even += v_slope * s2
            means += slope[:, None] * m_arm + offset[:, None]
            variances += (slope * slope * s2)[:, None]
            rec_mean += slope * centre + offset
            rec_var += slope * slope * spread
    model_spread = (1 - arm_share) * variances[:, 0] + arm_share * variances[:, 1]
    model_spread += arm_share * (1 - arm_share) * (means[:, 1] - means[:, 0]) ** 2
    if overlap:
        edges = band_edges(means, variances, bands)
        residual = residual_multiple(means, variances, arm_share, edges)
    else:
        edges = filled_edges(means, variances, arm_share, bands, _phi)
        residual = np.full(draws, residual_confounding_share(bands))
    along = np.where(signal > 0.0, along / np.where(signal > 0.0, signal, 1.0), 0.0)
    return FittedModels(
        edges, index_noise, along, even / max(dof, 1), model_spread, rec_mean, rec_var, residual
    )


def stated_fractions(occupancy: float, bands: int) -> np.ndarray:
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
    common (or at ``Assumptions.level_shares``), whose numeric covariates lie around the middle
    of their bounds
    (:data:`ASSUMED_NUMERIC_CENTRE`) with variance :data:`ASSUMED_NUMERIC_SPREAD`, with no
    covariate associated with the treatment; the fitted model's band edges against the
    records' index. A noisy model's edges follow its own noisy picture of the covariates and
    miss where the records lie: at a few hundred records per site most releases put nearly
    all of them in one or two bands."""
    stated = inp.assumptions.band_occupancy
    if stated is not None:
        return stated_fractions(stated, bands_of(inp.options))
    return simulated(inp)[0]


def check_occupancy(inp: PredictionInputs) -> None:
    """Refuse a stated band occupancy outside ``[1, K]``."""
    stated = inp.assumptions.band_occupancy
    if stated is not None and not 1 <= stated <= bands_of(inp.options):
        raise ValueError(
            f"band occupancy ({stated}) must be at least 1 (one band holding every record) and "
            f"at most K = {bands_of(inp.options)} (every band equally filled): give one in that "
            f"range"
        )


def simulated(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`simulated_releases` at the plan's public inputs."""
    levels, p_num = assumed_columns(inp)
    eps_m = float(inp.design.epsilon * budget_shares(inp)[0])
    a = min(max(inp.assumptions.arm_share, 0.01), 0.99)
    bands = bands_of(inp.options)
    moments = numeric_moments(p_num, inp.assumptions.numeric_covariates)
    shares = level_shares(levels, inp.assumptions.level_shares)
    return simulated_releases(
        inp.design.n, a, levels, p_num, eps_m, bands, assumed_index_variance(inp), moments=moments,
        shares=shares, overlap=overlap_bands(inp.design.n, eps_m),
    )  # fmt: skip


def band_occupancy(inp: PredictionInputs) -> float:
    """The predicted effective number of usable bands: the mean over the releases of
    ``1 / sum_b f_b^2`` (``f_b`` a band's share of the records; ``K`` when the bands fill
    equally, 1 when one band holds every record)."""
    f = occupancy_fractions(inp)
    return float(np.mean(1.0 / np.sum(f * f, axis=1)))
