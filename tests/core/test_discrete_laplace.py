"""The exact discrete Laplace sampler (dpate_core.noise): its distribution against the
closed form, its bounds and refusals, and its secure word source."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpate_core.noise import (
    MAX_NUMERATOR,
    discrete_laplace_vector,
    fits,
    secure_words,
)


def _seeded(seed: int):
    rng = np.random.default_rng(seed)

    def words(count: int) -> np.ndarray:
        return rng.integers(0, 2**63 - 1, count, dtype=np.int64, endpoint=True)

    return words


def _pmf(z: np.ndarray, t: float) -> np.ndarray:
    q = math.exp(-1.0 / t)
    return (1.0 - q) / (1.0 + q) * q ** np.abs(z)


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(3, 2), Fraction(1, 3), Fraction(5), 0.7])
def test_draws_follow_the_discrete_laplace_probabilities(scale):
    n = 200_000
    z = discrete_laplace_vector(np.zeros(n, np.int64), scale, words=_seeded(1))
    t = float(scale)
    top = int(np.ceil(6 * t)) + 1  # bins -top..top, the tails pooled into the outer bins
    values = np.arange(-top, top + 1)
    expected = _pmf(values, t) * n
    tail = (1.0 - _pmf(values, t).sum()) / 2 * n
    expected[0] += tail
    expected[-1] += tail
    observed = np.bincount(np.clip(z, -top, top) + top, minlength=values.size)
    _, p = stats.chisquare(observed, expected)
    assert p > 1e-4, (scale, p)


def test_a_large_scale_has_the_laplace_moments_and_adds_to_the_values():
    t = 3 * 2.0**40  # a grid-unit scale of the adjusted estimator's sums
    loc = np.arange(50_000, dtype=np.int64) * 7
    z = discrete_laplace_vector(loc, t, words=_seeded(2)) - loc
    assert abs(z.mean()) < 4 * math.sqrt(2) * t / math.sqrt(z.size)
    assert z.var() == pytest.approx(2 * t * t, rel=0.05)
    assert np.median(np.abs(z)) == pytest.approx(t * math.log(2), rel=0.03)


def test_the_same_words_give_the_same_draws_and_the_secure_source_differs_each_call():
    loc = np.zeros(1000, np.int64)
    a = discrete_laplace_vector(loc, 2.5, words=_seeded(3))
    b = discrete_laplace_vector(loc, 2.5, words=_seeded(3))
    assert np.array_equal(a, b)
    w1, w2 = secure_words(4096), secure_words(4096)
    assert w1.dtype == np.int64 and (w1 >= 0).all() and not np.array_equal(w1, w2)
    assert w1.max() > 2**62  # 63 bits used
    s1 = discrete_laplace_vector(loc, 2.5)
    assert not np.array_equal(s1, discrete_laplace_vector(loc, 2.5))


def test_refusals_name_the_rule():
    with pytest.raises(ValueError, match="integer values"):
        discrete_laplace_vector(np.array([0.5]), 1.0)
    with pytest.raises(ValueError, match="integer values"):
        discrete_laplace_vector(np.array([np.nan]), 1.0)
    with pytest.raises(ValueError, match="1-d"):
        discrete_laplace_vector(np.zeros((2, 2), np.int64), 1.0)
    with pytest.raises(ValueError, match="2\\^53"):
        discrete_laplace_vector(np.array([2**53], np.int64), 1.0)
    with pytest.raises(ValueError, match="positive"):
        discrete_laplace_vector(np.zeros(3, np.int64), 0.0)
    big = float(MAX_NUMERATOR)
    assert not fits(big) and fits(big / 2) and fits(0.1) and not fits(float("inf"))
    with pytest.raises(ValueError, match="too large"):
        discrete_laplace_vector(np.zeros(3, np.int64), big)
    with pytest.raises(ValueError, match="word source"):
        discrete_laplace_vector(np.zeros(3, np.int64), 1.0, words=lambda n: np.zeros(5, np.int64))


def test_float_values_that_are_integers_are_taken_and_an_empty_vector_is_empty():
    got = discrete_laplace_vector(np.array([3.0, -2.0]), 1.0, words=_seeded(4))
    assert got.dtype == np.int64 and got.shape == (2,)
    assert discrete_laplace_vector(np.zeros(0, np.int64), 1.0).shape == (0,)


def test_secure_releases_draw_integer_statistics_through_the_exact_sampler(monkeypatch):
    """A secure release (``rng=None``) of the adjusted estimator and of the difference in means
    noises its counts and grid sums with the exact discrete sampler, on integer values; a
    simulated one (``rng`` given) never touches it."""
    import dpate_core.noise._discrete_laplace as dl
    from dpate_core.mechanisms.adjusted import dp_adjusted
    from dpate_core.mechanisms.difference_in_means import dp_difference_in_means

    calls: list[tuple[np.ndarray, float]] = []
    real = dl.discrete_laplace_vector

    def spy(loc, scale, words=dl.secure_words):
        calls.append((np.asarray(loc).copy(), float(scale)))
        return real(loc, scale, words)

    monkeypatch.setattr(dl, "discrete_laplace_vector", spy)
    rng = np.random.default_rng(5)
    w, x = rng.integers(0, 2, 400), rng.integers(0, 4, 400)
    y = rng.random(400) * 2.0
    est = dp_adjusted(w, y, x, domain_size=4, bound=2.0, epsilon=1)
    assert np.isfinite(est.tau) and len(calls) == 2  # the cells' two-end histogram, squares
    assert [c[0].shape for c in calls] == [(16,), (8,)]
    assert all(np.array_equal(c[0], np.rint(c[0])) for c in calls)
    calls.clear()
    dp_difference_in_means(w, y, bound=2.0, epsilon=1)
    assert len(calls) == 4 and all(c[0].shape == (1,) for c in calls)
    calls.clear()
    dp_adjusted(w, y, x, domain_size=4, bound=2.0, epsilon=1, rng=np.random.default_rng(0))
    assert calls == []


def test_a_long_float_scale_is_rounded_up_to_51_bits_never_down():
    from dpate_core.noise._discrete_laplace import _rational

    for scale in (10.000000000000002, 2 / 0.3, 0.7, 1e-3, 3 * 2.0**40, 2.0**50 * 1.5):
        num, den = _rational(scale)
        assert num < MAX_NUMERATOR and Fraction(num, den) >= Fraction(scale)
        assert Fraction(num, den) - Fraction(scale) <= Fraction(scale) / 2**49
