"""Intervals from published fields only: the normal interval, a parametric bootstrap for sites
and combiners (each estimator's noise model), and the clipping and
"uninformative at this budget" rules (``docs/explanation/inference.md``). Post-processing of DP releases and
public design constants: no privacy cost.
"""

from ._bootstrap import (
    DEFAULT_DRAWS,
    NoiseDraws,
    PublicSite,
    bootstrap_seed,
    combined_bootstrap_interval,
    combined_normal_interval,
    combined_result,
    public_site,
    shared_sd,
    site_bootstrap_interval,
    site_draws,
    site_normal_interval,
)
from ._interval import (
    INFORMATION_RULES,
    NOISE_DOMINATED,
    NOISE_RATIO,
    UNINFORMATIVE,
    UNINFORMATIVE_RULES,
    Interval,
    clip_interval,
    uninformative_rules,
)

__all__ = [
    "DEFAULT_DRAWS",
    "INFORMATION_RULES",
    "NOISE_DOMINATED",
    "NOISE_RATIO",
    "UNINFORMATIVE",
    "UNINFORMATIVE_RULES",
    "Interval",
    "NoiseDraws",
    "PublicSite",
    "bootstrap_seed",
    "clip_interval",
    "combined_bootstrap_interval",
    "combined_normal_interval",
    "combined_result",
    "public_site",
    "shared_sd",
    "site_bootstrap_interval",
    "site_draws",
    "site_normal_interval",
    "uninformative_rules",
]
