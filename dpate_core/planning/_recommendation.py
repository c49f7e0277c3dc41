"""The recommendation of a study plan: the estimator and budget split, among those valid for the
study's design, with the narrowest predicted combined interval (:data:`CANDIDATE_SPLITS`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpate_core.aggregation import NoUsableSiteError
from dpate_core.planning._inputs import SiteDesign
from dpate_core.planning._predictors import PREDICTORS
from dpate_core.planning._site import (
    SitePredictions,
    _needs_delta,
    _parts,
    _z,
    combined_prediction,
)
from dpate_core.privacy import BudgetSplit

__all__ = ["CANDIDATE_SPLITS", "Recommendation"]


@dataclass(frozen=True)
class Recommendation:
    estimator: str
    split: tuple[Fraction, ...]
    combined_width: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "split": [str(s) for s in self.split],
            "combined_width": self.combined_width,
            "reason": self.reason,
        }


#: splits tried for a recommendation (fractions for ATE, variance[, ln S / treated count]); the
#: first is the even split. SmoothDPMatching's come from docs/inference.md ("budget split").
CANDIDATE_SPLITS: dict[tuple[str, int], tuple[tuple[Fraction, ...], ...]] = {
    ("dim", 2): tuple(
        (Fraction(a), 1 - Fraction(a))
        for a in (Fraction(1, 2), Fraction(7, 10), Fraction(4, 5), Fraction(9, 10))
    ),
    ("dim", 3): (
        (Fraction(1, 3),) * 3,
        (Fraction(9, 10), Fraction(1, 20), Fraction(1, 20)),
        (Fraction(7, 10), Fraction(3, 20), Fraction(3, 20)),
    ),
    ("smooth_matching", 3): (
        (Fraction(1, 3),) * 3,
        (Fraction(11, 20), Fraction(3, 20), Fraction(3, 10)),
        (Fraction(7, 10), Fraction(1, 20), Fraction(1, 4)),
    ),
    ("global_matching", 2): tuple(
        (Fraction(a), 1 - Fraction(a)) for a in (Fraction(1, 2), Fraction(4, 5), Fraction(9, 10))
    ),
    ("adjusted", 3): ((Fraction(1, 3),) * 3, (Fraction(1, 4), Fraction(13, 20), Fraction(1, 10))),
}


def _valid_estimators(design: str) -> tuple[str, ...]:
    """Estimators the registry allows for ``design`` (``dpate_core.mechanisms``)."""
    from dpate_core.mechanisms import ESTIMATORS

    return tuple(name for name, e in ESTIMATORS.items() if design in e.designs)


def _default_split(estimator: str, arm_sizes_public: bool) -> tuple[Fraction, ...]:
    from dpate_core.mechanisms import ESTIMATORS

    e = ESTIMATORS.get(estimator)
    parts = _parts(estimator, arm_sizes_public)
    return (e.default_split(arm_sizes_public) if e else BudgetSplit.even(parts)).shares


def _recommend(
    design: str,
    designs: Sequence[SiteDesign],
    aggregator: str,
    arm_sizes_public: bool,
    predict: SitePredictions,
    level: float,
    bound: float,
) -> Recommendation | None:
    """The estimator and split with the narrowest predicted combined interval; ``predict``: the
    site predictions of an estimator (:func:`plan_study`'s, so both predict alike)."""
    best: tuple[float, str, tuple[Fraction, ...]] | None = None
    valid = _valid_estimators(design)
    for est in valid:
        if est not in PREDICTORS or (_needs_delta(est) and any(d.delta <= 0 for d in designs)):
            continue
        parts = _parts(est, arm_sizes_public)
        splits = dict.fromkeys(
            (_default_split(est, arm_sizes_public), *CANDIDATE_SPLITS.get((est, parts), ()))
        )
        for split in splits:
            preds = predict(est, [replace(d, split=split) for d in designs])
            try:
                z = _z(level)
                w = 2.0 * z * math.sqrt(combined_prediction(aggregator, preds, bound, z)[0])
            except NoUsableSiteError:
                continue
            if best is None or w < best[0] * (1 - 1e-9):
                best = (w, est, split)
    if best is None:
        return None
    w, est, split = best
    return Recommendation(
        est,
        split,
        w,
        f"narrowest predicted combined interval among {list(valid)} "
        f"and the candidate splits, under the stated assumptions",
    )
