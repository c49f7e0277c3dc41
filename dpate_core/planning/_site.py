"""One site's predicted variances and normal-interval half-width (:func:`predict_site`), and the
study's combined prediction from them (the spec's combiner run on the predicted variances)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from dpate_core.aggregation import AggregateResult, aggregate
from dpate_core.mechanisms import estimator_of
from dpate_core.planning._inputs import Assumptions, PredictionInputs, SiteDesign, SitePrediction

__all__ = ["SitePredictions", "predict_site"]

#: ``predict(estimator, designs)``: the site predictions of an estimator, every other input fixed
SitePredictions = Callable[[str, Sequence[SiteDesign]], list[SitePrediction]]

_Z = {0.95: NormalDist().inv_cdf(0.975)}


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    return _Z.get(level) or NormalDist().inv_cdf(0.5 + level / 2.0)


def predict_site(
    estimator: str,
    design: SiteDesign,
    *,
    domain_size: int,
    bound: float,
    options: Any = None,
    assumptions: Assumptions = Assumptions(),
    level: float = 0.95,
) -> SitePrediction:
    """One site's predicted variances and normal-interval half-width (public inputs only).
    ``options``: the estimator's spec options (None: its defaults)."""
    est = estimator_of(estimator)
    if not est.pure and design.delta <= 0:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} needs delta > 0 (e.g. '1e-5')"
        )
    parts = est.n_parts(options)
    if len(design.split) != parts:
        raise ValueError(
            f"site {design.site_id!r}: estimator {estimator!r} splits its budget into {parts} "
            f"parts, but the split has {len(design.split)} shares: give exactly {parts}"
        )
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    domain = max(int(domain_size), 1)
    inp = PredictionInputs(design, domain, float(bound), assumptions, options)
    sampling, noise, reported = est.predict(inp)
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
        weighting=est.variant_of(options, design.n, domain, design.epsilon, design.split),
    )


def _combine(aggregator: str, preds: Sequence[SitePrediction]) -> AggregateResult:
    return aggregate(
        aggregator,
        np.zeros(len(preds)),
        [p.n for p in preds],
        [p.reported_variance for p in preds],
    )
