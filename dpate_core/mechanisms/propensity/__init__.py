"""The propensity release (``"propensity"``): a DP additive-logit propensity model fitted on a
share of the budget, then DP subclassification on ``K`` bands of its index reusing the adjusted
release's noisy cell statistics; pure epsilon-DP (``docs/research/propensity.md``).

:func:`plan_propensity` plans from records (a covariate matrix: categorical level codes, or
numeric values within public bounds and no bins); :func:`plan_propensity_from_strata` from the
engine's per-stratum cell statistics (binned covariates); :func:`dp_propensity` plans and draws
once. :data:`PROPENSITY` is the estimator a study names ``"propensity"``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from dpate_core.mechanisms._estimator import (
    BandInputs,
    Estimator,
    PlanInputs,
    StatisticsInputs,
    StudyChoice,
    StudySite,
)
from dpate_core.mechanisms.adjusted import ADJUSTED, AdjustedOptions
from dpate_core.release import MechanismPlan

from ._band_regression import (
    REGRESSION_BANDS,
    REGRESSION_FROM,
    REGRESSION_SHARED,
    band_positions,
    band_regression,
    is_regressed,
)
from ._bands import model_fit, record_bands, strata_bands
from ._choice import (
    AUTO_RULE,
    DEFAULT_MODEL_SHARE,
    WEIGHTED_FROM,
    allowance_notes,
    below_rule_notes,
    model_share_split,
    released_model_share,
    resolved_split,
    study_bands,
    study_weighted,
)
from ._fit import PropensityModel, fit_model
from ._model import (
    Categorical,
    Column,
    Covariates,
    Numeric,
    decode_strata,
    model_bits,
    model_sensitivity,
    model_statistics,
    released_part,
    split_covariates,
    with_arm_counts,
)
from ._occupancy import (
    ASSUMED_INDEX_VARIANCE,
    ASSUMED_NUMERIC_CENTRE,
    ASSUMED_NUMERIC_SPREAD,
    OCCUPANCY_DRAWS,
    FittedModels,
    band_occupancy,
    bands_of,
    fitted_models,
    occupancy_fractions,
    simulated_releases,
)
from ._prediction import (
    band_counts,
    gap_noise,
    predict,
    predicted_noise_share,
    released_variance,
    resolution,
    resolutions,
)
from ._release import (
    ATTENUATION_CAP,
    BANDS,
    COMMON_VARIANCE_BELOW,
    DEFAULT_SPLIT,
    DEFAULT_SPLIT_BINARY,
    LINEARISED_FROM,
    LINEARISED_SHARE,
    UNRESOLVED,
    PlanParts,
    attenuation_correction,
    attenuation_multiple,
    correction_coefficients,
    correction_factors,
    dp_propensity,
    is_common_variance,
    is_linearised,
    plan_parts,
    plan_propensity,
    plan_propensity_from_strata,
    residual_confounding_share,
    squares_mode,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from dpate_core.inference import NoiseDraws
    from dpate_core.release import SiteEstimate

__all__ = [
    "ASSUMED_INDEX_VARIANCE",
    "ASSUMED_NUMERIC_CENTRE",
    "ASSUMED_NUMERIC_SPREAD",
    "ATTENUATION_CAP",
    "AUTO_RULE",
    "BANDS",
    "COMMON_VARIANCE_BELOW",
    "DEFAULT_MODEL_SHARE",
    "DEFAULT_SPLIT",
    "DEFAULT_SPLIT_BINARY",
    "LINEARISED_FROM",
    "LINEARISED_SHARE",
    "OCCUPANCY_DRAWS",
    "PARTS",
    "PARTS_BINARY",
    "PARTS_WEIGHTED",
    "PROPENSITY",
    "REGRESSION_BANDS",
    "REGRESSION_FROM",
    "REGRESSION_SHARED",
    "UNRESOLVED",
    "WEIGHTED_FROM",
    "Categorical",
    "Column",
    "Covariates",
    "FittedModels",
    "Numeric",
    "PlanParts",
    "PropensityModel",
    "PropensityOptions",
    "attenuation_correction",
    "attenuation_multiple",
    "balance_bands",
    "band_counts",
    "band_occupancy",
    "band_positions",
    "band_regression",
    "bands_of",
    "correction_coefficients",
    "correction_factors",
    "decode_strata",
    "dp_propensity",
    "fit_model",
    "fitted_models",
    "gap_noise",
    "is_common_variance",
    "is_linearised",
    "is_regressed",
    "model_bits",
    "model_fit",
    "model_sensitivity",
    "model_share_split",
    "model_statistics",
    "occupancy_fractions",
    "plan_columns",
    "plan_parts",
    "plan_propensity",
    "plan_propensity_from_strata",
    "predicted_noise_share",
    "record_bands",
    "record_columns",
    "released_part",
    "released_variance",
    "residual_confounding_share",
    "resolved_split",
    "simulated_releases",
    "split_covariates",
    "squares_mode",
    "strata_bands",
    "study_bands",
    "study_weighted",
    "with_arm_counts",
]


@dataclass(frozen=True)
class PropensityOptions:
    """The propensity estimator's spec options (``[estimator_options]``); ``"auto"``: chosen
    once for the whole study from the smallest ``n x epsilon`` among its sites (the declared
    record count times the per-release epsilon; :func:`~._choice.study_bands`)."""

    bands: int | Literal["auto"] = field(
        default="auto",
        metadata={
            "doc": "the number of propensity bands K, 2 to 50 (Cochran: 5 remove about 90% of "
            "one confounder's bias), or 'auto': chosen for the whole study from the smallest "
            "n x epsilon among its sites, n the declared record count and epsilon the site's "
            f"per-release epsilon (below {AUTO_RULE[1][0]}, or some n not declared: {BANDS}; "
            "docs/research/propensity.md, 'Bands and model share by study size')"
        },
    )
    model_share: str = field(
        default="auto",
        metadata={
            "doc": "the propensity model's share of a budget split left to the estimator's "
            "default (the band cells' histogram and squares share the rest 29 : 1; a binary "
            "outcome's band-cell histogram takes it whole), e.g. '1/2', or 'auto': "
            f"chosen with bands (below n x epsilon = {AUTO_RULE[1][0]}, or some n not declared: "
            f"{AUTO_RULE[0][2]}); a site's own budget_split is used as given"
        },
    )

    weighted_sum: bool = field(
        default=False,
        metadata={
            "doc": "also release the corrected estimate's outcome part as one weighted-sum "
            "query, whose noise does not grow with the bands (the budget left after the model "
            "shared 9 : 1 : 10 by the band cells' histogram, their squares and the weighted sum; "
            "a budget_split then has four parts): for a continuous outcome whose values lie away "
            "from the bound's ends measured 5-24% narrower per site from n x epsilon "
            f"{WEIGHTED_FROM} (12-13% at 2,000, 24% at 10,000 with ten bands; under strong "
            "confounding 4-7% wider at 5,000), wider for an outcome concentrated near 0 or B (a "
            "rare event not declared binary, a skewed count) and below that size; dpate plan "
            "predicts both "
            "from the stated outcome mean and sd. Not for a binary outcome "
            "(docs/research/propensity.md, 'The weighted sum')"
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.weighted_sum, bool):
            raise ValueError(f"weighted_sum ({self.weighted_sum!r}) must be true or false")
        if self.bands != "auto" and (
            isinstance(self.bands, bool)
            or not isinstance(self.bands, numbers.Integral)
            or not 2 <= int(self.bands) <= 50
        ):
            raise ValueError(f"bands ({self.bands!r}) must be 'auto' or a whole number in [2, 50]")
        if self.model_share != "auto":
            try:
                model_share_split(self.model_share)
            except (TypeError, ValueError, ZeroDivisionError):
                raise ValueError(
                    f"model_share ({self.model_share!r}) must be 'auto' or a fraction strictly "
                    f"between 0 and 1, written as a string (e.g. '1/2')"
                ) from None


def _choose(options: Any, domain_size: int, sites: Sequence[StudySite]) -> StudyChoice:
    """``K`` and the model share for the whole study (:func:`~._choice.study_bands`)."""
    opts = options if options is not None else PropensityOptions()
    k, share, reason = study_bands(opts.bands, opts.model_share, sites)
    released = released_model_share(opts, share, sites)  # a site's own split may give less
    binary = any(len(s.split) == 2 for s in sites)  # a binary outcome's split: model, histogram
    weighted, why, below = study_weighted(opts, sites, binary)
    chosen = replace(opts, bands=k, model_share=str(share), weighted_sum=weighted)
    cautions = (*below_rule_notes(k, released, sites, binary), *below)  # below the public rule
    variant = f"K = {k} bands, model share {share}" + (", weighted sum" if weighted else "")
    return StudyChoice(chosen, variant, f"{reason}; {why}" if why else reason, cautions)


def plan_columns(p: PlanInputs) -> tuple[tuple[Column, ...], Covariates]:
    """The model's columns and the records' :class:`Covariates` of a plan's inputs
    (:func:`record_columns`)."""
    return record_columns(
        len(p.w), p.x, p.covariate_sizes, p.domain_size, p.covariate_values, p.covariate_bounds
    )


def record_columns(
    n: int,
    x: Any,
    covariate_sizes: tuple[int, ...],
    domain_size: int,
    covariate_values: Any = None,
    covariate_bounds: tuple[tuple[float, float], ...] = (),
) -> tuple[tuple[Column, ...], Covariates]:
    """The model's columns and ``n`` records' :class:`Covariates`: the categorical columns of
    the strata ``x`` (the spec's binned covariates, :func:`~._model.as_columns`; their level
    codes in the smallest integer type), then one :class:`Numeric` column per covariate with
    public bounds and no bins (its values as given, float64; the model clips them to the
    bounds)."""
    import numpy as np

    from ._model import as_columns, code_dtype

    numeric: tuple[Column, ...] = ()
    values = np.empty((0, n))
    if covariate_values is not None:
        table = np.asarray(covariate_values, dtype=np.float64).reshape(n, -1)
        if table.shape[1] != len(covariate_bounds):
            raise ValueError(
                f"covariate_values: expected {len(covariate_bounds)} columns, one per entry "
                f"of covariate_bounds"
            )
        numeric = tuple(Numeric(float(lo), float(hi)) for lo, hi in covariate_bounds)
        values = np.ascontiguousarray(table.T)
    if numeric and domain_size == 1:  # no binned covariate: no categorical column
        return numeric, Covariates(np.empty((0, n), np.int8), values)
    columns, codes = as_columns(covariate_sizes, domain_size)
    strata = np.ascontiguousarray(codes.T, dtype=code_dtype(columns))  # (p_cat, |X|)
    return columns + numeric, Covariates(strata[:, np.asarray(x)], values)


def _plan(p: PlanInputs) -> MechanismPlan:
    columns, z = plan_columns(p)
    return plan_propensity(
        p.w,
        p.y,
        z,
        columns,
        bound=p.bound,
        epsilon=p.privacy.epsilon,
        delta=p.privacy.delta,
        split=p.split,
        bands=bands_of(p.options),
        binary=p.binary,
    )


def _plan_from_statistics(s: StatisticsInputs) -> MechanismPlan:
    return plan_propensity_from_strata(
        s.cells,
        s.covariate_sizes,
        epsilon=s.privacy.epsilon,
        delta=s.privacy.delta,
        split=s.split,
        bands=bands_of(s.options),
        binary=s.binary,
    )


def balance_bands(
    record: Mapping[str, Any], options: Any, inputs: BandInputs
) -> tuple[npt.NDArray[np.int64], int] | None:
    """The propensity band of every stratum (or of every record, ``inputs.x`` given: a study
    with numeric covariates with bounds and no bins) under the model the committed release
    drew: its recorded noisy model vector (``record["released"]["model"]``, a DP output) fitted
    by the release's own post-processing (:func:`model_fit`, from the estimate's public ``n``,
    ``epsilon`` and ``budget_split`` and the study's ``K``) and banded as the release bands
    (:func:`strata_bands`, :func:`record_bands`). None when the record holds no model (a release
    committed without one). Nothing is refitted on records and nothing is drawn."""
    import numpy as np

    from ._model import as_columns

    model = (record.get("released") or {}).get("model")
    if model is None:
        return None
    fields = record["estimate"]
    k = bands_of(options)
    sizes = tuple(int(s) for s in inputs.covariate_sizes)
    if inputs.x is None:
        columns, codes = as_columns(sizes, inputs.domain_size)
    else:
        n = len(inputs.x)
        columns, z = record_columns(
            n, inputs.x, sizes, inputs.domain_size, inputs.covariate_values, inputs.covariate_bounds
        )
    split = [Fraction(s) for s in fields["budget_split"]]
    fitted = model_fit(int(fields["n"]), columns, Fraction(fields["epsilon"]), split, k)
    fit, edges = fitted(np.asarray(model, dtype=np.float64))
    if inputs.x is None:
        return strata_bands(fit, edges, codes), k
    return record_bands(fit, edges, z), k


def plausible(e: SiteEstimate, options: Any, domain_size: int) -> list[str]:
    """The adjusted subclassification's rules on ``K`` bands, a non-negative model variance,
    and a shared sd (the residual-confounding allowance) in ``[0, B]`` within the variance."""
    out = ADJUSTED.plausible(e, AdjustedOptions("subclassification"), bands_of(options))
    mv = e.diagnostics.get("model_variance", 0.0)
    if not mv >= 0:
        out.append(f"diagnostics.model_variance ({mv}) must not be negative")
    b = e.diagnostics.get("shared_sd", 0.0)
    if not 0 <= b <= e.bound:
        out.append(
            f"diagnostics.shared_sd ({b}) must lie in [0, B]: it is a share of the confounding "
            f"the release removes"
        )
    elif not b * b + mv <= e.variance * (1 + 1e-9):
        out.append(
            f"variance ({e.variance}) is below the report's own model variance and shared part "
            f"({mv} + {b}^2): a released variance includes both"
        )
    return [p.replace("the adjusted release", "the propensity release") for p in out]


def noise_model(site: SiteEstimate, rng: Any, reps: int) -> NoiseDraws:
    """The band cells' noise, as the adjusted release's (sums of Laplace terms over the used
    bands' cells); the released variance is held."""
    return ADJUSTED.noise_model(site, rng, reps)


#: the release's budget parts: the model, then the band cells' two-end histogram (their counts
#: and centred sums as one query) and their sums of squares (four parts, counts, sums and squares
#: apart, until stop 43)
PARTS = ("propensity model", "band outcome histogram", "band sums of squares")
#: and with the weighted sum (stop 46): the corrected estimate's outcome part as one query
PARTS_WEIGHTED = ("band weighted sum",)
#: a binary outcome's: the model, then the band cells' (band, arm, outcome) histogram, whose
#: counts, sums and squares are post-processing (docs/explanation/privacy.md)
PARTS_BINARY = ("propensity model", "band outcome histogram")

#: the estimator a study names "propensity"
PROPENSITY = Estimator(
    name="propensity",
    label="DP propensity subclassification",
    estimand=(
        "average effect over the patients in propensity-score bands where both treatments "
        "occur (every patient, when each band holds both)"
    ),
    parts=PARTS,
    parts_for=lambda options, binary: (
        PARTS_BINARY
        if binary
        else PARTS + PARTS_WEIGHTED
        if getattr(options, "weighted_sum", False)
        else PARTS
    ),
    binary_outcome=True,
    pure=True,
    designs=("randomized", "observational"),
    options=PropensityOptions,
    plan=_plan,
    plan_from_statistics=_plan_from_statistics,
    default_shares=DEFAULT_SPLIT,
    default_shares_for=lambda options, binary: resolved_split(options, binary),
    choose=_choose,
    reading_notes=lambda options, preds: allowance_notes(preds),
    noise_model=noise_model,
    predict=predict,
    resolution=resolution,
    resolutions=resolutions,
    required_diagnostics=lambda options: (
        "noise_variance",
        "sampling_variance_dp",
        "usable_strata",
        "usable_weight",
        "model_variance",
    ),
    plausible=plausible,
    alternatives=lambda options, binary: (
        []
        if binary or options is None
        else [
            (
                f"weighted_sum = {str(not options.weighted_sum).lower()}",
                replace(options, weighted_sum=not options.weighted_sum),
            )
        ]
    ),
    unresolved_reasons=(UNRESOLVED,),
    unbinned_covariates=True,
    # no candidate splits: the model's share is the study's measured rule (``"auto"``) or the
    # spec's, and the cells share the rest as searched; ``dpate plan`` recommends no other
    # model share, which predicts narrower where it was measured to under-cover
    # (docs/explanation/inference.md, "dpate plan: know the width before you spend")
    # its strata are propensity bands, not the covariates' cells: the balance table's within
    # column is not 0 by construction; it is released within the bands of the committed model
    covariate_strata=False,
    balance_bands=balance_bands,
)
