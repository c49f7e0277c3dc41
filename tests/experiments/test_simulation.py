"""The vectorised combiners compute, row by row, what dpate_core.aggregation computes; the
simulated releases are the released mechanism; the privacy sweep is exact and never rounds up."""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest

from dpate_core import aggregation
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import draw_many
from dpate_core.simulation import (
    COMBINERS_MANY,
    aggregate_many,
    rational_power_floor,
    simulate_site,
    simulate_sites,
    site_epsilons,
)
from dpate_core.statistics import matching_statistics

SCALAR = {
    "mvagg": aggregation.mvagg,
    "all": aggregation.agg_all,
    "largest": aggregation.agg_largest,
    "inverse_variance": aggregation.inverse_variance,
    "random_effects": aggregation.random_effects,
}


def _random_rows(rng, reps, n_sites, *, ties=False, bad=False):
    tau = rng.normal(0.3, 0.5, (reps, n_sites))
    var = np.exp(rng.normal(-6, 3, (reps, n_sites)))
    n = rng.integers(2, 5000, n_sites).astype(float)
    if ties:  # equal sizes and equal N_j var_j keys
        n[:] = 100.0
        var[:, 1:] = var[:, :1]
    if bad:
        mask = rng.random((reps, n_sites)) < 0.2
        var[mask] = rng.choice([0.0, -1.0, np.nan, np.inf], mask.sum())
        tmask = rng.random((reps, n_sites)) < 0.05
        tau[tmask] = np.nan
    return tau, n, var


@pytest.mark.parametrize("method", sorted(COMBINERS_MANY))
@pytest.mark.parametrize("n_sites", [1, 2, 3, 4, 7, 12])
@pytest.mark.parametrize("case", ["plain", "ties", "bad"])
def test_vectorised_combiners_match_the_scalar_ones(method, n_sites, case):
    rng = np.random.default_rng(zlib.crc32(f"{method}-{n_sites}-{case}".encode()))
    tau, n, var = _random_rows(rng, 300, n_sites, ties=case == "ties", bad=case == "bad")
    many = aggregate_many(method, tau, n, var)
    assert many.method == SCALAR[method](np.zeros(1), n[:1], np.ones(1)).method
    for r in range(tau.shape[0]):
        try:
            one = SCALAR[method](tau[r], n, var[r])
        except aggregation.NoUsableSiteError:
            assert np.isnan(many.estimate[r]) and np.isnan(many.variance[r])
            assert not many.used[r].any()
            continue
        assert tuple(np.flatnonzero(many.used[r])) == one.used
        # the same formulas; only the order of floating-point sums may differ (dot vs sum)
        np.testing.assert_allclose(many.weights[r][list(one.used)], one.weights, rtol=1e-9)
        np.testing.assert_allclose(many.estimate[r], one.estimate, rtol=1e-9, atol=1e-12)
        if n_sites > 1 or method != "random_effects":
            np.testing.assert_allclose(many.variance[r], one.variance, rtol=1e-9)


def test_mvagg_many_is_the_brute_force_minimum():
    rng = np.random.default_rng(7)
    tau, n, var = _random_rows(rng, 200, 6)
    many = aggregate_many("mvagg", tau, n, var)
    for r in range(tau.shape[0]):
        brute = aggregation.mvagg_brute_force(tau[r], n, var[r])
        np.testing.assert_allclose(many.variance[r], brute.variance, rtol=1e-12)


def test_unknown_aggregator_names_the_choices():
    with pytest.raises(ValueError, match="mvagg"):
        aggregate_many("median", np.zeros((1, 2)), [1, 1], np.ones((1, 2)))


