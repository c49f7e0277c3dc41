"""Exact privacy parameters and the budget rule.

- :class:`PrivacyParams` (an exact ``(epsilon, delta)``; its float conversions for noise
  calibration round in the safe direction), :class:`BudgetSplit` (shares of a release's budget,
  summing to exactly 1), :func:`exact` and :func:`to_float`;
- :func:`check_budget`: whether a release fits a site's lifetime cap (basic sequential
  composition, exact comparisons).
"""

from ._budget import NOTHING, BudgetCheck, check_budget
from ._params import BudgetSplit, Number, PrivacyParams, exact, fraction_str, to_float

__all__ = [
    "NOTHING",
    "BudgetCheck",
    "BudgetSplit",
    "Number",
    "PrivacyParams",
    "check_budget",
    "exact",
    "fraction_str",
    "to_float",
]
