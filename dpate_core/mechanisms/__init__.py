"""The release mechanisms a study may name, one :class:`Estimator` each, collected by name in
:data:`ESTIMATORS` (:func:`register`, :func:`unregister`, :func:`estimator_of`).

Each mechanism is a package of its own that defines its estimator (registered here):
:mod:`~dpate_core.mechanisms.difference_in_means` (section 3.1.1, randomized trials),
:mod:`~dpate_core.mechanisms.matching` (SmoothDPMatching, Algorithm 2, and GlobalDPMatching) and
:mod:`~dpate_core.mechanisms.adjusted` (DP subclassification) and
:mod:`~dpate_core.mechanisms.propensity` (DP subclassification on propensity bands). A new
estimator is one module that builds an :class:`Estimator` and passes it to :func:`register`
(``docs/how-to/extending.md``); the rules its ``plausible`` check shares with the others are here too
(:func:`clipped_tau_problems`, ...).
"""

from ._estimator import (
    ESTIMATORS,
    PRESETS,
    BandInputs,
    Estimator,
    NoiseModel,
    PlanInputs,
    Predictor,
    StatisticsInputs,
    StudyChoice,
    StudySite,
    estimator_of,
    register,
    unregister,
)
from ._rules import (
    RTOL,
    at_least,
    clipped_tau_problems,
    no_arm_sizes_problems,
    noise_variance_problems,
    released_variance_problems,
    tau_range_problems,
)
from .adjusted import ADJUSTED
from .difference_in_means import DIFFERENCE_IN_MEANS
from .matching import GLOBAL_MATCHING, SMOOTH_MATCHING
from .propensity import PROPENSITY

# the built-in estimators, in the order lists show them in
for _builtin in (DIFFERENCE_IN_MEANS, SMOOTH_MATCHING, GLOBAL_MATCHING, ADJUSTED, PROPENSITY):
    register(_builtin)

__all__ = [
    "ADJUSTED",
    "DIFFERENCE_IN_MEANS",
    "ESTIMATORS",
    "GLOBAL_MATCHING",
    "PRESETS",
    "PROPENSITY",
    "RTOL",
    "SMOOTH_MATCHING",
    "BandInputs",
    "Estimator",
    "NoiseModel",
    "PlanInputs",
    "Predictor",
    "StatisticsInputs",
    "StudyChoice",
    "StudySite",
    "at_least",
    "clipped_tau_problems",
    "estimator_of",
    "no_arm_sizes_problems",
    "noise_variance_problems",
    "register",
    "released_variance_problems",
    "tau_range_problems",
    "unregister",
]
