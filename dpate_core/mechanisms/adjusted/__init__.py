"""The covariate-adjusted release (``"adjusted"``): DP subclassification from noisy per-cell
sufficient statistics, pure epsilon-DP (``docs/explanation/adjusted.md``).

:func:`plan_adjusted` / :func:`plan_adjusted_from_statistics` build the release's plan;
:func:`dp_adjusted` plans and draws once. The two post-processings of the noisy vectors, stratum
fixed effects and Algorithm 1's subclassification, are :func:`assemble_fixed_effects` and
:func:`assemble_subclassification`; :func:`resolve_weighting` is the public rule of ``"auto"``.
:data:`ADJUSTED` is the estimator a study names ``"adjusted"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

from dpate_core.mechanisms._estimator import (
    Estimator,
    PlanInputs,
    StatisticsInputs,
    StudyChoice,
    StudySite,
)
from dpate_core.release import MechanismPlan

from ._public import (
    MOSTLY_READ,
    MOSTLY_RESOLVES,
    RARELY_RESOLVES,
    SELECTED_RESOLUTION,
    adjusted_resolution,
    adjusted_weighting,
    cautions,
    cell_noise_scales,
    count_kept,
    noise_model,
    plausible,
    predict,
    read_share,
    required_diagnostics,
    study_weighting,
)
from ._release import (
    AUTO_BIAS,
    AUTO_RATIO,
    DEFAULT_SPLIT,
    DEFAULT_SPLIT_BINARY,
    RATIO_DAMPING,
    RESOLVE_Z,
    THRESHOLD_FACTOR,
    UNRESOLVED_FIXED_EFFECTS,
    UNRESOLVED_SUBCLASSIFICATION,
    WEIGHTINGS,
    dp_adjusted,
    plan_adjusted,
    plan_adjusted_from_statistics,
    plan_constants,
    plan_weighting,
    public_constants,
    ratio_bias_remainder,
    resolve_weighting,
)
from ._weightings import (
    ESTIMANDS,
    FIELLER_BELOW,
    INTERVAL_Z,
    PLUG_IN_CORRECTED_FROM,
    Linearisation,
    PublicConstants,
    assemble_fixed_effects,
    assemble_histogram,
    assemble_subclassification,
    design_resolution,
    fieller_factor,
    histogram_vectors,
    subclassification_linearisation,
    used_strata,
)

__all__ = [
    "ADJUSTED",
    "AUTO_BIAS",
    "AUTO_RATIO",
    "DEFAULT_SPLIT",
    "DEFAULT_SPLIT_BINARY",
    "ESTIMANDS",
    "FIELLER_BELOW",
    "INTERVAL_Z",
    "MOSTLY_READ",
    "MOSTLY_RESOLVES",
    "PARTS",
    "PARTS_BINARY",
    "PLUG_IN_CORRECTED_FROM",
    "RARELY_RESOLVES",
    "RATIO_DAMPING",
    "RESOLVE_Z",
    "SELECTED_RESOLUTION",
    "THRESHOLD_FACTOR",
    "UNRESOLVED_FIXED_EFFECTS",
    "UNRESOLVED_SUBCLASSIFICATION",
    "WEIGHTINGS",
    "AdjustedOptions",
    "Linearisation",
    "PublicConstants",
    "adjusted_weighting",
    "assemble_fixed_effects",
    "assemble_histogram",
    "assemble_subclassification",
    "cell_noise_scales",
    "count_kept",
    "design_resolution",
    "dp_adjusted",
    "fieller_factor",
    "histogram_vectors",
    "plan_adjusted",
    "plan_adjusted_from_statistics",
    "plan_constants",
    "plan_weighting",
    "public_constants",
    "ratio_bias_remainder",
    "read_share",
    "resolve_weighting",
    "study_weighting",
    "subclassification_linearisation",
    "used_strata",
]


@dataclass(frozen=True)
class AdjustedOptions:
    """The adjusted estimator's spec options."""

    weighting: Literal["auto", "subclassification", "fixed_effects"] = field(
        default="auto",
        metadata={
            "spec_key": "adjusted_weighting",
            "doc": "the post-processing (docs/explanation/adjusted.md, 'Two weightings'), one for the whole "
            "study: 'auto' (a public rule on every site's declared n, |X| and eps), "
            "'subclassification' or 'fixed_effects'",
        },
    )


def _plan(p: PlanInputs) -> MechanismPlan:
    return plan_adjusted(
        p.w,
        p.y,
        p.x,
        bound=p.bound,
        epsilon=p.privacy.epsilon,
        delta=p.privacy.delta,
        domain_size=p.domain_size,
        split=p.split,
        weighting=p.options.weighting if p.options is not None else "auto",
        binary=p.binary,
    )


def _plan_from_statistics(s: StatisticsInputs) -> MechanismPlan:
    return plan_adjusted_from_statistics(
        s.cells,
        epsilon=s.privacy.epsilon,
        delta=s.privacy.delta,
        split=s.split,
        weighting=s.options.weighting if s.options is not None else "auto",
        binary=s.binary,
    )


def _estimand(options: Any) -> str:
    weighting = options.weighting if options is not None else "auto"
    if weighting != "auto":
        return f"the {ESTIMANDS[weighting]} ({weighting.replace('_', ' ')})"
    return "chosen once for the whole study by a public rule: " + "; or ".join(
        f"the {text} ({mode.replace('_', ' ')})" for mode, text in ESTIMANDS.items()
    )


def _choose(options: Any, domain_size: int, sites: Sequence[StudySite]) -> StudyChoice:
    """One weighting for the whole study (:func:`study_weighting`)."""
    weighting = options.weighting if options is not None else "auto"
    mode, reason = study_weighting(weighting, domain_size, sites)
    return StudyChoice(replace(options or AdjustedOptions(), weighting=mode), mode, reason)


#: the release's budget parts: the cells' two-end histogram (their counts and centred sums as one
#: query), then their centred sums of squares (docs/explanation/adjusted.md, "Counts and sums as
#: one histogram"; three parts, counts, sums and squares, until stop 43)
PARTS = ("cell outcome histogram", "cell sums of squares")
#: a binary outcome's one part: the cells' (cell, outcome) histogram, whose counts, sums and
#: squares are post-processing (docs/explanation/adjusted.md, "A binary outcome: one histogram")
PARTS_BINARY = ("cell outcome histogram",)

#: the estimator a study names "adjusted"
ADJUSTED = Estimator(
    name="adjusted",
    label="DP subclassification (adjusted)",
    estimand=_estimand(None),
    estimand_for=_estimand,
    parts=PARTS,
    parts_for=lambda options, binary: PARTS_BINARY if binary else PARTS,
    binary_outcome=True,
    pure=True,
    designs=("randomized", "observational"),
    options=AdjustedOptions,
    plan=_plan,
    plan_from_statistics=_plan_from_statistics,
    default_shares=DEFAULT_SPLIT,
    default_shares_for=lambda options, binary: DEFAULT_SPLIT_BINARY if binary else DEFAULT_SPLIT,
    noise_model=noise_model,
    predict=predict,
    resolution=adjusted_resolution,
    read_share=read_share,
    required_diagnostics=required_diagnostics,
    plausible=plausible,
    unresolved_reasons=(UNRESOLVED_FIXED_EFFECTS, UNRESOLVED_SUBCLASSIFICATION),
    choose=_choose,
    cautions=cautions,  # when its estimate or interval may not hold (dpate plan, the result)
    candidate_splits={
        2: ((Fraction(4, 5), Fraction(1, 5)), (Fraction(19, 20), Fraction(1, 20))),
    },
    releases_on_any_records=True,
)
