"""beta-smoothness of the smooth sensitivities: ``S(D) <= e^beta S(D')`` for every pair of neighbours.

Both bounds depend on the data only through the stratum counts ``(|T_x|, |C_x|)``; one replacement
moves one record from one (stratum, arm) cell to another, possibly into a stratum of the domain the
data leave empty or out of the last record of a stratum. That is the neighbour relation checked
here, in both directions, for the ATE bound and the variance bound:

- the two witnesses of correction 1, which the paper's printed ``R_x^(k)`` fails (so the
  checker can fail);
- every pair of count vectors in small spaces (``|X| = 1`` up to ``N = 60``, ``|X| = 2`` up to 12,
  ``|X| = 3`` up to 6);
- adversarial configurations (a stratum with one record in its smaller arm, an empty arm, a lone
  record, all records in one stratum) up to ``N = 10^5`` with every move between their cells;
- random pairs from hypothesis up to ``N = 10^5``;

with ``domain_size=None`` (a neighbour can always bring a new covariate value), with
``domain_size`` equal to the number of strata present, and with a larger domain.

Tolerance: the bounds are computed in floating point; ``S(D) / S(D')`` may exceed ``e^beta`` by
float rounding only (relative ``1e-12``; both values carry the same round-up factor, so it cancels).
The corrected bound is tight: on the second witness ``ln S(D)/S(D')`` equals ``beta`` to 1e-16.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dpate_core.mechanisms.matching import (
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)
from tests.core import reference as ref
from tests.examples import examples

B = 1.0
REL = 1e-12
BETAS = (0.001, 0.0125, 0.05, 0.3, 1.0, 3.0)
BOUNDS = {"ate": matching_smooth_sensitivity, "variance": matching_variance_smooth_sensitivity}


def _move(t, c, src: tuple[int, int], dst: tuple[int, int]):
    """Counts after moving one record from cell ``src = (stratum, arm)`` to ``dst`` (arm 1 is
    treated); the vectors are extended with empty strata as needed."""
    size = max(len(t), src[0] + 1, dst[0] + 1)
    t2 = np.zeros(size, np.int64)
    c2 = np.zeros(size, np.int64)
    t2[: len(t)] = t
    c2[: len(c)] = c
    for (stratum, arm), step in ((src, -1), (dst, +1)):
        (t2 if arm else c2)[stratum] += step
    assert t2.min() >= 0 and c2.min() >= 0, "moved a record out of an empty cell"
    return t2, c2


def _ratio(fn, t, c, t2, c2, beta, domain_size):
    n = int(np.sum(t) + np.sum(c))
    s = fn(t, c, n, B, beta, domain_size=domain_size)
    s2 = fn(t2, c2, n, B, beta, domain_size=domain_size)
    assert s > 0 and s2 > 0
    return max(s / s2, s2 / s)


def _assert_smooth(fn, t, c, t2, c2, beta, domain_size):
    ratio = _ratio(fn, t, c, t2, c2, beta, domain_size)
    assert ratio <= math.exp(beta) * (1 + REL), (
        f"{fn.__name__} not beta-smooth: counts T={list(t)} C={list(c)} vs T={list(t2)} "
        f"C={list(c2)}, beta={beta}, domain_size={domain_size}: ln ratio {math.log(ratio)!r}"
    )


def _paper(t, c, n, bound, beta, domain_size=None):
    return ref.paper_smooth_sensitivity(t, c, n, bound, beta, domain_size)


_paper.__name__ = "paper_smooth_sensitivity"


# ---------------------------------------------------------------------------------------------
# The witnesses of correction 1


def test_first_witness_smallest_case():
    """``|X| = 1, N = 2, beta = 0.05``: counts (T, C) = (2, 0) vs (1, 1). The paper's bound
    jumps by ``1.189 e^beta``; the corrected one is smooth (both bounds, all domain modes)."""
    t, c, t2, c2 = [2], [0], [1], [1]
    paper = _ratio(_paper, t, c, t2, c2, 0.05, 1)
    assert paper / math.exp(0.05) == pytest.approx(1.189, abs=1e-3)
    with pytest.raises(AssertionError, match="not beta-smooth"):
        _assert_smooth(_paper, t, c, t2, c2, 0.05, 1)
    for fn in BOUNDS.values():
        for domain_size in (None, 1, 2):
            _assert_smooth(fn, t, c, t2, c2, 0.05, domain_size)


def _second_witness():
    """``N = 5000``, ``|X| = 100``: stratum 0 holds (67 treated, 1 control), the other 99 strata
    share the remaining 4932 records evenly between arms; the neighbour moves one treated record
    of stratum 0 to the control arm of stratum 1, leaving (66, 1)."""
    rest = 5000 - 68
    per_cell = np.full(198, rest // 198)
    per_cell[: rest % 198] += 1
    t = np.concatenate(([67], per_cell[0::2]))
    c = np.concatenate(([1], per_cell[1::2]))
    t2, c2 = _move(t, c, (0, 1), (1, 0))
    assert t.sum() + c.sum() == 5000 and len(t) == 100 and (t2[0], c2[0]) == (66, 1)
    return t, c, t2, c2


def test_second_witness_at_realistic_size():
    """eps = 1/3, delta = 1e-5/3 (beta = 0.0125): the paper's bound moves by ``ln 0.0146 >
    beta``; the corrected bounds move by at most ``beta`` (for the ATE exactly ``beta``: tight)."""
    beta = smooth_beta(1 / 3, 1e-5 / 3)
    assert beta == pytest.approx(0.0125269, abs=1e-7)
    t, c, t2, c2 = _second_witness()
    paper = math.log(_ratio(_paper, t, c, t2, c2, beta, 100))
    assert paper == pytest.approx(0.0146, abs=1e-4)
    assert paper > beta
    with pytest.raises(AssertionError, match="not beta-smooth"):
        _assert_smooth(_paper, t, c, t2, c2, beta, 100)
    for fn in BOUNDS.values():
        for domain_size in (None, 100, 150):
            _assert_smooth(fn, t, c, t2, c2, beta, domain_size)
    tight = math.log(_ratio(matching_smooth_sensitivity, t, c, t2, c2, beta, 100))
    assert tight == pytest.approx(beta, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Every pair in small count spaces


def _all_pairs_smooth(fn, n_strata: int, n: int, beta: float) -> list:
    """Every count vector of ``n`` records over ``n_strata`` strata and every neighbour (any cell
    to any other cell of the domain): the pairs that break smoothness."""
    vectors = ref.count_vectors(n, 2 * n_strata)
    values = np.array(
        [fn(v[1::2], v[0::2], n, B, beta, domain_size=n_strata) for v in vectors], dtype=float
    )
    bad = []
    for i, nbrs in enumerate(ref.count_space_neighbours(vectors)):
        worst = values[i] / values[nbrs].min()
        if worst > math.exp(beta) * (1 + REL):
            bad.append((vectors[i].tolist(), math.log(worst)))
    return bad


@pytest.mark.parametrize("statistic", list(BOUNDS))
@pytest.mark.parametrize(("n_strata", "n_max"), [(1, 60), (2, 12), (3, 6)])
def test_every_pair_in_small_count_spaces(statistic, n_strata, n_max):
    """No pair of neighbouring count vectors breaks smoothness (``domain_size = |X|``)."""
    fn = BOUNDS[statistic]
    for n in range(2, n_max + 1):
        for beta in (0.05, 0.3, 1.0):
            assert _all_pairs_smooth(fn, n_strata, n, beta) == [], (n, beta)


def test_the_all_pairs_checker_fails_the_paper():
    """The same exhaustive check finds violations of the paper's printed bound."""
    bad = _all_pairs_smooth(_paper, 1, 2, 0.05)
    assert any(v == [0, 2] or v == [2, 0] for v, _ in bad)
    assert _all_pairs_smooth(_paper, 2, 6, 0.05)