def test_simulated_release_is_the_released_mechanism():
    """simulate_site assembles draw_many through the plan: the same numbers as plan.estimate on
    each repetition's noisy values."""
    rng = np.random.default_rng(3)
    n = 20000
    x = rng.integers(0, 10, n)
    w = (rng.random(n) < 0.4).astype(np.int8)
    y = np.clip(0.1 * x / 9 + 0.5 * w + 0.1 * rng.random(n), 0, 1)
    stats = matching_statistics(w, y, x, 10, bound=1.0)
    plans = [
        plan_matching("smooth_matching", stats, bound=1.0, epsilon=1, delta="1e-5", domain_size=10),
        plan_matching("global_matching", stats, bound=1.0, epsilon=1, delta="1e-5", domain_size=10),
        plan_difference_in_means(w, y, bound=1.0, epsilon="1/2"),
    ]
    for plan in plans:
        sim = simulate_site(plan, np.random.default_rng(11), 5)
        noisy = draw_many(plan, np.random.default_rng(11), 5)
        for r in range(5):
            est = plan.estimate({k: float(v[r]) for k, v in noisy.items()})
            assert sim.tau[r] == pytest.approx(est.tau, rel=1e-14)
            assert sim.variance[r] == pytest.approx(est.variance, rel=1e-14)
    tau, ns, var = simulate_sites(plans, np.random.default_rng(1), 50)
    assert tau.shape == var.shape == (50, 3) and ns.tolist() == [n, n, n]
    # the smooth mechanism's noise is far below the global one on balanced data
    assert np.abs(tau[:, 0] - stats.tau).mean() < np.abs(tau[:, 1] - stats.tau).mean() / 5


def test_simulation_refuses_a_missing_generator():
    stats = matching_statistics(
        np.array([0, 1, 0, 1]), np.array([0.1, 0.2, 0.3, 0.4]), np.zeros(4, int), bound=1.0
    )
    plan = plan_matching("global_matching", stats, bound=1.0, epsilon=1, delta="1e-5")
    with pytest.raises(TypeError, match="Generator"):
        simulate_site(plan, None, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reps"):
        simulate_site(plan, np.random.default_rng(0), 0)


@pytest.mark.parametrize(
    ("alpha", "n_sites", "expected"),
    [
        ("2", 2, ["1", "2"]),
        ("1/8", 2, ["1", "1/8"]),
        ("4", 3, ["1", "2", "4"]),
        ("1/4", 3, ["1", "1/2", "1/4"]),
        ("8", 4, ["1", "2", "4", "8"]),
        ("2", 3, ["1", "141421/100000", "2"]),  # sqrt(2) = 1.41421356... rounded down
        ("1/2", 3, ["1", "353553/500000", "1/2"]),  # sqrt(1/2) = 0.70710678...
        ("1/4", 4, ["1", "15749/25000", "7937/20000", "1/4"]),
    ],
)
def test_site_epsilons_exact_or_rounded_down(alpha, n_sites, expected):
    assert [str(e) for e in site_epsilons(1, alpha, n_sites)] == expected


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("q", [2, 3, 5])
@pytest.mark.parametrize("base", ["1/8", "1/3", "2", "7", "10", "123456789/1000"])
def test_rational_power_floor_never_rounds_up(base, p, q):
    b = Fraction(base)
    r = rational_power_floor(b, p, q)
    assert r**q <= b**p
    # and it is the floor at 6 significant digits: one more unit in the last digit is too much
    if r**q != b**p:
        digits = len(str(int(r))) if r >= 1 else None
        unit = Fraction(10) ** ((digits - 6) if digits else (-6 - _leading_zeros(r)))
        assert (r + unit) ** q > b**p


def _leading_zeros(r: Fraction) -> int:
    k = 0
    while r * 10 ** (k + 1) < 1:
        k += 1
    return k


def test_site_epsilons_rejects_nonsense():
    with pytest.raises(ValueError, match="alpha"):
        site_epsilons(1, 0, 3)
    assert site_epsilons("5", 2, 1) == (Fraction(5),)


def test_random_effects_many_reports_the_scalar_extra_statistics():
    """The vectorised implementation is the only one: its per-row Q, I^2 and tau^2 are the scalar
    call's (the scalar call is its one-row case)."""
    rng = np.random.default_rng(11)
    tau, n, var = _random_rows(rng, 100, 5)
    many = aggregate_many("random_effects", tau, n, var)
    assert set(many.extra) == {"Q", "I2", "tau2"}
    for r in range(tau.shape[0]):
        one = aggregation.random_effects(tau[r], n, var[r])
        for k, v in one.extra.items():
            np.testing.assert_allclose(many.extra[k][r], v, rtol=1e-9, atol=1e-12)
