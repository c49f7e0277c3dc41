"""The recommendation of a study plan: the estimator and budget split, among those valid for the
study's design, with the narrowest predicted combined interval (each estimator's default split
and its ``candidate_splits``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpate_core.aggregation import NoUsableSiteError
from dpate_core.mechanisms import ESTIMATORS
from dpate_core.planning._inputs import SiteDesign
from dpate_core.planning._site import SitePredictions, _z, combined_prediction

__all__ = ["Recommendation"]


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


def _recommend(
    design: str,
    designs: Sequence[SiteDesign],
    aggregator: str,
    predict: SitePredictions,
    options_for: Callable[[str], Any],
    level: float,
    bound: float,
    binary: bool = False,
    unbinned: bool = False,
) -> Recommendation | None:
    """The estimator and split with the narrowest predicted combined interval; ``predict``: the
    site predictions of an estimator (:func:`plan_study`'s, so both predict alike);
    ``options_for``: the options an estimator releases with in this study (its study-wide
    choice, so the default split tried is the one the study would use); ``binary``:
    the spec declares a binary outcome, which only estimators with a binary-outcome mode accept,
    so only they are tried, with that mode's splits; ``unbinned``: the spec has numeric
    covariates with bounds and no bins, which only estimators that take them accept (the others
    would adjust for fewer covariates, and the spec refuses them)."""
    best: tuple[float, str, tuple[Fraction, ...]] | None = None
    valid = [
        name
        for name, e in ESTIMATORS.items()
        if design in e.designs
        and (e.binary_outcome or not binary)
        and (e.unbinned_covariates or not unbinned)
    ]
    for est in valid:
        estimator = ESTIMATORS[est]
        if not estimator.pure and any(d.delta <= 0 for d in designs):
            continue
        for split in estimator.splits_to_try(options_for(est), binary):
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
        + _accepted(binary, unbinned)
        + "and the candidate splits, under the stated assumptions",
    )


def _accepted(binary: bool, unbinned: bool) -> str:
    """Why the estimators tried are fewer than the design's: what the spec declares."""
    needs = [
        *(["a binary-outcome mode"] if binary else []),
        *(["numeric covariates without bins"] if unbinned else []),
    ]
    return f"(those the spec accepts: {' and '.join(needs)}) " if needs else ""
