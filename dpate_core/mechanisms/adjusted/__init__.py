"""The covariate-adjusted release (``"adjusted"``): DP subclassification from noisy per-cell
sufficient statistics, pure epsilon-DP (``docs/adjusted.md``).

:func:`plan_adjusted` / :func:`plan_adjusted_from_statistics` build the release's plan;
:func:`dp_adjusted` plans and draws once. The two post-processings of the noisy vectors, stratum
fixed effects and Algorithm 1's subclassification, are :func:`assemble_fixed_effects` and
:func:`assemble_subclassification`; :func:`resolve_weighting` is the public rule of ``"auto"``.
"""

from ._release import (
    AUTO_BIAS,
    AUTO_RATIO,
    DEFAULT_SPLIT,
    RATIO_DAMPING,
    RESOLVE_Z,
    THRESHOLD_FACTOR,
    UNRESOLVED_FIXED_EFFECTS,
    UNRESOLVED_SUBCLASSIFICATION,
    WEIGHTINGS,
    dp_adjusted,
    plan_adjusted,
    plan_adjusted_from_statistics,
    ratio_bias_remainder,
    resolve_weighting,
)
from ._weightings import (
    ESTIMANDS,
    PublicConstants,
    assemble_fixed_effects,
    assemble_subclassification,
)

__all__ = [
    "AUTO_BIAS",
    "AUTO_RATIO",
    "DEFAULT_SPLIT",
    "ESTIMANDS",
    "RATIO_DAMPING",
    "RESOLVE_Z",
    "THRESHOLD_FACTOR",
    "UNRESOLVED_FIXED_EFFECTS",
    "UNRESOLVED_SUBCLASSIFICATION",
    "WEIGHTINGS",
    "PublicConstants",
    "assemble_fixed_effects",
    "assemble_subclassification",
    "dp_adjusted",
    "plan_adjusted",
    "plan_adjusted_from_statistics",
    "ratio_bias_remainder",
    "resolve_weighting",
]
