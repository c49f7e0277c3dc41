"""Noise samplers (dpate_core.noise): goodness of fit, no silent numpy fallback, and the analytic
Gaussian calibration (Balle and Wang 2018).

Goodness of fit is tested the Tumult way: a KS test of the samples against the target distribution
must accept, and against the same family with the scale times 0.7 or 1.3 must reject. The secure
(OpenDP) path cannot be seeded, so its thresholds are set for a false-alarm rate below 1e-5 per
test (acceptance at p > 1e-5; rejection at p < 1e-3, where the expected statistic is about five
standard deviations beyond the critical value at the sample sizes used).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import optimize, stats

from dpate_core.noise import _samplers as noise
from dpate_core.noise import analytic_gaussian_delta, analytic_gaussian_sigma, gaussian, laplace

SECURE_DRAWS = 6000  # OpenDP draws cost ~0.15 ms each
SIM_DRAWS = 20_000
ACCEPT_P = 1e-5
REJECT_P = 1e-3

SAMPLERS = {
    "laplace": (laplace, lambda loc, scale: stats.laplace(loc=loc, scale=scale)),
    "gaussian": (gaussian, lambda loc, scale: stats.norm(loc=loc, scale=scale)),
}


def _draws(kind: str, loc: float, scale: float, rng, size: int) -> np.ndarray:
    sampler = SAMPLERS[kind][0]
    return np.array([sampler(loc, scale, rng) for _ in range(size)])


def _check_fit(kind: str, x: np.ndarray, loc: float, scale: float) -> None:
    family = SAMPLERS[kind][1]
    p_true = stats.kstest(x, family(loc, scale).cdf).pvalue
    assert p_true > ACCEPT_P, f"{kind} samples do not fit the target (p={p_true:.2e})"
    for wrong in (0.7, 1.3):
        p_wrong = stats.kstest(x, family(loc, scale * wrong).cdf).pvalue
        assert p_wrong < REJECT_P, f"KS did not reject scale x{wrong} (p={p_wrong:.2e})"


# ---------------------------------------------------------------------------------------------
# goodness of fit


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "loc", "scale"), [("laplace", -1.5, 2.5), ("gaussian", 3.0, 0.4)])
def test_secure_sampler_fits_its_distribution(kind, loc, scale):
    x = _draws(kind, loc, scale, None, SECURE_DRAWS)
    assert np.unique(x).size > 0.99 * x.size  # a fine grid, not a handful of values
    _check_fit(kind, x, loc, scale)


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
@pytest.mark.parametrize(("loc", "scale"), [(0.0, 1.0), (10.0, 0.05), (-2.0, 300.0)])
def test_simulation_sampler_fits_its_distribution(kind, loc, scale):
    rng = np.random.default_rng(20260517)
    x = _draws(kind, loc, scale, rng, SIM_DRAWS)
    _check_fit(kind, x, loc, scale)


def test_simulation_path_is_reproducible_with_a_seed():
    a = [laplace(1.0, 2.0, np.random.default_rng(7)) for _ in range(3)]
    b = [gaussian(1.0, 2.0, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(a)) == 1 and len(set(b)) == 1


def test_secure_path_is_not_reproducible():
    assert len({laplace(0.0, 1.0) for _ in range(20)}) == 20
    assert len({gaussian(0.0, 1.0) for _ in range(20)}) == 20


# ---------------------------------------------------------------------------------------------
# the secure path never uses numpy's generators


_NUMPY_RANDOM_NAMES = [
    "default_rng",
    "laplace",
    "normal",
    "standard_normal",
    "random",
    "random_sample",
    "rand",
    "randn",
    "uniform",
    "exponential",
    "seed",
    "get_state",
    "RandomState",
    "Generator",
    "PCG64",
    "PCG64DXSM",
    "MT19937",
    "Philox",
    "SFC64",
    "SeedSequence",
]


def test_secure_path_leaves_numpy_global_state_untouched():
    np.random.seed(12345)  # noqa: NPY002 - the legacy global state is what is checked
    state = np.random.get_state()  # noqa: NPY002
    for _ in range(5):
        laplace(0.0, 1.0)
        gaussian(0.0, 1.0)
    after = np.random.get_state()  # noqa: NPY002
    assert state[0] == after[0]
    assert np.array_equal(state[1], after[1])
    assert state[2:] == after[2:]


def test_secure_path_never_calls_numpy_random(monkeypatch):
    from dpate_core.mechanisms.matching import smooth_dp_matching

    def forbidden(*args, **kwargs):
        raise AssertionError("numpy.random was used on the secure path")

    for name in _NUMPY_RANDOM_NAMES:
        monkeypatch.setattr(np.random, name, forbidden)
    assert math.isfinite(laplace(0.0, 1.0))
    assert math.isfinite(gaussian(0.0, 1.0))
    w = np.array([1, 0, 1, 0, 1, 0])
    y = np.array([1.0, 0.0, 0.5, 0.5, 1.0, 0.0])
    x = np.array([0, 0, 1, 1, 1, 0])
    est = smooth_dp_matching(w, y, x, bound=1.0, epsilon=1, delta="1e-5", domain_size=2)
    assert math.isfinite(est.tau) and math.isfinite(est.variance)


@pytest.mark.parametrize(
    "rng", [np.random.RandomState(0), random.Random(0), 42, "seed", np.random.PCG64(1)]
)
@pytest.mark.parametrize("sampler", [laplace, gaussian])
def test_anything_but_none_or_a_generator_is_refused(sampler, rng):
    with pytest.raises(TypeError, match=type(rng).__name__) as info:
        sampler(0.0, 1.0, rng)
    assert "numpy.random.Generator" in str(info.value)


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
@pytest.mark.parametrize("rng", [None, np.random.default_rng(0)])
def test_invalid_scale_is_refused(scale, rng):
    with pytest.raises(ValueError, match=r"noise scale \(.*\) must be positive and finite"):
        laplace(0.0, scale, rng)
    with pytest.raises(ValueError, match=r"noise scale"):
        gaussian(0.0, scale, rng)


# ---------------------------------------------------------------------------------------------
# the analytic Gaussian mechanism


def _delta_scipy(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Balle and Wang (2018), Theorem 8, computed independently with scipy (log-space tail)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(stats.norm.cdf(a - b) - math.exp(epsilon + stats.norm.logcdf(-a - b)))


def _classic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


GRID = [
    (sens, eps, delta)
    for sens in (1e-3, 1.0, 7.5)
    for eps in (0.01, 0.1, 0.5, 1.0, 5 / 3, 3.0, 10.0, 40.0)
    for delta in (1e-12, 1e-9, 1e-5 / 3, 1e-5, 1e-2)
]


@pytest.mark.parametrize(("sens", "eps", "delta"), GRID)
def test_analytic_sigma_is_the_smallest_valid_sigma(sens, eps, delta):
    sigma = analytic_gaussian_sigma(sens, eps, delta)
    # valid, by the module's formula and by an independent scipy computation
    assert analytic_gaussian_delta(sigma, sens, eps) <= delta
    assert _delta_scipy(sigma, sens, eps) <= delta * (1 + 1e-9)
    # and tight: one part in a million less noise is no longer (eps, delta)-DP
    smaller = sigma * (1 - 1e-6)
    assert analytic_gaussian_delta(smaller, sens, eps) > delta
    assert _delta_scipy(smaller, sens, eps) > delta


def test_balle_wang_reference_value():
    # Balle and Wang (2018): eps = 1, delta = 1e-5, sensitivity 1 -> sigma ~ 3.73 (classic: 4.84)
    sigma = analytic_gaussian_sigma(1.0, 1.0, 1e-5)
    assert sigma == pytest.approx(3.73, abs=5e-3)
    independent = optimize.brentq(lambda s: _delta_scipy(s, 1.0, 1.0) - 1e-5, 1.0, 10.0, xtol=1e-14)
    assert sigma == pytest.approx(independent, rel=1e-7)
    assert _classic_sigma(1.0, 1.0, 1e-5) == pytest.approx(4.84, abs=5e-3)


@pytest.mark.parametrize(
    ("eps", "delta"), [(5 / 3, 1e-5 / 3), (2.0, 1e-6), (5.0, 1e-5), (0.3, 1e-8)]
)
def test_analytic_sigma_matches_an_independent_root(eps, delta):
    sigma = analytic_gaussian_sigma(2.0, eps, delta)
    root = optimize.brentq(lambda s: _delta_scipy(s, 2.0, eps) - delta, 1e-3, 1e3, xtol=1e-14)
    assert sigma == pytest.approx(root, rel=1e-7)
    assert sigma >= root


@pytest.mark.parametrize(("eps", "delta"), [(10.0, 1e-5), (40.0, 1e-12), (20.0, 1e-3)])
def test_classic_formula_fails_for_large_epsilon_where_analytic_holds(eps, delta):
    # correction 4: sqrt(2 ln(1.25/delta)) / eps is not (eps, delta)-DP once eps >= 1
    classic = _classic_sigma(1.0, eps, delta)
    assert _delta_scipy(classic, 1.0, eps) > delta
    assert _delta_scipy(analytic_gaussian_sigma(1.0, eps, delta), 1.0, eps) <= delta


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (0.5, 1e-9), (0.9, 1e-3)])
def test_analytic_needs_no_more_noise_than_classic_where_classic_is_valid(eps, delta):
    assert analytic_gaussian_sigma(1.0, eps, delta) <= _classic_sigma(1.0, eps, delta)


def test_analytic_sigma_scales_with_sensitivity_and_decreases_in_eps_and_delta():
    base = analytic_gaussian_sigma(1.0, 1.0, 1e-5)
    assert analytic_gaussian_sigma(3.0, 1.0, 1e-5) == pytest.approx(3.0 * base, rel=1e-8)
    eps_grid = [analytic_gaussian_sigma(1.0, e, 1e-5) for e in (0.1, 0.5, 1, 2, 5, 10)]
    assert all(np.diff(eps_grid) < 0)
    delta_grid = [analytic_gaussian_sigma(1.0, 1.0, d) for d in (1e-12, 1e-8, 1e-5, 1e-2)]
    assert all(np.diff(delta_grid) < 0)


def test_analytic_delta_decreases_in_sigma():
    sig = np.geomspace(0.05, 50.0, 200)
    d = [analytic_gaussian_delta(s, 1.0, 1.0) for s in sig]
    assert all(np.diff(d) <= 0)
    assert d[0] > 0.5 and d[-1] < 1e-100


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        ((0.0, 1.0, 1e-5), r"sensitivity \(0.0\) must be positive"),
        ((math.inf, 1.0, 1e-5), r"sensitivity \(inf\) must be positive and finite"),
        ((1.0, 0.0, 1e-5), r"epsilon \(0.0\) must be positive"),
        ((1.0, -1.0, 1e-5), r"epsilon \(-1.0\) must be positive"),
        ((1.0, 1.0, 0.0), r"delta \(0.0\) must lie strictly between 0 and 1"),
        ((1.0, 1.0, 1.0), r"delta \(1.0\) must lie strictly between 0 and 1"),
    ],
)
def test_analytic_sigma_rejects_invalid_parameters(args, pattern):
    with pytest.raises(ValueError, match=pattern):
        analytic_gaussian_sigma(*args)


def test_module_has_no_hidden_generator():
    # nothing at module level that a release could fall back to
    assert not any(isinstance(v, np.random.Generator) for v in vars(noise).values())


# ---------------------------------------------------------------------------------------------
# the value to be noised must be finite (and the message never carries it)


@pytest.mark.parametrize("loc", [math.nan, math.inf, -math.inf, np.float64(np.nan)])
@pytest.mark.parametrize("rng", [None, np.random.default_rng(0)])
@pytest.mark.parametrize("sampler", [laplace, gaussian])
def test_non_finite_value_is_refused_on_both_paths(sampler, rng, loc):
    with pytest.raises(ValueError, match="the value to be noised must be finite") as info:
        sampler(loc, 1.0, rng)
    assert str(info.value) == noise._NON_FINITE  # the rule only, no value


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("rng", [None, np.random.default_rng(0)])
def test_laplace_vector_refuses_any_non_finite_entry(rng, bad):
    with pytest.raises(ValueError, match="the value to be noised must be finite"):
        noise.laplace_vector(np.array([0.25, bad, 1.0]), 1.0, rng)
    with pytest.raises(ValueError, match="1-d"):
        noise.laplace_vector(np.zeros((2, 2)), 1.0, rng)
    with pytest.raises(ValueError, match="noise scale"):
        noise.laplace_vector(np.zeros(3), 0.0, rng)


# ---------------------------------------------------------------------------------------------
# the vector Laplace sampler: one OpenDP measurement, independent Lap(scale) per entry


@pytest.mark.slow
def test_secure_laplace_vector_fits_its_distribution():
    loc = np.linspace(-5.0, 5.0, SECURE_DRAWS)
    x = noise.laplace_vector(loc, 2.5)  # one call, SECURE_DRAWS entries
    assert x.shape == loc.shape
    assert np.unique(x - loc).size > 0.99 * x.size
    _check_fit("laplace", x - loc, 0.0, 2.5)


def test_secure_laplace_vector_is_one_measurement(monkeypatch):
    dp, _ = noise._opendp()
    calls = []
    real = dp.m.make_laplace

    def counting(*args, **kwargs):
        calls.append(kwargs.get("scale"))
        return real(*args, **kwargs)

    monkeypatch.setattr(dp.m, "make_laplace", counting)
    out = noise.laplace_vector(np.zeros(500), 1.0)
    assert out.shape == (500,) and len(calls) == 1
    assert np.unique(out).size == 500


def test_simulated_laplace_vector_fits_and_is_reproducible():
    loc = np.full(SIM_DRAWS, 3.0)
    x = noise.laplace_vector(loc, 0.4, np.random.default_rng(5))
    _check_fit("laplace", x, 3.0, 0.4)
    again = noise.laplace_vector(loc, 0.4, np.random.default_rng(5))
    assert np.array_equal(x, again)
    assert noise.laplace_vector(np.zeros(0), 1.0).shape == (0,)
