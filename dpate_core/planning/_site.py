"""One site's predicted variances and normal-interval half-width (:func:`predict_site`), and the
study's combined prediction from them (the spec's combiner run on the predicted variances)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

from dpate_core.aggregation import AggregateResult, aggregate
from dpate_core.planning._inputs import Assumptions, PredictionInputs, SiteDesign, SitePrediction
from dpate_core.planning._predictors import PREDICTORS, Predictor, adjusted_weighting

__all__ = ["SitePredictions", "predict_site"]

#: ``predict(estimator, designs)``: the site predictions of an estimator, every other input fixed
SitePredictions = Callable[[str, Sequence[SiteDesign]], list[SitePrediction]]

_Z = {0.95: NormalDist().inv_cdf(0.975)}


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    return _Z.get(level) or NormalDist().inv_cdf(0.5 + level / 2.0)


def _predictor(estimator: str) -> Predictor:
    try:
        return PREDICTORS[estimator]
    except KeyError:
        raise ValueError(
            f"no prediction for estimator {estimator!r} (known: {sorted(PREDICTORS)}): register "
            f"one with dpate_core.planning.register_predictor"
        ) from None


def predict_site(
    estimator: str,
    design: SiteDesign,
    *,
    domain_size: int,
    bound: float,
    arm_sizes_public: bool = True,
    assumptions: Assumptions = Assumptions(),
    level: float = 0.95,
    weighting: str = "auto",
) -> SitePrediction:
    """One site's predicted variances and normal-interval half-width (public inputs only).
    ``weighting``: the adjusted estimator's (the spec's ``adjusted_weighting``)."""
    predictor = _predictor(estimator)
    if _needs_delta(estimator) and design.delta <= 0:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} needs delta > 0 (e.g. '1e-5')"
        )
    parts = _parts(estimator, arm_sizes_public)
    if len(design.split) != parts:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} splits its budget into {parts} "
            f"parts, but the split has {len(design.split)} shares: give exactly {parts}"
        )
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    inp = PredictionInputs(
        design, max(int(domain_size), 1), float(bound), arm_sizes_public, assumptions, weighting
    )
    sampling, noise, reported = predictor(inp)
    mode = None
    if estimator == "adjusted":
        mode = adjusted_weighting(
            weighting, design.n, inp.domain_size, design.epsilon, design.split
        )
    return SitePrediction(
        site_id=design.site_id,
        n=design.n,
        epsilon=design.epsilon,
        delta=design.delta,
        split=design.split,
        estimator=estimator,
        sampling_variance=sampling,
        noise_variance=noise,
        reported_variance=reported,
        half_width=_z(level) * math.sqrt(reported),
        weighting=mode,
    )


def _combine(aggregator: str, preds: Sequence[SitePrediction]) -> AggregateResult:
    return aggregate(
        aggregator,
        np.zeros(len(preds)),
        [p.n for p in preds],
        [p.reported_variance for p in preds],
    )


def _parts(estimator: str, arm_sizes_public: bool) -> int:
    from dpate_core.mechanisms import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    return 2 if e is None else e.n_parts(arm_sizes_public)


def _needs_delta(estimator: str) -> bool:
    from dpate_core.mechanisms import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    return e is not None and not e.pure
