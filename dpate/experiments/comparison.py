"""The meta-analysis combiners against MVAgg (the second table of ``claims.md``): not a claim of
the paper, a comparison."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpate.experiments.claim import OBSERVATIONAL, RANDOMIZED, TOL, Row, point_label, points
from dpate.experiments.settings import AGGREGATOR_LABELS

__all__ = ["DESIGN_FAMILIES", "combiner_comparison"]

#: the designs compared, by the estimators run on them
DESIGN_FAMILIES: dict[str, tuple[str, ...]] = {
    "randomized": RANDOMIZED,
    "observational": OBSERVATIONAL,
}


def combiner_comparison(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Where inverse-variance or random effects beat MVAgg by more than 5%, or lose to it."""
    out = []
    for other in ("inverse_variance", "random_effects"):
        for family, ests in DESIGN_FAMILIES.items():
            pts = [p for p in points(rows) if p[0][3] in ests]
            if not pts:
                continue
            r = np.array([v[other]["mae_mean"] / v["mvagg"]["mae_mean"] for _, _, v in pts])
            wi, li = int(np.argmin(r)), int(np.argmax(r))
            out.append(
                {
                    "combiner": AGGREGATOR_LABELS[other],
                    "family": family,
                    "points": int(r.size),
                    "beats_mvagg": float(np.mean(r < 1 / TOL)),
                    "loses": float(np.mean(r > TOL)),
                    "median_ratio": float(np.median(r)),
                    "best": f"{r[wi]:.3g} ({point_label(pts[wi][0], pts[wi][1])})",
                    "worst": f"{r[li]:.3g} ({point_label(pts[li][0], pts[li][1])})",
                }
            )
    return out
