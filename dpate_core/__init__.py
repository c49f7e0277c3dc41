"""dpate_core: the mathematics of differentially private multi-site ATE estimation.

Pure and fast: numpy arrays in, numbers out; no I/O, no logging, no orchestration. Its packages,
from the bottom up:

- :mod:`dpate_core.privacy`: exact (epsilon, delta), budget splits, the budget rule.
- :mod:`dpate_core.noise`: secure samplers (OpenDP, exact discrete Laplace) and simulation ones.
- :mod:`dpate_core.statistics`: the non-private statistics a release noises (per-cell exact grid
  sums, Algorithm 1's matching statistics).
- :mod:`dpate_core.release`: what every release shares: the mechanism plan, its draws (secure or
  simulated) and the public :class:`SiteEstimate`.
- :mod:`dpate_core.mechanisms`: the estimators a study may name, one package each (the DP
  difference in means, SmoothDPMatching and GlobalDPMatching, DP subclassification).
- :mod:`dpate_core.aggregation`: the server's combiners (MVAgg, AggAll, AggLargest, inverse
  variance, random effects), one registry.
- :mod:`dpate_core.inference`: normal and bootstrap intervals from published fields.
- :mod:`dpate_core.planning`: predicted interval widths from public inputs (``dpate plan``).
- :mod:`dpate_core.simulation` and :mod:`dpate_core.synth`: vectorised simulation of the released
  mechanisms and the paper's synthetic data (simulations only).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpate_core.aggregation import AGGREGATORS, AggregateResult, aggregate
    from dpate_core.mechanisms import ESTIMATORS
    from dpate_core.mechanisms.adjusted import dp_adjusted
    from dpate_core.mechanisms.difference_in_means import dp_difference_in_means
    from dpate_core.mechanisms.matching import global_dp_matching, smooth_dp_matching
    from dpate_core.privacy import BudgetSplit, PrivacyParams, exact
    from dpate_core.release import SiteEstimate

# first: numba must not cache compiled kernels inside the installed package
import dpate_core.compile_cache  # noqa: F401

#: the names this package re-exports, each from its submodule, imported on first use (PEP 562):
#: a command that needs only :mod:`dpate_core.privacy` (``dpate ledger show``) does not import
#: numpy's kernels, numba or the mechanisms
_EXPORTS = {
    "AGGREGATORS": "dpate_core.aggregation",
    "AggregateResult": "dpate_core.aggregation",
    "aggregate": "dpate_core.aggregation",
    "ESTIMATORS": "dpate_core.mechanisms",
    "dp_adjusted": "dpate_core.mechanisms.adjusted",
    "dp_difference_in_means": "dpate_core.mechanisms.difference_in_means",
    "global_dp_matching": "dpate_core.mechanisms.matching",
    "smooth_dp_matching": "dpate_core.mechanisms.matching",
    "BudgetSplit": "dpate_core.privacy",
    "PrivacyParams": "dpate_core.privacy",
    "exact": "dpate_core.privacy",
    "SiteEstimate": "dpate_core.release",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpate_core' has no attribute {name!r}")


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
