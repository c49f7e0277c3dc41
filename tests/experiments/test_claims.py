"""Each claim of dpate.experiments on small hand-made tables: it holds where the table agrees with
the claim, fails where it contradicts it, reports the numbers it decided on, and is skipped (None)
where the run lacks its points; evaluate_claims and adjusted_claims are exactly their lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from dpate.experiments.adjusted_claims import (
    adjusted_claims,
    adjusted_far_below_smooth_matching,
    adjusted_noise_near_difference_in_means,
)
from dpate.experiments.claim import claims_markdown
from dpate.experiments.paper_claims import (
    PAPER_CLAIMS,
    SENSITIVITY_CLAIMS,
    evaluate_claims,
    ist_three_site_gaps,
    mae_non_increasing_in_alpha,
    mvagg_safe_when_others_have_small_eps,
    mvagg_sd_mostly_smallest,
    mvagg_tracks_the_better_rule,
    sensitivity_grows_with_imbalance,
    sensitivity_order_one_over_n,
    smooth_matching_far_below_global,
    smooth_matching_mae_small,
    star_mvagg_best,
)
from dpate.experiments.settings import COMPARED_AGGREGATORS

ALPHAS = ("1/8", "1", "8")
Value = float | Callable[[str, str], float]


def panel(
    dataset: str,
    estimator: str,
    mae: dict[str, Value],
    *,
    j: int = 2,
    proportions: str = "1:1",
    alphas: Sequence[str] = ALPHAS,
    sd: dict[str, Value] | None = None,
    noise_sd: float = 1.0,
) -> list[dict[str, Any]]:
    """One panel's rows: ``mae[agg]`` (a number, or a function of alpha and aggregator) for every
    alpha; combiners not given get MAE 1; the standard deviation is the MAE unless ``sd``."""

    def value(table: dict[str, Value], agg: str, alpha: str) -> float:
        v = table.get(agg, 1.0)
        return v(alpha, agg) if callable(v) else v

    return [
        {
            "dataset": dataset,
            "J": j,
            "proportions": proportions,
            "estimator": estimator,
            "aggregator": agg,
            "alpha": alpha,
            "mae_mean": value(mae, agg, alpha),
            "mae_std": value(sd if sd is not None else mae, agg, alpha),
            "noise_sd_site1": noise_sd,
        }
        for alpha in alphas
        for agg in COMPARED_AGGREGATORS
    ]


def test_smooth_matching_far_below_global():
    good = panel("Synth", "smooth_matching", {"mvagg": 0.1}) + panel(
        "Synth", "global_matching", {"mvagg": 1.0}
    )
    c = smooth_matching_far_below_global(good, "Synth")
    assert c is not None and c.holds and c.numbers["median_ratio"] == pytest.approx(0.1)
    assert c.name.startswith("Synth:")
    bad = panel("IHDP", "smooth_matching", {"mvagg": 0.8}) + panel(
        "IHDP", "global_matching", {"mvagg": 1.0}
    )
    c = smooth_matching_far_below_global(bad, "IHDP")
    assert c is not None and not c.holds and c.numbers["max_ratio"] == pytest.approx(0.8)
    assert smooth_matching_far_below_global(good, "Lalonde") is None


def test_smooth_matching_mae_small():
    at8 = {"mvagg": lambda alpha, _: 0.05 if alpha == "8" else 0.5}
    c = smooth_matching_mae_small(panel("Synth", "smooth_matching", at8))
    assert c is not None and c.holds
    assert c.numbers == {"worst": 0.5, "median_at_8": 0.05}
    assert "GlobalDPMatching" not in c.detail  # a run without it: the comparison is left out
    c = smooth_matching_mae_small(panel("Synth", "smooth_matching", {"mvagg": 1.2}))
    assert c is not None and not c.holds and c.numbers["worst"] == 1.2
    no8 = panel("Synth", "smooth_matching", at8, alphas=("1/8", "1"))
    assert smooth_matching_mae_small(no8) is None


def test_mvagg_tracks_the_better_rule_per_design():
    close = {"mvagg": 1.0, "all": 2.0, "largest": 1.02}
    c = mvagg_tracks_the_better_rule(panel("IST", "dim", close), "randomized trials")
    assert c is not None and c.holds and c.numbers["share"] == 1.0
    far = {"mvagg": 3.0, "all": 2.0, "largest": 1.0}
    c = mvagg_tracks_the_better_rule(panel("Synth", "smooth_matching", far), "observational")
    assert c is not None and not c.holds and c.numbers["worst"] == 3.0
    # the randomized trials' rows say nothing about the observational design
    assert mvagg_tracks_the_better_rule(panel("IST", "dim", close), "observational") is None


def test_mvagg_safe_when_others_have_small_eps():
    c = mvagg_safe_when_others_have_small_eps(panel("IST", "dim", {"mvagg": 1.4, "all": 1.0}))
    assert c is not None and c.holds and c.numbers["worst"] == pytest.approx(1.4)
    c = mvagg_safe_when_others_have_small_eps(panel("IST", "dim", {"mvagg": 1.6, "all": 1.0}))
    assert c is not None and not c.holds
    large_alpha_only = panel("IST", "dim", {"mvagg": 9.0}, alphas=("1/2", "1", "8"))
    assert mvagg_safe_when_others_have_small_eps(large_alpha_only) is None


def test_mae_non_increasing_in_alpha():
    falling = {
        a: (lambda alpha, _: {"1/8": 3.0, "1": 2.0, "8": 1.0}[alpha]) for a in COMPARED_AGGREGATORS
    }
    c = mae_non_increasing_in_alpha(panel("IST", "dim", falling))
    assert c is not None and c.holds
    assert c.numbers == {"exceptions": 0.0, "steps": float(len(COMPARED_AGGREGATORS) * 2)}
    rising = {"mvagg": lambda alpha, _: {"1/8": 1.0, "1": 2.0, "8": 3.0}[alpha]}
    c = mae_non_increasing_in_alpha(panel("IST", "dim", rising))
    assert c is not None and not c.holds and c.numbers["exceptions"] == 2.0
    assert mae_non_increasing_in_alpha([]) is None


def test_mvagg_sd_mostly_smallest():
    sd = {"mvagg": 0.5, "all": 1.0, "largest": 1.0}
    c = mvagg_sd_mostly_smallest(panel("IST", "dim", {}, sd=sd))
    assert c is not None and c.holds and c.numbers["share"] == 1.0
    c = mvagg_sd_mostly_smallest(panel("IST", "dim", {}, sd={"mvagg": 2.0}))
    assert c is not None and not c.holds and c.numbers["share"] == 0.0


def _ist3(gaps: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """IST J = 3 panels whose AggLargest - MVAgg gap at alpha 8 and AggAll - MVAgg gap at 1/8
    are ``gaps[proportions]``."""
    rows = []
    for prop, (largest_gap, all_gap) in gaps.items():
        mae = {
            "mvagg": 1.0,
            "largest": lambda alpha, _, g=largest_gap: 1.0 + (g if alpha == "8" else 0.0),
            "all": lambda alpha, _, g=all_gap: 1.0 + (g if alpha == "1/8" else 0.0),
        }
        rows += panel("IST", "dim", mae, j=3, proportions=prop)
    return rows


def test_ist_three_site_gaps():
    c = ist_three_site_gaps(_ist3({"1:1:1": (0.5, 0.1), "18:1:1": (0.1, 0.5)}))
    assert c is not None and c.holds
    assert c.numbers["largest_gap 1:1:1"] == pytest.approx(0.5)
    assert c.numbers["all_gap 18:1:1"] == pytest.approx(0.5)
    c = ist_three_site_gaps(_ist3({"1:1:1": (0.1, 0.5), "18:1:1": (0.5, 0.1)}))
    assert c is not None and not c.holds
    assert ist_three_site_gaps(_ist3({"1:1:1": (0.5, 0.1)})) is None  # one split only


def test_star_mvagg_best():
    c = star_mvagg_best(panel("STAR", "dim", {"mvagg": 0.5}, j=4, proportions="urbanicity"))
    assert c is not None and c.holds
    assert c.numbers == {"best": 3.0, "strictly_best": 3.0, "alphas": 3.0}
    worse_at_8 = {"mvagg": lambda alpha, _: 2.0 if alpha == "8" else 0.5}
    c = star_mvagg_best(panel("STAR", "dim", worse_at_8, j=4, proportions="urbanicity"))
    assert c is not None and not c.holds and c.numbers["best"] == 2.0
    assert star_mvagg_best(panel("IST", "dim", {})) is None


def _by_n(sensitivity: Callable[[int], float]) -> list[dict[str, Any]]:
    return [
        {"sweep": "N", "N": n, "a": 0.0, "smooth_sensitivity": sensitivity(n)}
        for n in (1_000, 10_000, 100_000)
    ]


def test_sensitivity_order_one_over_n():
    c = sensitivity_order_one_over_n(_by_n(lambda n: 50.0 / n))
    assert c is not None and c.holds and c.numbers["tail_slope"] == pytest.approx(-1.0)
    c = sensitivity_order_one_over_n(_by_n(lambda n: 5.0 / n**0.5))
    assert c is not None and not c.holds and c.numbers["tail_slope"] == pytest.approx(-0.5)
    assert sensitivity_order_one_over_n(_by_n(lambda n: 1.0 / n)[:2]) is None


def _by_a(values: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {"sweep": "a", "N": 10_000, "a": a, "smooth_sensitivity": s}
        for a, s in zip((0.0, 1.0, 4.0), values, strict=True)
    ]


def test_sensitivity_grows_with_imbalance():
    c = sensitivity_grows_with_imbalance(_by_a((0.01, 0.02, 0.08)))
    assert c is not None and c.holds
    assert c.numbers == {"growth": pytest.approx(8.0), "max": 0.08}
    for values in ((0.01, 0.5, 1.5), (0.01, 0.05, 0.02)):  # above global; not monotone
        c = sensitivity_grows_with_imbalance(_by_a(values))
        assert c is not None and not c.holds
    assert sensitivity_grows_with_imbalance(_by_a((0.01, 0.02, 0.08))[:1]) is None


def test_adjusted_far_below_smooth_matching():
    smooth = panel("Synth", "smooth_matching", {"mvagg": 1.0})
    c = adjusted_far_below_smooth_matching(
        smooth + panel("Synth", "adjusted", {"mvagg": 0.05}), "Synth"
    )
    assert c is not None and c.holds and c.numbers["min_ratio"] == pytest.approx(20.0)
    c = adjusted_far_below_smooth_matching(
        smooth + panel("Synth", "adjusted", {"mvagg": 0.5}), "Synth"
    )
    assert c is not None and not c.holds and c.numbers["min_ratio"] == pytest.approx(2.0)
    assert adjusted_far_below_smooth_matching(smooth, "Synth") is None


def test_adjusted_noise_near_difference_in_means():
    dim = panel("IST", "dim", {}, noise_sd=1.0)
    c = adjusted_noise_near_difference_in_means(
        dim + panel("IST", "adjusted", {}, noise_sd=1.5), "IST"
    )
    assert c is not None and c.holds and c.numbers["noise_ratio"] == pytest.approx(1.5)
    c = adjusted_noise_near_difference_in_means(
        dim + panel("IST", "adjusted", {}, noise_sd=3.0), "IST"
    )
    assert c is not None and not c.holds
    assert adjusted_noise_near_difference_in_means(dim, "STAR") is None


def test_evaluate_claims_is_its_list_in_order_and_skips_what_the_run_lacks():
    rows = (
        panel("Synth", "smooth_matching", {"mvagg": 0.1})
        + panel("Synth", "global_matching", {"mvagg": 1.0})
        + panel("IST", "dim", {"mvagg": 0.5})
    )
    sens = _by_n(lambda n: 50.0 / n) + _by_a((0.01, 0.02, 0.08))
    expected = [check(rows) for check in PAPER_CLAIMS] + [
        check(sens) for check in SENSITIVITY_CLAIMS
    ]
    claims = evaluate_claims(rows, sens)
    assert claims == [c for c in expected if c is not None]
    # ten claims, some of them once per data set or design
    assert len(PAPER_CLAIMS) + len(SENSITIVITY_CLAIMS) == 13
    names = [c.name for c in claims]
    assert not any(n.startswith(("IHDP", "Lalonde", "STAR", "IST J = 3")) for n in names)
    assert evaluate_claims([], []) == []
    assert adjusted_claims(rows) == []
    text = claims_markdown(claims)
    assert text.count("\n") == len(claims) + 2 and "| yes |" in text
