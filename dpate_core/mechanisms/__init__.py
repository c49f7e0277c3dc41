"""The release mechanisms a study may name, one :class:`Estimator` each, collected by name in
:data:`ESTIMATORS` (:func:`estimator_of`).

Each mechanism is a package of its own: :mod:`~dpate_core.mechanisms.difference_in_means`
(section 3.1.1, randomized trials), :mod:`~dpate_core.mechanisms.matching` (SmoothDPMatching,
Algorithm 2, and GlobalDPMatching) and :mod:`~dpate_core.mechanisms.adjusted` (DP
subclassification).
"""

from ._registry import ESTIMATORS, PRESETS, Estimator, PlanInputs, estimator_of

__all__ = [
    "ESTIMATORS",
    "PRESETS",
    "Estimator",
    "PlanInputs",
    "estimator_of",
]
