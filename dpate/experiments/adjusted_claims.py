"""Our claims: the adjusted estimator's goals (docs/explanation/adjusted.md), one function each, checked
against a run with the numbers. Each takes the run's rows (every estimator) and returns a
:class:`~dpate.experiments.claim.Claim`, or None when the run lacks the estimators it compares."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from dpate.experiments.claim import Claim, ClaimCheck, Row, by_point, mae

__all__ = [
    "ADJUSTED_CLAIMS",
    "adjusted_claims",
    "adjusted_far_below_smooth_matching",
    "adjusted_noise_near_difference_in_means",
]


def adjusted_far_below_smooth_matching(rows: Sequence[Row], dataset: str) -> Claim | None:
    """On the observational ``dataset``, the adjusted estimator's MAE at least 10x below
    SmoothDPMatching's (MVAgg) at every point."""
    adj = by_point(rows, dataset, "adjusted")
    smooth = by_point(rows, dataset, "smooth_matching")
    keys = [k for k in adj if k in smooth]
    if not keys:
        return None
    r = np.array([mae(smooth[k], "mvagg") / mae(adj[k], "mvagg") for k in keys])
    worst = keys[int(np.argmin(r))]
    return Claim(
        f"{dataset}: adjusted MAE at least 10x below SmoothDPMatching's (MVAgg, every point)",
        bool(r.min() >= 10.0),
        f"SmoothDPMatching / adjusted MAE over {r.size} points: median {np.median(r):.3g}, "
        f"min {r.min():.3g} ({worst[0][0]} J={worst[0][1]} {worst[0][2]} "
        f"alpha={worst[1]}), max {r.max():.3g}; >= 10x at {(r >= 10).mean():.0%}",
        {"median_ratio": float(np.median(r)), "min_ratio": float(r.min())},
    )


def adjusted_noise_near_difference_in_means(rows: Sequence[Row], dataset: str) -> Claim | None:
    """On the randomized trial ``dataset``, the adjusted estimator's DP noise (site 1's sd)
    within 2x of the DP difference in means' at every point."""
    adj = by_point(rows, dataset, "adjusted")
    dim = by_point(rows, dataset, "dim")
    keys = [k for k in adj if k in dim]
    if not keys:
        return None
    sd = np.array(
        [adj[k]["mvagg"]["noise_sd_site1"] / dim[k]["mvagg"]["noise_sd_site1"] for k in keys]
    )
    r = np.array([mae(adj[k], "mvagg") / mae(dim[k], "mvagg") for k in keys])
    return Claim(
        f"{dataset}: adjusted noise within 2x of the DP difference in means' (site 1)",
        bool(sd.max() <= 2.0),
        f"noise sd ratio adjusted / DiM: {np.median(sd):.3g} (max {sd.max():.3g}); "
        f"MVAgg MAE ratio median {np.median(r):.3g} (max {r.max():.3g}) over {r.size} "
        f"points",
        {"noise_ratio": float(sd.max()), "mae_ratio": float(np.median(r))},
    )


#: our claims, in the order of ``claims.md``
ADJUSTED_CLAIMS: tuple[ClaimCheck, ...] = (
    *(
        partial(adjusted_far_below_smooth_matching, dataset=ds)
        for ds in ("Synth", "IHDP", "Lalonde")
    ),
    *(partial(adjusted_noise_near_difference_in_means, dataset=ds) for ds in ("IST", "STAR")),
)


def adjusted_claims(rows: Sequence[Row]) -> list[Claim]:
    """The adjusted estimator's goals that this run can check, each with its numbers."""
    checked = [check(rows) for check in ADJUSTED_CLAIMS]
    return [c for c in checked if c is not None]
