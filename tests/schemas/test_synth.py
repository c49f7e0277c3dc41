"""The paper's Synth generator and the seeded site splitters."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpate_core.synth import (
    PAPER_PROPORTIONS,
    parse_proportions,
    split_by_labels,
    split_equal,
    split_proportions,
    split_sizes,
    synth,
)


def test_synth_follows_the_paper():
    s = synth(200_000, 11, a=1.5, b=0.3, seed=1)
    assert s.x.dtype == np.int64 and s.w.dtype == np.int8
    assert s.x.min() == 0 and s.x.max() == 10
    # X uniform on {0, 1/10, ..., 1}
    assert stats.chisquare(np.bincount(s.x, minlength=11)).pvalue > 1e-4
    # W ~ Bernoulli(sigmoid(a (2X - 1))) per stratum
    for k in (0, 5, 10):
        xv = k / 10
        p = 1 / (1 + np.exp(-1.5 * (2 * xv - 1)))
        got = s.w[s.x == k].mean()
        assert got == pytest.approx(p, abs=4 * np.sqrt(p * (1 - p) / (s.x == k).sum()))
    # Y = b X + 0.5 W + e, e ~ U[0, 0.1]
    e = s.y - 0.3 * s.x_values - 0.5 * s.w
    assert e.min() >= 0 and e.max() <= 0.1
    assert stats.kstest(e, stats.uniform(0, 0.1).cdf).pvalue > 1e-4
    assert s.y.min() >= 0 and s.y.max() <= 1 and s.tau == 0.5


def test_synth_draws_a_and_b_when_not_given_and_is_seeded():
    one, two = synth(1000, 100, seed=7), synth(1000, 100, seed=7)
    np.testing.assert_array_equal(one.y, two.y)
    assert one.a == two.a and -1 <= one.a <= 1 and 0 <= one.b <= 0.4
    other = synth(1000, 100, seed=8)
    assert other.a != one.a and not np.array_equal(other.y, one.y)
    a_vals = [synth(1, 2, seed=s).a for s in range(400)]
    assert stats.kstest(a_vals, stats.uniform(-1, 2).cdf).pvalue > 1e-4


def test_synth_imbalance_grows_with_a():
    s = synth(100_000, 100, a=8.0, b=0.2, seed=2)
    assert s.w[s.x < 10].mean() < 0.01 and s.w[s.x > 89].mean() > 0.99


@pytest.mark.parametrize(("n", "bad"), [(0, 10), (10, 1)])
def test_synth_rejects_bad_arguments(n, bad):
    with pytest.raises(ValueError):
        synth(n, bad)


@pytest.mark.parametrize("name", list(PAPER_PROPORTIONS))
def test_paper_proportions(name):
    props = PAPER_PROPORTIONS[name]
    n = 12_000  # divisible by 3, 6 and 20
    parts = split_proportions(n, name, seed=5)
    sizes = [p.size for p in parts]
    assert sum(sizes) == n
    assert sizes == [n * p // sum(props) for p in props]  # divisible: exact
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(n))  # a partition
    assert all(np.all(np.diff(p) > 0) for p in parts)  # record order kept
    again = split_proportions(n, props, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = split_proportions(n, props, seed=6)
    assert not np.array_equal(parts[0], other[0])


def test_split_sizes_largest_remainder():
    assert split_sizes(19_408, (18, 1, 1)) == (17_467, 971, 970)
    assert sum(split_sizes(10_329, (9, 9, 2))) == 10_329
    assert split_sizes(7, (1, 1, 1)) == (3, 2, 2)
    with pytest.raises(ValueError):
        split_sizes(2, (1, 1, 1))
    with pytest.raises(ValueError):
        split_sizes(10, (1, 0))


def test_split_equal():
    parts = split_equal(747, 2, seed=0)
    assert [p.size for p in parts] == [374, 373]
    with pytest.raises(ValueError):
        split_equal(10, 0, seed=0)


def test_split_by_labels():
    labels = np.array(["b", "a", "b", "c", "b", "a"])
    idx, names = split_by_labels(labels)
    assert names == ["b", "a", "c"]
    assert [i.tolist() for i in idx] == [[0, 2, 4], [1, 5], [3]]
    idx, names = split_by_labels(labels, order=["c", "b", "a"])
    assert names == ["c", "b", "a"] and idx[0].tolist() == [3]
    with pytest.raises(ValueError):
        split_by_labels(labels, order=["a", "b"])


def test_parse_proportions():
    assert parse_proportions("18:1:1") == (18, 1, 1)
    for bad in ("1:x", "1:0", "-1:2"):
        with pytest.raises(ValueError):
            parse_proportions(bad)
