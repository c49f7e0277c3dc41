"""Know before you spend: predicted interval widths of a study from public inputs only
(``dpate plan``, ``docs/explanation/inference.md``).

:func:`plan_study` gives each site's and the combined predicted interval, the budget a target
width needs and a recommendation of estimator and split (:class:`StudyPlan`); the inputs and the
stated assumptions are :class:`SiteDesign` and :class:`Assumptions`; each estimator's own
``predict`` gives a site's variances (:class:`PredictionInputs` in, three variances out).
"""

from ._inputs import (
    Assumptions,
    PredictionInputs,
    SiteDesign,
    SitePrediction,
    balanced_counts,
    clamped_mean,
    spread_counts,
)
from ._recommendation import Recommendation
from ._site import SitePredictions, combined_prediction, predict_site, predicted_uninformative
from ._study import StudyPlan, plan_study

__all__ = [
    "Assumptions",
    "PredictionInputs",
    "Recommendation",
    "SiteDesign",
    "SitePrediction",
    "SitePredictions",
    "StudyPlan",
    "balanced_counts",
    "clamped_mean",
    "combined_prediction",
    "plan_study",
    "predict_site",
    "predicted_uninformative",
    "spread_counts",
]
