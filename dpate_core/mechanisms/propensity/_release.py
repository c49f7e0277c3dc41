"""The propensity release (``"propensity"``): a DP propensity model, then subclassification on
``K`` bands of its index, pure epsilon-DP (``docs/research/propensity.md``, ``docs/explanation/privacy.md``).

Three stages, three budget parts ``(eps_m, eps_h, eps_q)`` summing exactly to ``eps``:

1. the model vector (:mod:`~dpate_core.mechanisms.propensity._model`; without the arm counts
   when a categorical covariate carries them), one Laplace vector query at scale
   ``Delta_m / eps_m``: ``(eps_m, 0)``-DP;
2. given the noisy model (post-processing: the model, its index and the band edges, the
   ``k / K`` quantiles of the index's model distribution), each record's band, and the adjusted
   release's cell queries over the ``2 K`` (band, arm) cells: their two-end histogram
   ``Lap(2 / eps_h)`` over ``4 K`` bins (each record's unit mass split between its cell's two
   ends, ``1 - Y/B`` and ``Y/B``: L1 sensitivity 2; the counts and centred sums are
   post-processing of it) (the bands are a partition fixed before this stage's noise, so one
   record is in one cell and the adjusted release's sensitivity holds: ``(eps_h, 0)``-DP for
   every fixed model);
3. given both, the centred squares summed over the used bands' cells, each arm's (L1
   sensitivity ``B^2/2``) or below ``N x epsilon`` :data:`COMMON_VARIANCE_BELOW` one sum for
   both arms (``B^2/4``), on the weighted-sum grid at ``eps_q``
   (:mod:`dpate_core.mechanisms.adjusted._squares_sums`, :func:`squares_mode`; their vector
   ``Lap(B^2 / (2 eps_q))`` in stage 2 until stop 51): ``(eps_q, 0)``-DP for every fixed
   earlier output.

A binary outcome (every value 0 or ``B``, ``binary=True``) releases the band cells as one
vector query instead, the ``(band, arm, outcome)`` histogram ``Lap(2 / eps_c)`` over ``4 K``
bins (one record is in one bin: L1 sensitivity 2); the counts, centred sums and squares
(every centred value is ``+-B/2``) are post-processing of it. Two parts ``(eps_m, eps_c)``
then (docs/explanation/privacy.md, "A binary outcome: one histogram").

With a split of four parts ``(eps_m, eps_h, eps_q, eps_w)`` (``weighted_sum = true``; not for a
binary outcome) the third stage, chosen from the first two's outputs, also releases the corrected
estimate's outcome part as one scalar query (:mod:`~._weighted_sum`): ``(eps_w, 0)``-DP for every
fixed earlier output; the estimate combines its reading with the histogram's.

Adaptive sequential composition: each stage is chosen from the earlier ones' outputs only, so the
release is ``(eps_m + eps_h + eps_q, 0) = (eps, 0)``-DP (the split is exact Fractions;
:class:`dpate_core.release.Stage` draws stage 2 after stage 1). The estimate and its variance are
the adjusted release's subclassification of the noisy band cells
(:func:`dpate_core.mechanisms.adjusted.assemble_subclassification`), corrected for the model
noise's attenuation, plus the variance the model's noise adds (:func:`attenuation_correction`);
from the model's ``N x epsilon_model`` :data:`~._band_regression.REGRESSION_FROM` and without
the weighted sum, the same cells read by regression on the model's index within and across the
bands (:mod:`~._band_regression`; post-processing).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from dpate_core.mechanisms._weighted_query import query_site
from dpate_core.mechanisms.adjusted import (
    Linearisation,
    PublicConstants,
    assemble_subclassification,
    histogram_vectors,
    public_constants,
    squares_sums_site,
    squares_sums_value,
    subclassification_linearisation,
    used_strata,
    with_sums_scale,
)
from dpate_core.noise import Rng
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams
from dpate_core.release import (
    MechanismPlan,
    NoiseSpec,
    Outputs,
    SiteEstimate,
    Stage,
    check_binary_outcomes,
    check_bound,
    draw_once,
)
from dpate_core.statistics import (
    CellStatistics,
    cell_sites,
    end_histogram,
    grid_bits,
    outcome_histogram,
)

from ._band_edges import residual_confounding_share
from ._band_regression import (
    REGRESSION_SHARED,
    band_positions,
    band_regression,
    is_regressed,
    variance_scales,
)
from ._bands import model_fit, strata_bands
from ._columnar import band_columns, power_of_two_inverse, run_chunks
from ._fit import PropensityModel
from ._kernels import BAD_W, BAD_Y, band_pass
from ._model import (
    Column,
    Covariates,
    as_columns,
    as_covariates,
    check_pass,
    column_arrays,
    model_bits,
    model_sensitivity,
    model_statistics,
    model_statistics_of_strata,
    released_part,
)
from ._weighted_sum import band_outcome_noise, combine, query_value, weighted_sum

__all__ = [
    "ATTENUATION_CAP",
    "BANDS",
    "COMMON_VARIANCE_BELOW",
    "DEFAULT_SPLIT",
    "DEFAULT_SPLIT_BINARY",
    "LINEARISED_FROM",
    "LINEARISED_SHARE",
    "UNRESOLVED",
    "PlanParts",
    "attenuation_correction",
    "attenuation_multiple",
    "correction_coefficients",
    "correction_factors",
    "crude_difference",
    "dp_propensity",
    "is_common_variance",
    "is_linearised",
    "linearised_factors",
    "plan_parts",
    "plan_propensity",
    "plan_propensity_from_strata",
    "residual_confounding_share",
    "squares_mode",
]

#: Cochran's five subclasses (about 90% of one confounder's bias removed)
BANDS = 5
#: the model, then the band cells' two-end histogram (counts and centred sums as one query) and
#: squares, as sums of the used cells' since stop 51 (docs/research/propensity.md; ``1/4, 27/40,
#: 3/40`` with their vector until then; until stop 43 four parts, ``1/4, 21/80, 33/80, 3/40``)
DEFAULT_SPLIT = ("1/4", "29/40", "1/40")
#: :data:`DEFAULT_SPLIT` for a binary outcome: the model, then the band cells' (band, arm,
#: outcome) histogram, one query at the cells' three quarters
DEFAULT_SPLIT_BINARY = ("1/4", "3/4")
UNRESOLVED = (
    "propensity bands: no band has enough patients in both treatments at this budget (both "
    "noisy arm counts at least min_count)"
)


def plan_propensity(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    z: npt.ArrayLike | Covariates,
    columns: Sequence[Column],
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    bands: int = BANDS,
    binary: bool = False,
) -> MechanismPlan:
    """The plan of :func:`dp_propensity` from records: ``z`` is ``(N, p)``, one column per entry
    of ``columns`` (level codes, or values within public bounds), or the same as
    :class:`Covariates` (the compiled passes' own layout: a matrix is split into it first).
    ``binary``: every outcome is 0 or ``B`` (checked: an error names the rule); the band cells
    are one query, their ``(band, arm, outcome)`` histogram (module docstring). A ``split`` of
    four parts adds the weighted sum (:mod:`~._weighted_sum`), a general outcome only."""
    bound = check_bound(bound)
    w_arr = np.asarray(w).astype(np.int8)
    y_arr = np.asarray(y, dtype=np.float64)
    if binary:
        check_binary_outcomes(y_arr, bound)
    if isinstance(z, Covariates):
        z_arr: np.ndarray | Covariates = z
        if z.codes.shape[0] + z.values.shape[0] != len(columns) or (columns and z.n != w_arr.size):
            raise ValueError(f"covariates: expected {len(columns)} columns of {w_arr.size} records")
    else:
        z_arr = np.asarray(z)
        if z_arr.ndim == 1:
            z_arr = z_arr[:, None]
        if z_arr.shape != (w_arr.size, len(columns)):
            raise ValueError(
                f"covariates: expected an array of shape (N, {len(columns)}) for {len(columns)} "
                f"declared columns"
            )
    n = int(w_arr.size)
    g = model_bits(n)
    k, m = grid_bits(max(n, 1))

    cov = as_covariates(w_arr, z_arr, columns, g)
    kind, levels, mid, half, _ = column_arrays(columns)
    at = np.zeros(len(columns), np.int64)  # each column's row in the codes or the values
    for flag in (0, 1):
        at[kind == flag] = np.arange(int(np.sum(kind == flag)))
    inv = np.array([power_of_two_inverse(h) if f else 0.0 for h, f in zip(half, kind, strict=True)])

    def band_cells(model: PropensityModel, edges: np.ndarray) -> CellStatistics:
        term_at = np.concatenate([[0], np.cumsum([t.size for t in model.terms])[:-1]])
        term_at = term_at.astype(np.int64)
        terms = np.concatenate(model.terms)
        if not np.all(edges[1:] >= edges[:-1]):  # unsorted or NaN edges: the searching pass
            status, counts, sums, squares = band_pass(
                w_arr, y_arr, cov.matrix(columns), kind, mid, half, term_at, terms,
                model.intercept, edges, bound, k, m,
            )  # fmt: skip
            check_pass(status)
            return CellStatistics(counts, sums, squares, bound, k, m)
        parts = run_chunks(band_columns, (
            w_arr, y_arr, cov.codes, cov.values, kind, levels, at, mid, half, inv, term_at,
            terms, model.intercept, edges, bound, power_of_two_inverse(bound), k, m,
        ), n)  # fmt: skip
        if any(p[0] for p in parts):
            check_pass(BAD_W if np.any((w_arr != 0) & (w_arr != 1)) else BAD_Y)
        counts, sums, squares = (sum(p[i] for p in parts) for i in (1, 2, 3))
        return CellStatistics(counts, sums, squares, bound, k, m)

    return _plan(
        n, model_statistics(w_arr, cov, columns, g), columns, g, band_cells,
        (k, m), bound, epsilon, delta, split, bands, binary,
    )  # fmt: skip


def plan_propensity_from_strata(
    cells: CellStatistics,
    covariate_sizes: Sequence[int],
    *,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    bands: int = BANDS,
    binary: bool = False,
) -> MechanismPlan:
    """The same release from the engine's per-stratum cell statistics (centred), the strata
    being the mixed-radix number of categorical covariates with ``covariate_sizes`` levels:
    the model vector is the sums of the stratum counts over each covariate's levels, a band is
    a set of strata and its cells are sums of theirs (exact integers): equal to
    :func:`plan_propensity` on the records. ``binary``: the caller has checked that every
    outcome is 0 or ``B`` (the site data's rules do)."""
    if not cells.centred:
        raise ValueError("the propensity release needs centred cell statistics")
    size = cells.counts.size // 2
    columns, codes = as_columns(tuple(covariate_sizes), size)
    n = cells.n
    g = model_bits(n)

    def band_cells(model: PropensityModel, edges: np.ndarray) -> CellStatistics:
        band = strata_bands(model, edges, codes)
        cell = np.stack([2 * band, 2 * band + 1], axis=1).ravel()
        k = 2 * (len(edges) + 1)
        sums = [np.bincount(cell, weights=v.astype(np.float64), minlength=k) for v in
                (cells.counts, cells.sums, cells.squares)]  # fmt: skip
        counts, s, q = (np.rint(v).astype(np.int64) for v in sums)
        return CellStatistics(counts, s, q, cells.bound, cells.k, cells.m)

    return _plan(
        n, model_statistics_of_strata(cells.counts, codes, columns, g), columns, g, band_cells,
        (cells.k, cells.m), cells.bound, epsilon, delta, split, bands, binary,
    )  # fmt: skip


def _plan(
    n: int,
    model_vector: np.ndarray,
    columns: Sequence[Column],
    g: int,
    band_cells: Callable[[PropensityModel, np.ndarray], CellStatistics],
    grid: tuple[int, int],
    bound: float,
    epsilon: Number,
    delta: Number,
    split: Sequence[Number] | None,
    bands: int,
    binary: bool = False,
) -> MechanismPlan:
    given = PrivacyParams.of(epsilon, delta)  # validates delta; none of it is spent
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    if not 2 <= int(bands) <= 50:
        raise ValueError(f"bands ({bands}) must be a whole number in [2, 50] (Cochran: 5)")
    bands = int(bands)
    default = DEFAULT_SPLIT_BINARY if binary else DEFAULT_SPLIT
    weighted = not binary and split is not None and len(split) == len(DEFAULT_SPLIT) + 1
    shares = BudgetSplit.of(
        default if split is None else split, len(default) + (1 if weighted else 0)
    )
    p_m, *cell_parts = shares.apply(total)
    p_q = cell_parts.pop() if weighted else None
    model_scale = p_m.laplace_scale(model_sensitivity(columns, g))
    released = released_part(model_vector, columns)
    unit = math.ldexp(1.0, -g)
    model_site = NoiseSpec("model", released, model_scale, "integer_laplace", unit=unit)
    shape = CellStatistics(*(np.zeros(2 * bands, np.int64),) * 3, bound, *grid)
    band_sites, scales = cell_sites(shape, cell_parts, binary)  # binary: one histogram query
    mode = squares_mode(n, total.epsilon, binary)
    if mode is not None:  # the squares as sums of the used cells' (a stage after the histogram)
        band_sites, scales = band_sites[:1], scales[:2]
    fitted = model_fit(n, columns, total.epsilon, shares.shares, bands)
    # the last model rows' fits and exact band cells: the stages and the assembly read the same
    # rows, so each row is fitted and banded once
    last: dict[str, Any] = {}

    def fits_of(model: Any) -> list[tuple[PropensityModel, np.ndarray]]:
        rows = np.atleast_2d(np.asarray(model, dtype=np.float64))
        key = rows.tobytes()
        if last.get("key") != key:
            last.clear()
            last.update(key=key, fits=[fitted(row) for row in rows])
        return list(last["fits"])

    def cells_of(model: Any) -> list[CellStatistics]:
        fits = fits_of(model)
        if "cells" not in last:
            last["cells"] = [band_cells(*fit) for fit in fits]
        return list(last["cells"])

    def vectors(c: CellStatistics) -> dict[str, np.ndarray]:
        if binary:
            return {"histogram": outcome_histogram(c)}
        return {"histogram": end_histogram(c)}

    def locs(noisy: Mapping[str, Any]) -> dict[str, np.ndarray]:
        many = np.asarray(noisy["model"]).ndim == 2
        out: dict[str, list[np.ndarray]] = {site.name: [] for site in band_sites}
        for cells in cells_of(noisy["model"]):
            for name, v in vectors(cells).items():
                out[name].append(v.astype(np.float64))
        return {k: (np.stack(v) if many else v[0]) for k, v in out.items()}

    public = public_constants(n, bound, bands, scales, binary=binary)
    noise_share = _per_row(fits_of, lambda m, _: m.noise_share)
    stages = [Stage(band_sites, locs)]
    later: list[NoiseSpec] = []  # chosen from the histogram: one stage after it
    if mode is not None:
        later.append(squares_sums_site(mode, cell_parts[1], n, 2 * bands))
        public = with_sums_scale(public, mode, later[-1].value_scale)
    sum_scale = None
    if p_q is not None:
        later.append(query_site("weighted_sum", p_q, n, 2 * bands))
        sum_scale = later[-1].value_scale
    constants = public

    def later_locs(noisy: Mapping[str, Any]) -> dict[str, np.ndarray]:
        v = histogram_vectors(constants, noisy)
        cells = cells_of(noisy["model"])
        one = np.asarray(noisy["model"]).ndim == 1
        out: dict[str, np.ndarray] = {}
        if mode is not None:
            squares = np.stack([c.squares * c.square_unit for c in cells])
            counts = np.clip(np.asarray(v["counts"], dtype=np.float64), 0.0, float(n))
            used = used_strata(constants, counts)
            out.update(squares_sums_value(constants, mode, used, squares[0] if one else squares))
        if p_q is not None:
            ws = weighted_sum(constants, v, attenuation_multiple(noise_share(noisy["model"])))
            sums = np.stack([c.sums * c.sum_unit for c in cells])
            counts = np.stack([c.counts.astype(np.float64) for c in cells])
            if one:
                sums, counts = sums[0], counts[0]
            out["weighted_sum"] = np.asarray(query_value(ws, sums, counts))[..., None]
        return out

    if later:
        stages.append(Stage(tuple(later), later_locs))
    return MechanismPlan(
        estimator="propensity",
        n=n,
        n_treated=None,
        n_control=None,
        total=total,
        bound=bound,
        shares=shares,
        noise=(model_site,),
        stages=tuple(stages),
        kept=("model",),  # the band definition a later balance table reads (model_fit)
        assemble=functools.partial(
            _assemble,
            constants,
            fits_of,
            binary,
            is_linearised(n, p_m.epsilon),
            sum_scale,
            sum_scale is None and is_regressed(n, p_m.epsilon),
        ),
    )


def _per_row(
    fits: Callable[[Any], list[tuple[PropensityModel, np.ndarray]]],
    read: Callable[[PropensityModel, np.ndarray], Any],
) -> Callable[[Any], Any]:
    """``read`` of the fitted model and band edges of each noisy model row (``fits``: the
    plan's, once per row; one value for one row; a last axis where ``read`` gives several):
    post-processing."""

    def readings(model: Any) -> Any:
        rows = np.asarray(model, dtype=np.float64)
        out = np.array([read(*fit) for fit in fits(rows)])
        return out if rows.ndim == 2 else out[0]

    return readings


def _assemble(
    c: PublicConstants,
    fits: Callable[[Any], list[tuple[PropensityModel, np.ndarray]]],
    binary: bool,
    linearised: bool,
    sum_scale: float | None,
    regressed: bool,
    v: Mapping[str, Any],
) -> Outputs:
    """Subclassification on the noisy band cells (the adjusted release's), corrected for the
    model noise's attenuation, with the variance the model's noise adds
    (:func:`attenuation_correction`). ``linearised`` (public: :func:`is_linearised`): where the
    release's noise share is at most :data:`LINEARISED_SHARE`, the corrected estimate's sampling
    and cells' noise variances are its own delta method over the band cells
    (:func:`linearised_factors`) instead of the band estimate's times ``(1 + k)^2``.
    The cells' counts and sums are their noisy histogram's, and a binary outcome's squares too
    (:func:`~dpate_core.mechanisms.adjusted.histogram_vectors`). ``sum_scale``: the weighted
    sum's Laplace scale in its normalised units where the release has the third stage
    (:func:`_with_weighted_sum`), else None. ``regressed`` (public:
    :func:`~._band_regression.is_regressed`, and no third stage): the band cells are read by
    regression on the model's index within and across the bands
    (:func:`~._band_regression.band_regression`), its sampling and noise variances the band
    estimate's scaled by its delta method over the band estimate's, and its shared sd
    :data:`~._band_regression.REGRESSION_SHARED` of the band estimate's."""
    v = histogram_vectors(c, v)
    out = assemble_subclassification(c, v)
    # each row's noise share and residual multiple (PropensityModel.residual_multiple)
    read = _per_row(fits, lambda m, edges: (m.noise_share, m.residual_multiple(edges)))
    share, residual = np.moveaxis(read(v["model"]), -1, 0)
    tau, factor, extra, shared = attenuation_correction(c, v, share, out.tau, residual)
    d = dict(out.diagnostics)
    unresolved = np.where(np.asarray(d["resolved"]) == 0.0, np.nan, 0.0)
    rho = np.clip(np.asarray(share, dtype=np.float64), 0.0, 1.0)
    lin = subclassification_linearisation(c, v, out.tau)
    noise, rest = d["noise_variance"], d["unestimated_variance"]
    sampling, raw_sampling = out.variance - noise - rest, out.raw_variance - noise - rest
    coefficients = correction_coefficients(c, lin)
    corrected = rho
    if regressed:  # the cells read by regression on the index (_band_regression)
        reg = band_regression(lin, _per_row(fits, band_positions)(v["model"]), out.tau, c)
        # not extrapolated by the attenuation correction (its factors 1): the regression leaves
        # little of the confounding the correction assumes the bands left, and what it leaves
        # is carried by its shared sd (_band_regression.REGRESSION_SHARED)
        on = reg.regressed
        gap = crude_difference(c, v) - np.nan_to_num(reg.tau)
        tau = np.where(on, reg.tau, tau)
        extra = np.where(on, (rho * np.where(np.isfinite(reg.tau), gap, 0.0)) ** 2, extra)
        factor = np.where(on, 1.0, factor)
        corrected = np.where(on, 0.0, rho)  # the noise share the correction's factors read
        shared = np.where(on, float(REGRESSION_SHARED) * shared, shared)
        # the band estimate's sampling and noise variances, each scaled by the regression's
        # delta method over the band estimate's (the same per-cell variances)
        own = correction_coefficients(c, reg.lin)
        scale_s, scale_n = variance_scales(own, coefficients)
        sampling, raw_sampling, noise = sampling * scale_s, raw_sampling * scale_s, noise * scale_n
        coefficients = own
    if linearised:
        f_s, f_n = linearised_factors(coefficients, corrected)
    else:
        f_s = f_n = factor
    d["noise_variance"] = noise * f_n
    variance = sampling * f_s + noise * f_n + rest * factor
    raw = raw_sampling * f_s + noise * f_n + rest * factor
    if sum_scale is not None:
        tau, extra, shared, change = _with_weighted_sum(
            c, v, (tau, lin, rho), linearised, sum_scale, residual
        )
        d["noise_variance"] = d["noise_variance"] + change
        variance, raw = variance + change, raw + change
    d["model_variance"] = extra + unresolved
    # every part of the variance is NaN where nothing resolved: an unresolved report publishes
    # no diagnostics beyond the usable strata and weight (schemas.reports' rule)
    d["model_noise_share"] = np.asarray(share) + unresolved
    d["shared_sd"] = shared + unresolved
    extra = extra + shared * shared
    return Outputs(np.clip(tau, -c.bound, c.bound), variance + extra, raw + extra, d, UNRESOLVED)


def _with_weighted_sum(
    c: PublicConstants,
    v: Mapping[str, Any],
    estimate: tuple[Any, Linearisation, Any],
    linearised: bool,
    sum_scale: float,
    residual: Any,
) -> tuple[Any, Any, Any, Any]:
    """The third stage's reading combined in (:mod:`._weighted_sum`): ``(corrected estimate,
    model variance, shared sd, change of the noise variance)``. The outcome part's noise moves
    from the histogram's ``a = v_s sum D^2`` to the combination's ``a b / (a + b)`` and the
    counts' part follows the combined estimate's derivatives; a release that keeps the factor
    ``(1 + k)^2`` (a noise share above :data:`LINEARISED_SHARE`, or below
    :data:`LINEARISED_FROM`) scales its outcome part by the same ``b / (a + b)``. The gap is read
    again at the combined estimate, ``(tau_crude - T) / (1 + k)``; the model variance reads it
    less its own noise, the shared sd whole (:func:`attenuation_correction`). Post-processing."""
    tau, lin, rho = estimate
    k = attenuation_multiple(rho)
    ws = weighted_sum(c, v, k)
    comb = combine(c, ws, (tau, lin, k), v["sums"], np.asarray(v["weighted_sum"])[..., 0],
                   sum_scale)  # fmt: skip
    small = linearised & (rho <= LINEARISED_SHARE)
    band_sums = (1.0 + k) ** 2 * band_outcome_noise(lin, c.v_s)
    outcome_part = np.where(small, comb.histogram_noise, band_sums)
    counts = np.where(small, comb.counts_after - comb.counts_before, 0.0)
    change = counts - outcome_part * comb.weight
    crude = crude_difference(c, v)
    resolved = np.isfinite(comb.tau)
    gap = np.where(resolved, (crude - np.nan_to_num(comb.tau)) / (1.0 + k), 0.0)
    # the model variance reads the gap with its own noise taken out (the histogram is noisier
    # beside the weighted sum); the shared sd reads it as the release without it does: the
    # bias the sites share is what it covers, and without the gap's noise in it the combined
    # intervals under-covered strong confounding (0.92-0.93 at 1,500-2,000 records per site)
    gap2 = np.maximum(gap * gap - comb.gap_noise, 0.0)
    shared = residual * (1.0 + k) * np.abs(gap)
    return comb.tau, rho * rho * gap2, shared, change


class PlanParts(NamedTuple):
    """What a propensity plan's assembly holds (:func:`plan_parts`): the band cells' public
    constants, the fitted models and band edges of noisy model vectors (``(k,)`` or ``(reps,
    k)``; each row fitted once), the binary-outcome mode, whether the corrected estimate's
    variance is its own delta method (:func:`is_linearised`), the weighted sum's scale, and
    whether the band cells are read by regression on the index
    (:func:`~._band_regression.is_regressed`)."""

    constants: PublicConstants
    fits: Callable[[Any], list[tuple[PropensityModel, np.ndarray]]]
    binary: bool
    linearised: bool
    sum_scale: float | None = None
    regressed: bool = False

    def fit(self, model: npt.ArrayLike) -> PropensityModel:
        """The fitted model of one noisy model vector."""
        return self.fits(np.asarray(model, dtype=np.float64))[0][0]

    def assemble(self, v: Mapping[str, Any]) -> Outputs:
        """The release's assembly with these parts (a simulation may replace one, e.g.
        ``linearised``, to measure the alternative on the same draws)."""
        return _assemble(*self, v)


def plan_parts(plan: MechanismPlan) -> PlanParts:
    """A propensity plan's :class:`PlanParts`, read from the one place that knows how its
    assembly holds them (a ``functools.partial`` of :func:`_assemble`)."""
    assembly = plan.assembly
    if not (isinstance(assembly, functools.partial) and assembly.func is _assemble):
        raise TypeError(f"a {plan.estimator} plan is not a propensity release's")
    return PlanParts(*assembly.args)


#: the attenuation correction's largest multiple of the adjustment (a model that is at least
#: half noise is not extrapolated further)
ATTENUATION_CAP = 1.0


def attenuation_correction(
    c: PublicConstants, v: Mapping[str, Any], share: Any, tau: Any, residual: Any = None
) -> tuple[Any, Any, Any, Any]:
    """``(corrected tau, variance factor, model variance, shared sd)`` from noisy values only.

    Bands of a noisy index remove only part of the confounding bias: with a share ``rho`` of
    the index's variance being the model's noise across the true index
    (:attr:`PropensityModel.noise_share`; noise along it does not reorder the records), the
    index's reliability is ``1 - rho``, and the bias the bands remove, ``tau_crude - tau``
    (``tau_crude`` the difference in the arms' noisy means over the bands the subclassification
    uses, the population its estimand is about: a band left out adds only its cells' noise to
    the gap), is about ``(1 - rho)`` of what bands of the exact index remove. The correction
    extrapolates: ``tau - k (tau_crude - tau)``, ``k = min(rho / (1 - rho), ATTENUATION_CAP)``;
    the estimate's variance is multiplied by ``(1 + k)^2`` (it is ``(1 + k) tau - k
    tau_crude``), and the model noise's own variance, ``(rho (tau_crude - tau))^2`` (the share
    of the confounding the noisy index captures moves by about ``rho``), is added. A noise-free
    model changes nothing.

    The shared sd: bands of even the exact index leave a share ``c`` of the confounding, about
    ``r (1 + k) |gap|`` (``(1 + k) gap`` the confounding the corrected estimate removes).
    ``residual``: ``r`` of each release's model (:meth:`PropensityModel.residual_multiple`):
    from :data:`~._band_edges.OVERLAP_FROM`, what its bands of equal overlap mass leave over what
    they remove, ``c / (1 - c)`` under its own distribution (0.12-0.15 for five bands on the
    synthetic study, mild to strong confounding); below,
    and without it, Cochran's ``c_K`` for ``K`` equally filled bands
    (:func:`residual_confounding_share`, 0.10 for five). It is a bias of the same sign at every
    site of a study, which combining does not average out: the release adds its square to the
    variance and publishes it (``diagnostics["shared_sd"]``) for the combiners
    (``dpate_core.aggregation.shared_term``). Measured in docs/research/propensity.md."""
    crude = crude_difference(c, v)
    gap = np.where(np.isfinite(tau), crude - np.nan_to_num(tau), 0.0)
    rho = np.clip(np.asarray(share, dtype=np.float64), 0.0, 1.0)
    k = attenuation_multiple(rho)
    if residual is None:
        residual = residual_confounding_share(c.n_strata)
    shared = residual * (1.0 + k) * np.abs(gap)
    return tau - k * gap, (1.0 + k) ** 2, (rho * gap) ** 2, shared


def crude_difference(c: PublicConstants, v: Mapping[str, Any]) -> Any:
    """The difference in the arms' noisy means over the bands the subclassification uses (both
    noisy arm counts at ``min_count``, read clipped to ``[0, N]`` as it reads them): the
    population of its estimand. Clipped to ``[-B, B]``; post-processing."""
    counts = np.clip(np.asarray(v["counts"], dtype=np.float64), 0.0, c.n)
    sums = np.asarray(v["sums"], dtype=np.float64)
    used = used_strata(c, counts)
    c_arm, t_arm = (np.where(used, x, 0.0) for x in (counts[..., 0::2], counts[..., 1::2]))
    n_c = np.maximum(np.sum(c_arm, axis=-1), 1.0)
    n_t = np.maximum(np.sum(t_arm, axis=-1), 1.0)
    s_t = np.sum(np.where(used, sums[..., 1::2], 0.0), axis=-1)
    s_c = np.sum(np.where(used, sums[..., 0::2], 0.0), axis=-1)
    return np.clip(s_t / n_t - s_c / n_c, -c.bound, c.bound)


def attenuation_multiple(rho: Any) -> Any:
    """The correction's multiple of the adjustment, ``k = min(rho / (1 - rho),
    ATTENUATION_CAP)`` at a noise share ``rho`` (the release's and the plan's)."""
    return np.minimum(rho / np.maximum(1.0 - rho, 1e-12), ATTENUATION_CAP)


#: the model's effective size ``N x epsilon_model`` from which the corrected estimate's variance
#: is its own delta method over the band cells (:func:`correction_factors`): below it the
#: ``(1 + k)^2`` factor's excess is kept as an allowance for the small-sample under-correction
#: the release cannot see (docs/research/propensity.md, "The corrected estimate's own delta
#: method"). 750 is ``"auto"``'s half of the budget at ``n x epsilon`` 1,500.
LINEARISED_FROM = 750
#: and only where the release's own noise share is at most this (the correction's multiple at
#: most 1/4): a model that is mostly noise at a size the public values call large (a covariate
#: of a hundred levels, a weak propensity) keeps the factor, whose excess stands in for the
#: model draw's part of the error there
LINEARISED_SHARE = 0.2


#: the site's ``N x epsilon`` below which the band cells' squares are one sum over the used
#: cells and one within-cell variance serves both arms
#: (:mod:`dpate_core.mechanisms.adjusted._squares_sums`): there the cells' noise is most of the
#: variance, and the squares' vector at their share left each arm's variance mostly noise (its
#: stretch and clamp the larger part of the reported sampling variance); above it the arms'
#: own variances, which a heteroscedastic outcome needs where sampling is most of the variance
#: (docs/research/propensity.md, "The band squares as sums"). 1,500 is where
#: ``"auto"`` gives the model a half of the budget instead of two fifths.
COMMON_VARIANCE_BELOW = 1500


def is_common_variance(n: int, epsilon: Number, binary: bool = False) -> bool:
    """Whether the release reads one within-cell variance for both arms from one sum of the
    used cells' squares (public: ``N``, the release's epsilon, exact, and a binary outcome's
    mode, which has no squares)."""
    return not binary and Fraction(n) * Fraction(epsilon) < COMMON_VARIANCE_BELOW


def squares_mode(n: int, epsilon: Number, binary: bool = False) -> str | None:
    """How the band cells' squares are released (public, :func:`is_common_variance`'s inputs):
    ``"common"``, one sum over both arms' used cells below ``N x epsilon``
    :data:`COMMON_VARIANCE_BELOW`; ``"arms"``, each arm's sum over its used cells, from it (since
    stop 51; :mod:`dpate_core.mechanisms.adjusted._squares_sums`); None for a binary outcome,
    whose squares follow from its histogram."""
    if binary:
        return None
    return "common" if is_common_variance(n, epsilon) else "arms"


def is_linearised(n: int, epsilon_model: Number) -> bool:
    """Whether the release's variance is :func:`correction_factors`' (public: ``N`` and the
    model's epsilon, exact)."""
    return Fraction(n) * Fraction(epsilon_model) >= LINEARISED_FROM


#: ``(xx, xy, yy)``: a variance part's quadratic in the correction's multiple ``k``
Quadratic = tuple[Any, Any, Any]


def correction_coefficients(c: PublicConstants, lin: Linearisation) -> tuple[Quadratic, Quadratic]:
    """The corrected estimate ``T = (1 + k) tau - k tau_crude`` over the band cells: both read
    the same used cells, ``tau`` with derivative ``x`` per cell and the crude difference
    ``tau_crude`` (each arm's mean over the used bands) with ``y``, so a part of ``Var T`` with
    per-cell variance ``u`` is ``sum u ((1 + k) x - k y)^2``, a quadratic in ``k`` with
    coefficients ``(sum u x^2, sum u x y, sum u y^2)``. Returned for the within-cell sampling
    (arm means: ``x = w_b``, ``y = n_ab / n_a``, ``u = s2_a / n_ab``) and the cells' noise
    (sums: ``x = w_b / n_ab``, ``y = 1 / n_a``, ``u = v_s``; counts: ``tau``'s derivatives
    and ``y = -m_a / n_a`` for the treated, ``m_c / n_c`` for the controls, ``u = v_n``); ``n_a``
    the arm's records in the used bands, ``m_a`` its mean there; ``w_b`` the controls' own
    where the linearisation has one (``Linearisation.weight_c``: the regression on the index,
    :func:`~._band_regression.band_regression`). Post-processing of the noisy cells
    (:func:`~dpate_core.mechanisms.adjusted.subclassification_linearisation`)."""
    used, w = lin.usable, lin.weight
    w_c = w if lin.weight_c is None else lin.weight_c
    tot_t = np.maximum(np.sum(np.where(used, lin.nt, 0.0), axis=-1), 1.0)[..., None]
    tot_c = np.maximum(np.sum(np.where(used, lin.nc, 0.0), axis=-1), 1.0)[..., None]
    share_t, share_c = np.where(used, lin.nt / tot_t, 0.0), np.where(used, lin.nc / tot_c, 0.0)
    sampling = [(lin.var_t / lin.nt, w, share_t), (lin.var_c / lin.nc, w_c, share_c)]
    noise = [
        (c.v_s, w / lin.nt, np.where(used, 1.0 / tot_t, 0.0)),
        (c.v_s, w_c / lin.nc, np.where(used, 1.0 / tot_c, 0.0)),
        (c.v_n, lin.d_nt, np.where(used, -lin.mean_t[..., None] / tot_t, 0.0)),
        (c.v_n, lin.d_nc, np.where(used, lin.mean_c[..., None] / tot_c, 0.0)),
    ]

    def quadratic(parts: list[tuple[Any, Any, Any]]) -> Quadratic:
        xx = sum(np.sum(u * x * x, axis=-1) for u, x, _ in parts)
        xy = sum(np.sum(u * x * y, axis=-1) for u, x, y in parts)
        yy = sum(np.sum(u * y * y, axis=-1) for u, _, y in parts)
        return xx, xy, yy

    return quadratic(sampling), quadratic(noise)


def linearised_factors(coefficients: tuple[Quadratic, Quadratic], rho: Any) -> tuple[Any, Any]:
    """``(F_S, F_N)`` of a release that linearises: :func:`correction_factors` where its noise
    share ``rho`` is at most :data:`LINEARISED_SHARE`, ``(1 + k)^2`` elsewhere."""
    k = attenuation_multiple(rho)
    f_s, f_n = correction_factors(coefficients, k)
    small = np.asarray(rho) <= LINEARISED_SHARE
    return np.where(small, f_s, (1.0 + k) ** 2), np.where(small, f_n, (1.0 + k) ** 2)


def correction_factors(coefficients: tuple[Quadratic, Quadratic], k: Any) -> tuple[Any, Any]:
    """``(F_S, F_N)``: the corrected estimate's sampling and cells' noise variances over the
    band estimate's, ``((1 + k)^2 xx - 2 k (1 + k) xy + k^2 yy) / xx``
    (:func:`correction_coefficients`). 1 where one band is used (then ``tau_crude`` is
    ``tau``) and near 1 where the arms fill the bands alike; ``(1 + k)^2`` only where the crude
    difference carried no noise and no sampling. Where a part is 0 its factor is ``(1 +
    k)^2``."""
    k = np.asarray(k, dtype=np.float64)
    out = []
    for xx, xy, yy in coefficients:
        num = (1.0 + k) ** 2 * xx - 2.0 * k * (1.0 + k) * xy + k * k * yy
        out.append(np.where(xx > 0.0, num / np.where(xx > 0.0, xx, 1.0), (1.0 + k) ** 2))
    return out[0], out[1]


def dp_propensity(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    z: npt.ArrayLike | Covariates,
    columns: Sequence[Column],
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    bands: int = BANDS,
    binary: bool = False,
    rng: Rng = None,
) -> SiteEstimate:
    """DP subclassification on propensity bands (module docstring): ``(epsilon, 0)``-DP under
    replace-one neighbours; ``delta`` is accepted and not spent. Public: ``N``, ``B``, the
    columns (levels, bounds), ``bands``, the split (four parts: with the weighted sum) and
    whether the outcome is binary."""
    plan = plan_propensity(
        w, y, z, columns, bound=bound, epsilon=epsilon, delta=delta, split=split, bands=bands,
        binary=binary,
    )  # fmt: skip
    return plan.estimate(draw_once(plan, rng))


def as_strata_columns(sizes: Sequence[int], domain_size: int) -> tuple[Column, ...]:
    """The categorical columns the strata's covariates give (:func:`as_columns`)."""
    return as_columns(sizes, domain_size)[0]
