"""DP exact matching for observational studies: SmoothDPMatching (Algorithm 2, Laplace noise
scaled to a beta-smooth sensitivity, with its private variance) and GlobalDPMatching (the
global-sensitivity baseline), as corrected (``docs/corrections.md``).

:func:`plan_matching` builds either release's plan from Algorithm 1's one-pass statistics; the
smooth and global sensitivities of the estimate and of its variance are here too, with the
stratified (within-cell) variance and its pure DP release.
"""

from ._release import global_dp_matching, plan_matching, smooth_dp_matching
from ._sensitivity import (
    matching_ate_float_error,
    matching_global_sensitivity,
    matching_local_sensitivity_bound,
    matching_smooth_sensitivity,
    matching_variance_float_error,
    matching_variance_local_sensitivity_bound,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)
from ._stratified_variance import (
    SUBSPLIT,
    conditional_variance,
    match_use_weight,
    stratified_noise,
    stratified_variance,
)

__all__ = [
    "SUBSPLIT",
    "conditional_variance",
    "global_dp_matching",
    "match_use_weight",
    "matching_ate_float_error",
    "matching_global_sensitivity",
    "matching_local_sensitivity_bound",
    "matching_smooth_sensitivity",
    "matching_variance_float_error",
    "matching_variance_local_sensitivity_bound",
    "matching_variance_smooth_sensitivity",
    "plan_matching",
    "smooth_beta",
    "smooth_dp_matching",
    "stratified_noise",
    "stratified_variance",
]
