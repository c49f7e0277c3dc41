"""The paper's claims (section 4.2), one function each, checked against a run with the numbers.

Each takes the run's rows of the paper's estimators (:data:`~dpate.experiments.settings.
PAPER_ESTIMATORS`; the smooth-sensitivity rows for the last two) and returns a
:class:`~dpate.experiments.claim.Claim`, or None when the run has none of its points.
:func:`evaluate_claims` runs :data:`PAPER_CLAIMS` then :data:`SENSITIVITY_CLAIMS`, in the paper's
order.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import partial
from itertools import pairwise

import numpy as np

from dpate.experiments.claim import (
    OBSERVATIONAL,
    RANDOMIZED,
    TOL,
    Claim,
    ClaimCheck,
    Row,
    by_point,
    mae,
    panels,
    point_label,
    points,
)
from dpate.experiments.settings import AGGREGATOR_LABELS, COMPARED_AGGREGATORS

__all__ = [
    "PAPER_CLAIMS",
    "SENSITIVITY_CLAIMS",
    "evaluate_claims",
    "ist_three_site_gaps",
    "mae_non_increasing_in_alpha",
    "mvagg_safe_when_others_have_small_eps",
    "mvagg_sd_mostly_smallest",
    "mvagg_tracks_the_better_rule",
    "sensitivity_grows_with_imbalance",
    "sensitivity_order_one_over_n",
    "smooth_matching_far_below_global",
    "smooth_matching_mae_small",
    "star_mvagg_best",
]


def smooth_matching_far_below_global(rows: Sequence[Row], dataset: str) -> Claim | None:
    """1. On ``dataset``, SmoothDPMatching's MAE far below GlobalDPMatching's (MVAgg): the median
    ratio over the points at most 1/2."""
    smooth = by_point(rows, dataset, "smooth_matching")
    glob = by_point(rows, dataset, "global_matching")
    r = np.array([mae(smooth[k], "mvagg") / mae(glob[k], "mvagg") for k in smooth if k in glob])
    if not r.size:
        return None
    return Claim(
        f"{dataset}: SmoothDPMatching's MAE far below GlobalDPMatching's (MVAgg)",
        bool(np.median(r) <= 0.5),
        f"smooth/global MAE ratio over {r.size} points: median {np.median(r):.3g} "
        f"({1 / np.median(r):.3g}x lower), range {r.min():.3g} to {r.max():.3g}; "
        f"smooth lower at {(r < 1).mean():.0%} of points",
        {
            "median_ratio": float(np.median(r)),
            "max_ratio": float(r.max()),
            "min_ratio": float(r.min()),
        },
    )


def smooth_matching_mae_small(rows: Sequence[Row]) -> Claim | None:
    """2. SmoothDPMatching + MVAgg: MAE below 1 everywhere, about 0.1 or less (median) at the
    largest alpha, 8."""
    sm = points(rows, estimator="smooth_matching")
    if not (sm and any(a == "8" for _, a, _ in sm)):
        return None
    worst = max(mae(v, "mvagg") for _, _, v in sm)
    at8 = [mae(v, "mvagg") for k, a, v in sm if a == "8"]
    gl = [mae(v, "mvagg") for _, _, v in points(rows, estimator="global_matching")]
    beside = (
        f"; GlobalDPMatching + MVAgg: median {np.median(gl):.3g}, max {max(gl):.3g}" if gl else ""
    )
    return Claim(
        "SmoothDPMatching + MVAgg: MAE < 1 in all cases and about 0.1 or less at alpha = 8",
        bool(worst < 1 and np.median(at8) <= 0.1),
        f"largest MVAgg MAE {worst:.3g}; at alpha = 8: median {np.median(at8):.3g}, "
        f"max {max(at8):.3g} over {len(at8)} panels" + beside,
        {"worst": worst, "median_at_8": float(np.median(at8))},
    )


#: the paper's designs, by the estimators the claims read on them
FAMILIES: dict[str, tuple[str, ...]] = {
    "randomized trials": RANDOMIZED,
    "observational": OBSERVATIONAL,
}


def mvagg_tracks_the_better_rule(rows: Sequence[Row], family: str) -> Claim | None:
    """3. MVAgg at or below (within 5%) min(AggAll, AggLargest) at 60% of the points or more of
    the design ``family`` (a key of :data:`FAMILIES`)."""
    pts = [p for p in points(rows) if p[0][3] in FAMILIES[family]]
    if not pts:
        return None
    rel = np.array([mae(v, "mvagg") / min(mae(v, "all"), mae(v, "largest")) for _, _, v in pts])
    worst_k = pts[int(np.argmax(rel))]
    share = float(np.mean(rel <= TOL))
    return Claim(
        f"MVAgg at or below min(AggAll, AggLargest) for most alpha ({family})",
        share >= 0.6,
        f"MVAgg within 5% of, or below, the better rule at {int((rel <= TOL).sum())} of "
        f"{rel.size} points ({share:.0%}); strictly below at {(rel < 1 / TOL).mean():.0%}; "
        f"MVAgg / min(AggAll, AggLargest): median {np.median(rel):.3g}, worst "
        f"{rel.max():.3g} ({point_label(worst_k[0], worst_k[1])})",
        {"share": share, "median": float(np.median(rel)), "worst": float(rel.max())},
    )


def mvagg_safe_when_others_have_small_eps(rows: Sequence[Row]) -> Claim | None:
    """4. MVAgg never worse than AggAll by more than 1.5x where the other sites have a much
    smaller epsilon (alpha <= 1/4)."""
    small = [p for p in points(rows) if Fraction(p[1]) <= Fraction(1, 4)]
    if not small:
        return None
    vs_all = np.array([mae(v, "mvagg") / mae(v, "all") for _, _, v in small])
    wk = small[int(np.argmax(vs_all))]
    bk = small[int(np.argmin(vs_all))]
    return Claim(
        "MVAgg never worse than AggAll by a large factor when the other sites have a much "
        "smaller eps (alpha <= 1/4)",
        bool(vs_all.max() <= 1.5),
        f"MVAgg / AggAll over {vs_all.size} points: worst {vs_all.max():.3g} "
        f"({point_label(wk[0], wk[1])}), median {np.median(vs_all):.3g}; AggAll's MAE is up to "
        f"{1 / vs_all.min():.3g}x MVAgg's ({point_label(bk[0], bk[1])})",
        {
            "worst": float(vs_all.max()),
            "median": float(np.median(vs_all)),
            "best_gain": float(1 / vs_all.min()),
        },
    )


def mae_non_increasing_in_alpha(rows: Sequence[Row]) -> Claim | None:
    """5. A larger alpha never makes the estimate less accurate, for every combiner: at most 5% of
    the alpha steps raise the MAE by more than 5%."""
    steps, bad = 0, []
    for key, by_alpha in panels(rows).items():
        alphas = sorted(by_alpha, key=Fraction)
        for agg in COMPARED_AGGREGATORS:
            for lo, hi in pairwise(alphas):
                steps += 1
                if by_alpha[hi][agg]["mae_mean"] > TOL * by_alpha[lo][agg]["mae_mean"]:
                    bad.append((agg, key, hi))
    if not steps:
        return None
    by_agg = {a: sum(1 for b in bad if b[0] == a) for a in COMPARED_AGGREGATORS}
    return Claim(
        "MAE non-increasing in alpha for every combiner",
        len(bad) <= 0.05 * steps,
        f"{steps - len(bad)} of {steps} alpha steps do not raise the MAE by more than 5%; "
        "exceptions per combiner: "
        + ", ".join(f"{AGGREGATOR_LABELS[a]} {n}" for a, n in by_agg.items()),
        {"exceptions": float(len(bad)), "steps": float(steps)},
    )


def mvagg_sd_mostly_smallest(rows: Sequence[Row]) -> Claim | None:
    """6. MVAgg's standard deviation the smallest (within 5%) of MVAgg, AggAll and AggLargest at
    60% of the points or more."""
    pts = points(rows)
    if not pts:
        return None
    sd_ok = [
        v["mvagg"]["mae_std"] <= TOL * min(v["all"]["mae_std"], v["largest"]["mae_std"])
        for _, _, v in pts
    ]
    return Claim(
        "MVAgg's standard deviation mostly the smallest of MVAgg, AggAll, AggLargest",
        float(np.mean(sd_ok)) >= 0.6,
        f"smallest (within 5%) at {sum(sd_ok)} of {len(sd_ok)} points ({np.mean(sd_ok):.0%})",
        {"share": float(np.mean(sd_ok))},
    )


def ist_three_site_gaps(rows: Sequence[Row]) -> Claim | None:
    """7. IST, J = 3: the AggLargest - MVAgg gap is largest at 1:1:1 (alpha = 8) and the
    AggAll - MVAgg gap at 18:1:1 (alpha = 1/8). Numbers: each split's gaps (``largest_gap
    1:1:1``, ``all_gap 18:1:1``, ...)."""
    ist3 = panels(rows, dataset="IST", J=3)
    if len(ist3) < 2:
        return None
    gap_l = {
        k[2]: v["8"]["largest"]["mae_mean"] - v["8"]["mvagg"]["mae_mean"]
        for k, v in ist3.items()
        if "8" in v
    }
    gap_a = {
        k[2]: v["1/8"]["all"]["mae_mean"] - v["1/8"]["mvagg"]["mae_mean"]
        for k, v in ist3.items()
        if "1/8" in v
    }
    if not (gap_l and gap_a):
        return None
    top_l, top_a = max(gap_l, key=gap_l.__getitem__), max(gap_a, key=gap_a.__getitem__)
    return Claim(
        "IST J = 3: AggLargest - MVAgg gap largest at 1:1:1 (alpha = 8); AggAll - MVAgg "
        "gap largest at 18:1:1 (alpha = 1/8)",
        top_l == "1:1:1" and top_a == "18:1:1",
        "AggLargest - MVAgg at alpha 8: "
        + ", ".join(f"{k} {v:.2g}" for k, v in gap_l.items())
        + "; AggAll - MVAgg at alpha 1/8: "
        + ", ".join(f"{k} {v:.2g}" for k, v in gap_a.items()),
        {
            **{f"largest_gap {k}": float(v) for k, v in gap_l.items()},
            **{f"all_gap {k}": float(v) for k, v in gap_a.items()},
        },
    )


def star_mvagg_best(rows: Sequence[Row]) -> Claim | None:
    """8. STAR (J = 4): MVAgg the best (within 5%) of MVAgg, AggAll and AggLargest at every
    alpha."""
    star = points(rows, dataset="STAR")
    if not star:
        return None
    best = [mae(v, "mvagg") <= TOL * min(mae(v, "all"), mae(v, "largest")) for _, _, v in star]
    strict = [mae(v, "mvagg") <= min(mae(v, "all"), mae(v, "largest")) for _, _, v in star]
    return Claim(
        "STAR (J = 4): MVAgg the best of MVAgg, AggAll, AggLargest for all alpha",
        all(best),
        f"best or within 5% at {sum(best)} of {len(best)} alphas, strictly best at "
        f"{sum(strict)}; MAE "
        + ", ".join(
            f"{a}: {mae(v, 'mvagg'):.2g}/{mae(v, 'all'):.2g}/{mae(v, 'largest'):.2g}"
            for _, a, v in star
        )
        + " (MVAgg/AggAll/AggLargest)",
        {"best": float(sum(best)), "strictly_best": float(sum(strict)), "alphas": float(len(best))},
    )


def sensitivity_order_one_over_n(sens: Sequence[Row]) -> Claim | None:
    """9. Smooth sensitivity close to O(1/N) for balanced data (a = 0): the log-log slope between
    the two largest N within [-1.15, -0.85] and N * S not growing."""
    by_n: dict[int, list[float]] = {}
    for r in sens:
        if r["sweep"] == "N" and r["a"] == 0.0:
            by_n.setdefault(int(r["N"]), []).append(r["smooth_sensitivity"])
    if len(by_n) < 3:
        return None
    ns = np.array(sorted(by_n))
    s = np.array([np.mean(by_n[k]) for k in ns])
    ns_prod = ns * s
    tail = float(np.log(s[-1] / s[-2]) / np.log(ns[-1] / ns[-2]))
    overall = float(np.polyfit(np.log(ns), np.log(s), 1)[0])
    return Claim(
        "Smooth sensitivity close to O(1/N) for balanced data (a = 0, |X| = 100)",
        bool(-1.15 <= tail <= -0.85 and ns_prod[-1] <= ns_prod[0]),
        "N*S: "
        + ", ".join(f"{n}: {v:.3g}" for n, v in zip(ns, ns_prod, strict=True))
        + f"; log-log slope {overall:.2f} over the whole range, {tail:.2f} between the two "
        "largest N",
        {"tail_slope": tail, "slope": overall},
    )


def sensitivity_grows_with_imbalance(sens: Sequence[Row]) -> Claim | None:
    """10. Smooth sensitivity non-decreasing in the imbalance a (N = 10,000), larger at the
    largest a than at the smallest, and below the global sensitivity."""
    by_a: dict[float, list[float]] = {}
    for r in sens:
        if r["sweep"] == "a":
            by_a.setdefault(float(r["a"]), []).append(r["smooth_sensitivity"])
    if len(by_a) < 2:
        return None
    a_vals = np.array(sorted(by_a))
    s = np.array([np.mean(by_a[a]) for a in a_vals])
    monotone = bool(np.all(np.diff(s) >= 0))
    return Claim(
        "Smooth sensitivity grows with the imbalance a and stays below the global one",
        bool(s[-1] > s[0] and monotone and s.max() < 1.0),
        f"N = 10,000: S from {s[0]:.3g} (a = {a_vals[0]:g}) to {s[-1]:.3g} "
        f"(a = {a_vals[-1]:g}), x{s[-1] / s[0]:.3g}; non-decreasing: {monotone}; global "
        "sensitivity 2B = 2 (paper: B = 1)",
        {"growth": float(s[-1] / s[0]), "max": float(s.max())},
    )


#: the claims read on the MAE table, in the paper's order
PAPER_CLAIMS: tuple[ClaimCheck, ...] = (
    *(partial(smooth_matching_far_below_global, dataset=ds) for ds in ("Synth", "IHDP", "Lalonde")),
    smooth_matching_mae_small,
    *(partial(mvagg_tracks_the_better_rule, family=f) for f in FAMILIES),
    mvagg_safe_when_others_have_small_eps,
    mae_non_increasing_in_alpha,
    mvagg_sd_mostly_smallest,
    ist_three_site_gaps,
    star_mvagg_best,
)
#: the claims read on the smooth-sensitivity curves
SENSITIVITY_CLAIMS: tuple[ClaimCheck, ...] = (
    sensitivity_order_one_over_n,
    sensitivity_grows_with_imbalance,
)


def evaluate_claims(rows: Sequence[Row], sens: Sequence[Row]) -> list[Claim]:
    """The paper's claims (section 4.2) that this run can check, each with its numbers: the rows
    of the paper's estimators (``rows``) and the sensitivity curves (``sens``)."""
    checked = [check(rows) for check in PAPER_CLAIMS]
    checked += [check(sens) for check in SENSITIVITY_CLAIMS]
    return [c for c in checked if c is not None]
