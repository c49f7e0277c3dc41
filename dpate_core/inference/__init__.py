"""Intervals from published fields only: the normal interval, a parametric bootstrap for sites
and combiners (each estimator's noise model, :data:`NOISE_MODELS`), and the clipping and
"uninformative at this budget" rules (``docs/inference.md``). Post-processing of DP releases and
public design constants: no privacy cost.
"""

from ._bootstrap import (
    DEFAULT_DRAWS,
    INFORMATION_RULES,
    NOISE_DOMINATED,
    NOISE_RATIO,
    UNINFORMATIVE,
    UNINFORMATIVE_RULES,
    Interval,
    PublicSite,
    bootstrap_seed,
    clip_interval,
    combined_bootstrap_interval,
    combined_normal_interval,
    public_site,
    site_bootstrap_interval,
    site_draws,
    site_normal_interval,
    uninformative_rules,
)
from ._noise_models import NOISE_MODELS, NoiseDraws, NoiseModel, register_noise_model

__all__ = [
    "DEFAULT_DRAWS",
    "INFORMATION_RULES",
    "NOISE_DOMINATED",
    "NOISE_MODELS",
    "NOISE_RATIO",
    "UNINFORMATIVE",
    "UNINFORMATIVE_RULES",
    "Interval",
    "NoiseDraws",
    "NoiseModel",
    "PublicSite",
    "bootstrap_seed",
    "clip_interval",
    "combined_bootstrap_interval",
    "combined_normal_interval",
    "public_site",
    "register_noise_model",
    "site_bootstrap_interval",
    "site_draws",
    "site_normal_interval",
    "uninformative_rules",
]
