"""``dpate plan`` for the propensity release: its predicted sampling, noise and reported variances
from public inputs and stated assumptions (``docs/research/propensity.md``, "Planning").

The prediction follows the release's steps:

1. the band occupancy of the model's releases, simulated from public inputs or stated
   (``_occupancy.py``: :func:`~._occupancy.simulated_releases`,
   :func:`~._occupancy.occupancy_fractions`), and the noise share each release reports;
2. the bands' treated shares: the true index normal around the logit of the assumed treated
   share, the model's index that plus its predicted noise (:func:`predicted_noise_share`); a
   band's treated share is the mean propensity of its records (:func:`band_counts`), so treated
   records gather in the upper bands as they do in a release, the more so the less noisy the
   model;
3. per release, the adjusted release's subclassification prediction on those band counts with
   the band cells' share of the budget, and the release's own variance on it
   (:func:`released_variance`, the one place the prediction mirrors
   :func:`~._release.attenuation_correction`): times the correction's factor ``(1 + k)^2``, or
   from ``N x epsilon_model`` 750, at the releases whose noise share is at most 0.2, the
   corrected estimate's own factors at the plan's band cells (:func:`expected_coefficients`),
   plus the model-noise variance ``rho^2 gap^2``, ``gap^2`` the assumed confounding squared
   (:attr:`~dpate_core.planning.Assumptions.confounding`) plus the gap's noise
   (:func:`gap_noise`: the used bands' cells, which the crude difference and the
   subclassification both pool);
4. the expected half-width over the releases (an unresolved one counts as the whole range).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from dpate_core.mechanisms._weighted_query import query_site
from dpate_core.mechanisms.adjusted import (
    ADJUSTED,
    THRESHOLD_FACTOR,
    AdjustedOptions,
    PublicConstants,
    cell_noise_scales,
    count_kept,
    public_constants,
    subclassification_linearisation,
)
from dpate_core.privacy import PrivacyParams

from ._band_edges import overlap_bands
from ._band_regression import REGRESSION_SHARED, band_regression, is_regressed, variance_scales
from ._model import count_sensitivity
from ._occupancy import (
    assumed_column_specs,
    assumed_columns,
    assumed_index_variance,
    bands_of,
    budget_shares,
    check_occupancy,
    level_shares,
    numeric_moments,
    simulated,
    stated_fractions,
)
from ._release import (
    Quadratic,
    attenuation_multiple,
    correction_coefficients,
    is_linearised,
    linearised_factors,
    residual_confounding_share,
    squares_mode,
)
from ._weighted_sum import band_outcome_noise, count_derivatives, weighted_sum

if TYPE_CHECKING:
    from dpate_core.planning import PredictionInputs

__all__ = [
    "band_counts",
    "gap_noise",
    "predict",
    "predicted_noise_share",
    "released_variance",
    "resolution",
    "resolutions",
]


#: how many groups of the simulated releases (:data:`~._occupancy.OCCUPANCY_DRAWS`), by
#: occupancy, the band subclassification's prediction runs on (once per group: :func:`_parts`)
OCCUPANCY_EVALUATED = 40


def predicted_noise_share(inp: PredictionInputs) -> tuple[float, float]:
    """``(rho, index noise)``: the model's noise share and its index noise across the true index,
    in closed form at evenly spread cells (module docstring, step 2: the bands' sorting of the
    treated; the noise share a release reports is the simulated releases'). The model query's
    Laplace scale is ``Delta_m / eps_m`` in counts (:func:`~._model.count_sensitivity`); a
    categorical covariate adds ``sum_l pi_l v (1 / c_1l^2 + 1 / c_0l^2)``, ``c_al = n_a pi_l +
    scale`` its smoothed cell counts at the level shares ``pi_l``
    (:func:`~._occupancy.level_shares`, ``1 / L`` each by default); a numeric one ``v (1 /
    n_1^2 + 1 / n_0^2) / s^2`` (``v = 2 scale^2``; ``s^2`` its assumed variance,
    :func:`~._occupancy.numeric_moments`, at least ``fit_model``'s floor 0.01). The part along
    the true index, which does not reorder the records, is taken off as
    :attr:`~._occupancy.FittedModels.even_along` takes it."""
    d = inp.design
    levels, p_num = assumed_columns(inp)
    eps_m = float(d.epsilon * budget_shares(inp)[0])
    scale = float(count_sensitivity(assumed_column_specs(levels, p_num), d.n)) / eps_m
    v = 2.0 * scale * scale
    a = min(max(inp.assumptions.arm_share, 0.01), 0.99)
    n1, n0 = max(d.n * a, 1.0), max(d.n * (1 - a), 1.0)
    lv = np.asarray(levels, dtype=np.float64)
    pis = [np.asarray(s) for s in level_shares(levels, inp.assumptions.level_shares)]
    # per covariate: the level terms' noise averaged over the levels' shares
    cat = np.array(
        [float(np.sum(pi * v * (1.0 / (n1 * pi + scale) ** 2 + 1.0 / (n0 * pi + scale) ** 2)))
         for pi in pis]
    )  # fmt: skip
    simpson = np.array([1.0 - float(np.sum(pi * pi)) for pi in pis])  # (L - 1) / L when even
    spreads = np.array([s2 for _, s2 in numeric_moments(p_num, inp.assumptions.numeric_covariates)])
    s2 = np.maximum(spreads, 1e-2)  # fit_model's floor on the pooled variance
    num = float(np.sum(v * (1.0 / (n1 + scale) ** 2 + 1.0 / (n0 + scale) ** 2) / s2))
    noise = float(np.sum(cat)) + num
    dof = float(np.sum(lv - 1.0)) + p_num
    across = noise - (float(np.sum(cat * simpson)) + num) / max(dof, 1.0)
    return min(across / (assumed_index_variance(inp) + noise), 1.0), across


def band_counts(
    n: int,
    arm_share: float,
    index_noise: float,
    bands: int,
    index_variance: float = 1.0,
    overlap: bool = False,
) -> tuple[Any, Any]:
    """The assumed ``(treated, control)`` counts of the ``K`` bands (module docstring, step 2):
    the true index ``eta ~ N(mu, s^2)`` (``s^2`` ``index_variance``, ``mu`` such that
    the mean propensity is the treated share: ``mu = logit(a) sqrt(1 + pi s^2 / 8)``, the probit
    approximation), the model's index ``eta + e`` with ``Var e`` the index noise; a band's
    treated share is the mean over its records of ``E[expit(eta) | eta + e]`` (probit
    approximation again), on a fine grid of the model's index."""
    band, e, _ = _band_grid(arm_share, index_noise, bands, index_variance, overlap)
    treated = n / e.size * np.bincount(band, weights=e, minlength=bands)
    return treated, n / e.size * np.bincount(band, minlength=bands) - treated


def band_index_positions(
    arm_share: float,
    index_noise: float,
    bands: int,
    index_variance: float = 1.0,
    overlap: bool = False,
) -> np.ndarray:
    """``(2, K)``: each arm's (control, treated) mean model index in the assumed bands
    (:func:`band_counts`' grid): where the release regresses on the index, the positions its
    lines read (:func:`~._band_regression.band_positions`, from the model's own picture)."""
    band, e, observed = _band_grid(arm_share, index_noise, bands, index_variance, overlap)
    out = np.empty((2, bands))
    for a, share in enumerate((1.0 - e, e)):
        mass = np.bincount(band, weights=share, minlength=bands)
        total = np.bincount(band, weights=share * observed, minlength=bands)
        out[a] = total / np.maximum(mass, 1e-300)
    return out


def _band_grid(
    arm_share: float, index_noise: float, bands: int, index_variance: float, overlap: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(band, e, observed)`` on a grid of the model's index, each point an equal share of the
    records (:func:`band_counts`): each point's band, its propensity and its model index."""
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
    # each band an equal share of the records' weights (with ``overlap``, sqrt(e (1 - e)))
    weight = np.sqrt(e * (1.0 - e)) if overlap else np.ones(grid)
    mass = (np.cumsum(weight) - weight / 2.0) / weight.sum()
    band = np.minimum((mass * bands).astype(np.int64), bands - 1)
    return band, e, observed


def _band_inputs(inp: PredictionInputs, index_noise: float) -> PredictionInputs:
    """The adjusted subclassification's prediction inputs on the ``K`` bands with the band
    cells' share of the budget (the model's share spent first) and the bands' assumed counts
    (:func:`band_counts`, the bands the release draws; :func:`_parts` refills them per
    release)."""
    d = inp.design
    shares = budget_shares(inp)
    cells = shares[1:3] if len(shares) == 4 else shares[1:]  # the weighted sum: apart
    rest = sum(cells, Fraction(0))
    design = dataclasses.replace(
        d, epsilon=d.epsilon * rest, delta=Fraction(0), split=tuple(s / rest for s in cells)
    )
    bands = bands_of(inp.options)
    assumptions = dataclasses.replace(inp.assumptions, occupied_strata=None)
    return dataclasses.replace(
        inp,
        design=design,
        squares_sums=squares_mode(d.n, d.epsilon, inp.binary),
        domain_size=bands,
        assumptions=assumptions,
        options=AdjustedOptions(weighting="subclassification"),
        strata_counts=band_counts(
            d.n, inp.assumptions.arm_share, index_noise, bands, assumed_index_variance(inp),
            overlap_bands(d.n, d.epsilon * shares[0]),
        ),
    )  # fmt: skip


def _assumed_positions(inp: PredictionInputs, index_noise: float) -> np.ndarray | None:
    """Each arm's mean model index in the assumed bands (:func:`band_index_positions`) where the
    release regresses on the index (public: :func:`~._band_regression.is_regressed` at the
    model's epsilon, and no weighted sum); None where it does not."""
    d = inp.design
    eps_model = d.epsilon * budget_shares(inp)[0]
    if weighted_epsilon(inp) is not None or not is_regressed(d.n, eps_model):
        return None
    return band_index_positions(
        inp.assumptions.arm_share, index_noise, bands_of(inp.options),
        assumed_index_variance(inp), overlap_bands(d.n, eps_model),
    )  # fmt: skip


def _factor(rho: Any) -> Any:
    return (1.0 + attenuation_multiple(rho)) ** 2


def _band_scales(base: PredictionInputs) -> tuple[float, float, float, float]:
    """``(count scale, sum scale, v_n, v_s)`` of the band cells' noise at the plan's split, a
    histogram's (:func:`~dpate_core.mechanisms.adjusted.cell_noise_scales`)."""
    scale_n, scale_s = cell_noise_scales(base.parts(), base.bound)
    return scale_n, scale_s, 2.0 * scale_n**2, 2.0 * scale_s**2


def _expected_cells(
    base: PredictionInputs, treated: np.ndarray, control: np.ndarray
) -> tuple[PublicConstants, dict[str, np.ndarray]]:
    """The band cells' public constants at the plan's scales and the plan's cells: these
    counts, each arm's assumed mean and within-cell sd in every band."""
    b = base.bound
    a = base.assumptions
    scale_n, scale_s, _, _ = _band_scales(base)
    c = public_constants(base.design.n, b, treated.size, (scale_n, scale_s))
    centre = a.mean(b) - b / 2.0
    m_t, m_c = centre + a.effect / 2.0, centre - a.effect / 2.0
    counts = np.column_stack([control, treated]).ravel()
    means = np.column_stack([np.full_like(control, m_c), np.full_like(treated, m_t)]).ravel()
    v = {"counts": counts, "sums": counts * means, "squares": counts * (a.sd(b) ** 2 + means**2)}
    return c, v


def expected_coefficients(
    base: PredictionInputs,
    treated: np.ndarray,
    control: np.ndarray,
    positions: np.ndarray | None = None,
) -> tuple[tuple[Quadratic, Quadratic], tuple[float, float]]:
    """The release's :func:`~._release.correction_coefficients` at the plan's band cells
    (:func:`_expected_cells`, the assumed effect as ``tau``), read by the same linearisation the
    release reads its noisy cells with, and the scales of its sampling and noise variances.
    With ``positions`` (the release regresses, :func:`band_index_positions`): the regression's
    coefficients (:func:`~._band_regression.band_regression`) and its delta method's sampling
    and noise parts over the band estimate's, as the release scales them; else ``(1, 1)``."""
    c, v = _expected_cells(base, treated, control)
    effect = np.float64(base.assumptions.effect)
    lin = subclassification_linearisation(c, v, effect)
    coefficients = correction_coefficients(c, lin)
    if positions is None:
        return coefficients, (1.0, 1.0)
    own = correction_coefficients(c, band_regression(lin, positions, effect, c).lin)
    scale_s, scale_n = variance_scales(own, coefficients)
    return own, (float(scale_s), float(scale_n))


def weighted_epsilon(inp: PredictionInputs) -> Fraction | None:
    """The weighted sum's epsilon where the design's split has it (four parts), else None."""
    shares = budget_shares(inp)
    return inp.design.epsilon * shares[3] if len(shares) == 4 else None


def weighted_removal(
    inp: PredictionInputs,
    base: PredictionInputs,
    counts: tuple[np.ndarray, np.ndarray],
    rho: Any,
) -> tuple[Any, Any]:
    """What the weighted sum takes off the released noise variance at each noise share ``rho``,
    and the query's weight ``lambda`` in the combination
    (:func:`~._release._with_weighted_sum` at the plan's band cells): ``lambda a`` where the
    release reads its own factors (``a = v_s sum D^2``), ``lambda`` times the band estimate's
    outcome part times ``(1 + k)^2`` where it keeps the factor, less the change of the counts'
    part the query's centring makes where it reads its own factors (``v_n sum [(g - lambda D
    offset)^2 - g^2]`` at the plan's cells, :func:`~._weighted_sum.combine`); 0 without the
    weighted sum."""
    eps_q = weighted_epsilon(inp)
    if eps_q is None:
        return np.zeros(np.shape(rho)), np.zeros(np.shape(rho))
    d = inp.design
    treated, control = counts
    c, v = _expected_cells(base, treated, control)
    k = attenuation_multiple(np.clip(np.asarray(rho, dtype=np.float64), 0.0, 1.0))
    ws = weighted_sum(c, v, k)
    bands = bands_of(inp.options)
    scale = query_site(
        "weighted_sum", PrivacyParams(eps_q, Fraction(0)), d.n, 2 * bands
    ).value_scale
    a = c.v_s * np.sum(ws.d * ws.d, axis=-1)
    b = 2.0 * (ws.scale * scale) ** 2
    lam = a / np.where(a + b > 0.0, a + b, 1.0)
    lin = subclassification_linearisation(c, v, np.float64(inp.assumptions.effect))
    band = band_outcome_noise(lin, c.v_s)
    small = is_linearised(d.n, d.epsilon * budget_shares(inp)[0]) & (np.asarray(rho) <= 0.2)
    g = count_derivatives(lin, k)
    moved = g - lam[..., None] * ws.d * ws.offset
    counts = c.v_n * np.sum(moved * moved - g * g, axis=-1)
    return np.where(small, lam * a - counts, lam * (1.0 + k) ** 2 * band), lam


def gap_noise(base: PredictionInputs, treated: np.ndarray, control: np.ndarray) -> float:
    """The noise variance of ``gap = crude - tau`` (:func:`~._release.attenuation_correction`)
    at these band counts: both pool the used bands' noisy cells (a band is used when both noisy
    counts reach the threshold, with the probability of it). Per arm ``a`` and used band ``b``
    the cells' noise ``x = s - m_a c`` (sum and count noise, ``m_a`` the centred arm mean;
    variance ``v_s + m_a^2 v_n``) enters the gap with weight ``1/n_a - w_b / n_ab`` (``n_a`` the
    arm's records in the used bands, ``w_b`` the band's share of the used records). Filled
    bands equally sorted cancel."""
    b = base.bound
    scale_n, _, v_n, v_s = _band_scales(base)
    m = max(2.0, THRESHOLD_FACTOR * scale_n)
    used = count_kept(treated, m, scale_n) * count_kept(control, m, scale_n)
    n_used = max(float(np.sum(used * (treated + control))), 1.0)
    w = (treated + control) / n_used
    a = base.assumptions
    centre = a.mean(b) - b / 2.0
    total = 0.0
    for counts, mean in ((treated, centre + a.effect / 2.0), (control, centre - a.effect / 2.0)):
        n_a = max(float(np.sum(used * counts)), 1.0)
        u = v_s + mean * mean * v_n
        inside = (1.0 / n_a - w / np.maximum(counts, 1e-12)) ** 2
        total += u * float(np.sum(used * inside))
    return total


def _model_variance(inp: PredictionInputs, rho: Any, sampling: float, gap: float) -> Any:
    """The model-noise variance the release reports, ``rho^2 gap^2`` in expectation: ``gap^2``
    is the assumed confounding squared plus the gap's noise (:func:`gap_noise`) and the
    estimate's sampling variance."""
    c = inp.assumptions.confounding
    return rho * rho * (c * c + sampling + gap)


def _shared_sd(
    inp: PredictionInputs, rho: Any, sampling: float, gap: float, residual: Any = None
) -> Any:
    """The shared sd the release reports, ``r (1 + k) |gap|`` at the root of the expected
    ``gap^2`` (:func:`_model_variance`'s; ``r`` each simulated release's residual multiple,
    :meth:`~._fit.PropensityModel.residual_multiple`, or, without them, Cochran's ``c_K`` for
    equally filled bands: :func:`~._band_edges.residual_confounding_share`)."""
    c = inp.assumptions.confounding
    if residual is None:
        residual = residual_confounding_share(bands_of(inp.options))
    return residual * np.sqrt(_factor(rho)) * math.sqrt(c * c + sampling + gap)


def released_variance(
    inp: PredictionInputs,
    rho: Any,
    sampling: float,
    noise: float,
    gap: float,
    coefficients: tuple[Quadratic, Quadratic] | None = None,
    removed: tuple[Any, Any] = (0.0, 0.0),
    residual: Any = None,
    regression: tuple[float, float] | None = None,
) -> tuple[Any, Any, Any]:
    """``(sampling, noise, shared sd)`` of the released estimate from the band subclassification's:
    the one place the prediction mirrors the release's variance
    (:func:`~._release.attenuation_correction`): both times the correction's factor ``(1 +
    k)^2``, or, where the release linearises (:func:`~._release.is_linearised`, public) and
    ``coefficients`` are given (:func:`expected_coefficients`), times its own factors at the
    releases whose noise share allows it (:func:`~._release.linearised_factors`); the noise plus
    the model-noise variance ``rho^2 gap^2`` (:func:`_model_variance`; ``gap`` the gap's noise
    variance) and the shared part's square (:func:`_shared_sd`, also returned). ``rho``: a noise
    share or an array of them. ``removed``: what the weighted sum takes off the noise and its
    weight ``lambda`` (:func:`weighted_removal`), at most ``lambda`` of the noise (the plan's
    band cells hold every band; where bands often go unused, as at a few hundred records, the
    noise the prediction reads is smaller than theirs); a release with it reads the model
    variance's gap with its own noise taken out (the gap noise is then 0 there) and the shared
    sd's as without it. ``residual``: the releases' residual multiples (:func:`_shared_sd`).
    ``regression``: where the release regresses on the index, its sampling and noise parts'
    scales over the band estimate's (:func:`expected_coefficients`), no correction's factors,
    and its shared sd :data:`~._band_regression.REGRESSION_SHARED` of the band estimate's."""
    shared = _shared_sd(inp, rho, sampling, gap, residual)  # the band estimate's
    if regression is not None:
        sampling, noise = sampling * regression[0], noise * regression[1]
        shared = shared * float(REGRESSION_SHARED)
    f_s = f_n = _factor(rho)
    model_gap = 0.0 if weighted_epsilon(inp) is not None else gap
    d = inp.design
    if regression is not None:  # not extrapolated by the attenuation correction
        f_s = f_n = np.ones_like(np.asarray(rho, dtype=np.float64))
    elif coefficients is not None and is_linearised(d.n, d.epsilon * budget_shares(inp)[0]):
        f_s, f_n = linearised_factors(coefficients, np.asarray(rho))
    taken, lam = removed
    noisy = noise * f_n - np.minimum(taken, lam * noise * f_n)
    noisy = noisy + _model_variance(inp, rho, sampling, model_gap) + shared**2
    return sampling * f_s, noisy, shared


def _band_parts(
    base: PredictionInputs,
    fractions: np.ndarray,
    treated_share: np.ndarray,
    positions: np.ndarray | None = None,
) -> tuple[
    float, float, float, float, float, tuple[Quadratic, Quadratic] | None, tuple[float, float]
]:
    """``(p, v, sampling, noise, gap, coefficients, scales)`` of the band subclassification
    whose bands hold these shares of the records, each band with its treated share (``gap``:
    :func:`gap_noise`; ``coefficients`` and ``scales``: :func:`expected_coefficients`, with
    ``positions`` where the release regresses)."""
    n = float(base.design.n)
    counts = (n * fractions * treated_share, n * fractions * (1.0 - treated_share))
    band = dataclasses.replace(base, strata_counts=counts)
    assert ADJUSTED.resolution is not None
    p, v = ADJUSTED.resolution(band)
    if p <= 0.0 or not math.isfinite(v):
        return 0.0, math.inf, math.inf, math.inf, math.inf, None, (1.0, 1.0)
    sampling, noise, _ = ADJUSTED.predict(band)
    coefficients, scales = expected_coefficients(base, *counts, positions)
    return p, v, sampling, noise, gap_noise(base, *counts), coefficients, scales


#: how many equally likely releases :func:`resolutions` summarises the simulated ones into (the
#: combined prediction's draws of each site's release)
RELEASE_GROUPS = 50


@functools.lru_cache(maxsize=512)
def _parts(inp: PredictionInputs) -> tuple[float, float, float, float, np.ndarray]:
    """``(sampling, noise, p, sd, per release)`` over the simulated releases
    (:func:`simulated_releases`): the means of the released sampling and noise variances when
    resolved, the probability of resolving, the mean resolved sd, ``E[p_r sd_r] / p``, and
    ``(R, 3)``: each release's probability of resolving, its sd when it does and its shared sd
    (:func:`_shared_sd`). Each release's bands hold its
    shares of the records (or the stated occupancy's), each band with :func:`band_counts`'
    treated share; its variance is :func:`released_variance` at the noise share it reports. The
    releases are cut into :data:`OCCUPANCY_EVALUATED` groups by occupancy; the subclassification
    runs once per group, on its middle release's bands, and the variance at every release's own
    noise share."""
    check_occupancy(inp)
    _, index_noise = predicted_noise_share(inp)
    base = _band_inputs(inp, index_noise)
    assert base.strata_counts is not None
    treated, control = base.strata_counts
    treated_share = treated / np.maximum(treated + control, 1e-300)
    positions = _assumed_positions(inp, index_noise)
    fractions, shares, residual = simulated(inp)
    stated = inp.assumptions.band_occupancy
    if stated is not None:
        fractions = stated_fractions(stated, bands_of(inp.options))
        groups = [np.arange(shares.size)]
    else:
        order = np.argsort(1.0 / np.sum(fractions * fractions, axis=1), kind="stable")
        groups = np.array_split(order, min(OCCUPANCY_EVALUATED, shares.size))
    out = np.zeros((shares.size, 5))  # p, p sd, sampling, noise, shared sd
    for group in groups:
        row = fractions[0] if stated is not None else fractions[group[group.size // 2]]
        p, _, sampling, noise, gap, coefficients, scales = _band_parts(
            base, row, treated_share, positions
        )
        if p <= 0.0:
            continue
        n = float(base.design.n)
        cells = (n * row * treated_share, n * row * (1.0 - treated_share))
        removed = weighted_removal(inp, base, cells, shares[group])
        s, e, b = released_variance(
            inp, shares[group], sampling, noise, gap, coefficients, removed, residual[group],
            None if positions is None else scales,
        )  # fmt: skip
        out[group] = np.column_stack([np.full(group.size, p), p * np.sqrt(s + e), s, e, b])
    p_mean = float(out[:, 0].mean())
    kept = out[:, 0] > 0
    per_release = np.column_stack(
        [out[:, 0], np.where(kept, out[:, 1] / np.where(kept, out[:, 0], 1.0), math.inf), out[:, 4]]
    )
    if p_mean <= 0.0:
        return math.inf, math.inf, 0.0, math.inf, per_release
    sampling, noise = (float(out[kept, j].mean()) for j in (2, 3))
    return sampling, noise, p_mean, float(out[:, 1].mean()) / p_mean, per_release


def _cached(inp: PredictionInputs) -> tuple[float, float, float, float, np.ndarray]:
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
    sampling, noise, p, sd, _ = _cached(inp)
    if p <= 0.0:
        return sampling, noise, inp.bound * inp.bound / 3.0
    half_b = inp.bound / 1.959963984540054
    return sampling, noise, (p * sd + (1.0 - p) * half_b) ** 2


def resolution(inp: PredictionInputs) -> tuple[float, float]:
    """The probability that the release resolves an estimate and the variance it then reports
    (the band subclassification's over the predicted band occupancy, with the model's noise)."""
    _, _, p, sd, _ = _cached(inp)
    return p, sd * sd


def resolutions(inp: PredictionInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The predicted releases as :data:`RELEASE_GROUPS` equally likely ones: each one's
    probability of resolving and the variance it reports when it does. The reported variance
    varies from release to release (the model's draw sets how many bands fill and its noise
    share), and a combiner weighting sites by their reported variances gains from that spread: the
    combined prediction draws each site's release from these (:func:`~dpate_core.planning.
    combined_prediction`). The simulated releases sorted by their resolved sd and cut into equal
    groups: a group's probability is its mean, its sd the mean ``p_r sd_r`` over that."""
    per = _cached(inp)[4]
    order = np.argsort(per[:, 1], kind="stable")
    probs, sds, shared = [], [], []
    for group in np.array_split(order, min(RELEASE_GROUPS, order.size)):
        p = float(per[group, 0].mean())
        ok = per[group, 0] > 0
        probs.append(p)
        sds.append(float(np.sum(per[group, 0][ok] * per[group, 1][ok])) / (p * group.size)
                   if p > 0 else math.inf)  # fmt: skip
        shared.append(float(per[group, 2].mean()))
    return np.asarray(probs), np.square(np.asarray(sds)), np.asarray(shared)
