"""dpate_core: the mathematics of differentially private multi-site ATE estimation.

Pure and fast: numpy arrays in, numbers out; no I/O, no logging, no orchestration. The modules:

- :mod:`dpate_core.privacy`: exact (epsilon, delta) and budget splits.
- :mod:`dpate_core.noise`: secure (OpenDP) and simulation samplers; analytic Gaussian calibration.
- :mod:`dpate_core.estimators`: exact matching (Algorithm 1), its variance, difference in means.
- :mod:`dpate_core.sensitivity`: local, smooth and global sensitivities (corrected per ERRATA).
- :mod:`dpate_core.release`: what every release shares: the mechanism plan, its draws (secure or
  simulated) and the public :class:`SiteEstimate`.
- :mod:`dpate_core.difference_in_means`: DP difference in means (randomized trials).
- :mod:`dpate_core.matching`: SmoothDPMatching (Algorithm 2) and GlobalDPMatching.
- :mod:`dpate_core.adjusted`: DP subclassification ("adjusted"), pure epsilon-DP.
- :mod:`dpate_core.registry`: every estimator a study may name, declared once.
- :mod:`dpate_core.inference`: bootstrap and normal intervals from published fields.
- :mod:`dpate_core.planning`: predicted interval widths from public inputs (``dpate plan``), with
  :mod:`~dpate_core.plan_inputs`, :mod:`~dpate_core.predictors` (one per estimator),
  :mod:`~dpate_core.site_prediction` and :mod:`~dpate_core.plan_recommendation`.
- :mod:`dpate_core.aggregators`: every aggregator a study may name, declared once (one
  vectorised implementation each).
- :mod:`dpate_core.aggregation`: MVAgg, AggAll, AggLargest, inverse-variance, random effects.
"""

# first: numba must not cache compiled kernels inside the installed package
import dpate_core.compile_cache  # noqa: F401
from dpate_core.adjusted import dp_adjusted
from dpate_core.aggregation import AGGREGATORS, AggregateResult, aggregate
from dpate_core.difference_in_means import dp_difference_in_means
from dpate_core.matching import global_dp_matching, smooth_dp_matching
from dpate_core.privacy import BudgetSplit, PrivacyParams, exact
from dpate_core.release import ESTIMATORS, SiteEstimate

__all__ = [
    "AGGREGATORS",
    "ESTIMATORS",
    "AggregateResult",
    "BudgetSplit",
    "PrivacyParams",
    "SiteEstimate",
    "aggregate",
    "dp_adjusted",
    "dp_difference_in_means",
    "exact",
    "global_dp_matching",
    "smooth_dp_matching",
]