# ---------------------------------------------------------------------------------------------
# Adversarial configurations up to N = 10^5, every move between their cells

ADVERSARIAL = [
    # (treated counts, control counts): a lone minority record, an empty arm, balanced filler
    ([67, 30, 30], [1, 30, 30]),
    ([99_990, 5], [1, 4]),
    ([50_000], [50_000]),
    ([99_999], [1]),
    ([100_000, 0], [0, 0]),
    ([3, 0, 1], [0, 7, 0]),
    ([1000, 1, 0, 40_000], [2, 5000, 0, 40_000]),
    ([20_000, 20_000, 1], [19_999, 1, 0]),
    ([7, 7, 7, 7, 9000], [1, 2, 3, 4, 0]),
    ([1] * 8, [0] * 8),
]


@pytest.mark.parametrize("statistic", list(BOUNDS))
@pytest.mark.parametrize("counts", ADVERSARIAL, ids=lambda v: f"N{sum(v[0]) + sum(v[1])}")
def test_adversarial_configurations_every_move(statistic, counts):
    """Every move between the cells of the configuration and one empty stratum, in every domain
    mode (``None``, the strata present, a larger domain), at several betas."""
    fn = BOUNDS[statistic]
    t = np.array(counts[0])
    c = np.array(counts[1])
    k = len(t)
    present = int(((t + c) > 0).sum())
    cells = [(s, arm) for s in range(k + 1) for arm in (0, 1)]
    for src, dst in itertools.product(cells, cells):
        if src == dst or src[0] == k or (t if src[1] else c)[src[0]] == 0:
            continue  # the source cell must hold a record
        t2, c2 = _move(t, c, src, dst)
        tp = np.append(t, 0)
        cp = np.append(c, 0)
        modes = [None, k + 3]
        if dst[0] < k and present == k:
            modes.append(k)  # the domain is the strata present: no move into a new stratum
        for beta in (0.001, 0.0125, 0.3, 3.0):
            for domain_size in modes:
                _assert_smooth(fn, tp, cp, t2, c2, beta, domain_size)


