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

Each name is imported from the package that defines it (``from dpate_core.mechanisms.matching
import smooth_dp_matching``, ``from dpate_core.aggregation import aggregate``): this package
re-exports none, so every public name has one import path.
"""

# first: numba must not cache compiled kernels inside the installed package
import dpate_core.compile_cache  # noqa: F401
