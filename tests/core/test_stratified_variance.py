"""The stratified sampling variance of Algorithm 1
(dpate_core/mechanisms/matching/_stratified_variance.py) and its release as the matching plans'
``variance = "stratified"`` mode (docs/explanation/privacy.md, Stratified variance): the weights ``K`` against
Algorithm 1 itself, unbiasedness of the non-private estimate, exhaustive privacy accounting of the
released vectors over small datasets, an empirical privacy check, the default mode left untouched,
and the cell vectors read in outcome units."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms.matching import (
    SUBSPLIT,
    conditional_variance,
    match_use_weight,
    plan_matching,
    stratified_variance,
)
from dpate_core.privacy import to_float
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics, exact_matching, matching_statistics
from dpate_core.synth import synth
from tests.core.test_release_privacy import REPS, check_privacy

DELTA = Fraction(1, 100_000)


def _plan(w, y, x, domain, mode, eps=1, estimator="smooth_matching", bound=1.0):
    stats = matching_statistics(w, y, x, domain, bound=bound)
    cells = cell_statistics(w, y, x, domain_size=domain, bound=bound)
    return plan_matching(
        estimator,
        stats,
        bound=bound,
        epsilon=eps,
        delta=DELTA,
        domain_size=domain,
        variance=mode,
        cells=cells,
    )


def test_match_use_weight_is_the_sum_of_squared_match_counts_of_algorithm_1():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n, domain = int(rng.integers(2, 60)), int(rng.integers(1, 6))
        w = rng.integers(0, 2, n)
        x = rng.integers(0, domain, n)
        big_l = exact_matching(w, rng.random(n), x).matches_used
        for s in range(domain):
            t, c = int(((x == s) & (w == 1)).sum()), int(((x == s) & (w == 0)).sum())
            both = t > 0 and c > 0
            want_t = float(((1 + big_l[(x == s) & (w == 1)]) ** 2).sum()) if both else 0.0
            want_c = float(((1 + big_l[(x == s) & (w == 0)]) ** 2).sum()) if both else 0.0
            assert match_use_weight(t, c) == want_t
            assert match_use_weight(c, t) == want_c


def test_stratified_estimate_is_unbiased_for_the_conditional_variance_on_synth():
    # W and X fixed, the outcome noise redrawn: the mean estimate is the conditional variance,
    # which is also the Monte Carlo variance of Algorithm 1's estimate
    d = synth(4000, 20, a=-0.5, b=0.2, seed=1)
    stats = matching_statistics(d.w, d.y, d.x, 20)
    sigma2 = 0.01 / 12  # e ~ U[0, 0.1]
    true = conditional_variance(stats.treated_counts, stats.control_counts, sigma2, sigma2)
    rng = np.random.default_rng(2)
    taus, ests = [], []
    for _ in range(300):
        y = np.minimum(0.2 * d.x / 19 + 0.5 * d.w + rng.uniform(0, 0.1, d.n), 1.0)
        taus.append(exact_matching(d.w, y, d.x).tau)
        ests.append(stratified_variance(d.w, y, d.x, 20))
    assert np.mean(ests) / true == pytest.approx(1.0, abs=0.03)
    assert np.var(taus) / true == pytest.approx(1.0, abs=0.25)
    # the appendix's V_hat squares the effect: two orders of magnitude too large here
    assert stats.variance / true > 50


def test_default_mode_is_the_appendix_and_unchanged():
    d = synth(500, 5, a=0.3, b=0.1, seed=4)
    stats = matching_statistics(d.w, d.y, d.x, 5, bound=1.0)
    for est in ("smooth_matching", "global_matching"):
        kw = dict(bound=1.0, epsilon=1, delta=DELTA, domain_size=5)
        default = plan_matching(est, stats, **kw)
        explicit = plan_matching(est, stats, variance="appendix", **kw)
        assert [s.name for s in default.noise] == [s.name for s in explicit.noise]
        assert "variance" in [s.name for s in default.noise]
        a = default.assemble(draw_many(default, np.random.default_rng(0), 50))
        b = explicit.assemble(draw_many(explicit, np.random.default_rng(0), 50))
        assert np.array_equal(a.tau, b.tau) and np.array_equal(a.variance, b.variance)


def test_stratified_mode_needs_matching_cell_statistics():
    d = synth(200, 4, a=0.0, b=0.1, seed=5)
    stats = matching_statistics(d.w, d.y, d.x, 4, bound=1.0)
    kw = dict(bound=1.0, epsilon=1, delta=DELTA, domain_size=4, variance="stratified")
    with pytest.raises(ValueError, match="per-cell statistics"):
        plan_matching("smooth_matching", stats, **kw)
    other = cell_statistics(d.w[:100], d.y[:100], d.x[:100], domain_size=4, bound=1.0)
    with pytest.raises(ValueError, match="do not match"):
        plan_matching("smooth_matching", stats, cells=other, **kw)
    with pytest.raises(ValueError, match="appendix"):
        plan_matching("smooth_matching", stats, **{**kw, "variance": "pooled"})


def _vector_loss(plan_a, plan_b) -> dict[str, float]:
    """Privacy loss of each released variance vector: L1 change of its value over its scale."""
    sb = {s.name: s for s in plan_b.noise}
    return {
        s.name: float(np.abs(np.asarray(s.loc) - np.asarray(sb[s.name].loc)).sum() / s.scale)
        for s in plan_a.noise
        if s.name.startswith("variance_")
    }


@pytest.mark.parametrize("n, domain", [(3, 1), (4, 1), (3, 2), (4, 2)])
def test_exhaustive_privacy_loss_of_the_stratified_part_within_its_share(n, domain):
    """Every dataset of n records (W in {0,1}, Y in {0, 1/2, 1}, X in the domain) and every
    replace-one neighbour: the loss of each Laplace vector stays within its share of eps_2, and is
    attained (the calibration is tight, not just safe)."""
    eps = Fraction(1)
    eps_var = eps / 3  # the even split of SmoothDPMatching
    allowed = {
        name: to_float(eps_var * share, round_up=True)
        for name, share in zip(
            ("variance_counts", "variance_sums", "variance_squares"), SUBSPLIT, strict=True
        )
    }
    records = list(itertools.product((0, 1), (0.0, 0.5, 1.0), range(domain)))
    worst = dict.fromkeys(allowed, 0.0)
    plans = {}

    def plan_of(data):
        if data not in plans:
            w = np.array([r[0] for r in data], np.int64)
            y = np.array([r[1] for r in data])
            x = np.array([r[2] for r in data], np.int64)
            plans[data] = _plan(w, y, x, domain, "stratified", eps=eps)
        return plans[data]

    for data in itertools.combinations_with_replacement(records, n):
        for i, new in itertools.product(range(n), records):
            other = tuple(sorted((*data[:i], new, *data[i + 1 :])))
            loss = _vector_loss(plan_of(data), plan_of(other))
            for name, value in loss.items():
                assert value <= allowed[name] * (1 + 1e-12), (name, data, other)
                worst[name] = max(worst[name], value)
    for name in allowed:
        assert worst[name] == pytest.approx(allowed[name], rel=1e-9)


def test_stratified_variance_release_is_private_on_a_worst_case_pair():
    # five records per cell, so every stratum is used; a control Y = 0 of stratum 0 becomes a
    # treated Y = 1 of stratum 1: all three vectors move
    rng = np.random.default_rng(9)
    x = np.repeat(np.array([0, 0, 1, 1], np.int64), 5)
    w = np.tile(np.repeat(np.array([0, 1], np.int64), 5), 2)
    y = rng.uniform(0.3, 0.7, x.size).round(2)
    w2, y2, x2 = w.copy(), y.copy(), x.copy()
    y[0] = 0.0
    w2[0], y2[0], x2[0] = 1, 1.0, 1
    eps = Fraction(30)  # eps_2 = 15: the count noise scale is below the threshold of 2
    outs = []
    for i, (ww, yy, xx) in enumerate(((w, y, x), (w2, y2, x2))):
        plan = _plan(ww, yy, xx, 2, "stratified", eps=eps, estimator="global_matching")
        draws = draw_many(plan, np.random.default_rng(10 + i), REPS)
        outs.append(plan.assemble(draws).diagnostics["sampling_variance_dp"])
    eps_var = to_float(eps / 2, round_up=True)  # GlobalDPMatching: even split in two
    check = check_privacy(outs[0], outs[1], eps_var, 0.0, np.concatenate(outs)[::7])
    assert check.judged_bins >= 20
    assert check.ok, check.violations
    # not vacuous: the two outputs are distinguishable (the estimate moves with the record)
    assert check.max_ratio > 1.2


def test_stratified_release_is_close_to_the_truth_at_large_n():
    d = synth(400_000, 100, a=-0.5, b=0.2, seed=7)
    plan = _plan(d.w, d.y, d.x, 100, "stratified")
    stats = matching_statistics(d.w, d.y, d.x, 100)
    true = conditional_variance(stats.treated_counts, stats.control_counts, 0.01 / 12, 0.01 / 12)
    v = plan.assemble(draw_many(plan, np.random.default_rng(8), 400)).diagnostics[
        "sampling_variance_dp"
    ]
    assert np.mean(v) / true == pytest.approx(1.0, abs=0.1)


def test_stratified_cell_vectors_reach_the_estimate_in_outcome_units():
    # noised in grid units, multiplied by the grid unit after the draw (NoiseSpec.unit): at the
    # noise-free values and a budget that makes the noise corrections vanish, the released
    # estimate is the non-private one
    d = synth(2000, 5, a=0.3, b=0.1, seed=6)
    y = d.y * 2.5
    plan = _plan(d.w, y, d.x, 5, "stratified", eps=10**6, bound=2.5)
    cells = cell_statistics(d.w, y, d.x, domain_size=5, bound=2.5)
    specs = {s.name: s for s in plan.noise}
    assert specs["variance_counts"].unit == 1.0
    assert specs["variance_sums"].unit == cells.sum_unit
    assert specs["variance_squares"].unit == cells.square_unit
    exact = plan.assemble({s.name: s.value for s in plan.noise})
    want = stratified_variance(d.w, y, d.x, 5)
    assert float(exact.diagnostics["sampling_variance_dp"]) == pytest.approx(want, rel=1e-6)