# ---------------------------------------------------------------------------------------------
# Random pairs (hypothesis)


@st.composite
def _stratum(draw):
    kind = draw(st.sampled_from(["tiny", "skewed", "empty_arm", "balanced", "large"]))
    if kind == "tiny":
        return draw(st.integers(0, 3)), draw(st.integers(0, 3))
    if kind == "skewed":
        big, small = draw(st.integers(1, 30_000)), draw(st.integers(1, 3))
    elif kind == "empty_arm":
        big, small = draw(st.integers(1, 30_000)), 0
    elif kind == "balanced":
        big = draw(st.integers(1, 5000))
        small = max(0, big - draw(st.integers(0, 2)))
    else:
        big, small = draw(st.integers(1, 60_000)), draw(st.integers(0, 60_000))
    return (big, small) if draw(st.booleans()) else (small, big)


@st.composite
def _neighbour_pair(draw):
    strata = draw(st.lists(_stratum(), min_size=1, max_size=25))
    t = np.array([a for a, _ in strata], np.int64)
    c = np.array([b for _, b in strata], np.int64)
    n = int(t.sum() + c.sum())
    assume(2 <= n <= 100_000)
    mode = draw(st.sampled_from(["none", "present", "larger"]))
    if mode == "present":  # the domain is exactly the strata present: drop the empty ones
        keep = (t + c) > 0
        t, c = t[keep], c[keep]
    k = len(t)
    full = [(s, arm) for s in range(k) for arm in (0, 1) if (t if arm else c)[s] > 0]
    src = draw(st.sampled_from(full))
    targets = k if mode == "present" else k + 1  # k: a stratum absent from D
    dst = draw(st.tuples(st.integers(0, targets - 1), st.integers(0, 1)).filter(lambda d: d != src))
    t2, c2 = _move(t, c, src, dst)
    t = np.append(t, 0)[: len(t2)]
    c = np.append(c, 0)[: len(c2)]
    domain_size = {"none": None, "present": k, "larger": len(t2) + draw(st.integers(0, 5))}[mode]
    beta = draw(st.sampled_from(BETAS) | st.floats(0.0005, 5.0))
    return t, c, t2, c2, beta, domain_size


@pytest.mark.slow
@settings(max_examples=examples(1500))
@given(_neighbour_pair())
def test_random_neighbouring_count_vectors_ate(pair):
    _assert_smooth(matching_smooth_sensitivity, *pair)


@pytest.mark.slow
@settings(max_examples=examples(1500))
@given(_neighbour_pair())
def test_random_neighbouring_count_vectors_variance(pair):
    _assert_smooth(matching_variance_smooth_sensitivity, *pair)


@given(_neighbour_pair())
def test_generated_pairs_are_neighbours(pair):
    """The strategy's pairs are one replacement apart and inside the stated domain."""
    t, c, t2, c2, _, domain_size = pair
    assert t.sum() + c.sum() == t2.sum() + c2.sum()
    assert np.abs(t - t2).sum() + np.abs(c - c2).sum() == 2
    if domain_size is not None:
        assert domain_size >= max(((t + c) > 0).sum(), ((t2 + c2) > 0).sum())
