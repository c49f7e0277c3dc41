"""Exhaustive proofs-by-test that the sensitivities in :mod:`dpate_core.mechanisms.matching` are upper bounds.

Part 1, every ordered dataset. The domain of one record is ``W in {0, 1}``, ``Y in {0, B/2, B}``
(``B = 1``), ``X in range(|X|)``: ``d = 6 |X|`` values. For ``|X| in {1, 2}`` and every ``N`` from
2 to 6 (``N = 1`` is refused by the core: ``tau_hat`` is then always 0) all ``d^N`` ordered datasets
are enumerated: ``6^2 + .. + 6^6 = 55,980`` with one stratum and ``12^2 + .. + 12^6 = 3,257,424``
with two (2,985,984 of them at ``N = 6``); beyond the issue's range, ``|X| = 3`` up to ``N = 5``
(``18^2 + .. + 18^5 = 2,000,340``). For each, ``tau_hat`` and ``V_hat`` come from
:func:`reference.batch_matching` (checked here against the literal loop and the core); the *true*
local sensitivity is the maximum over all ``N (d - 1)`` replace-one neighbours (any ``(W, Y, X)`` of
the domain), and the *true* beta-smooth sensitivity is ``max_k e^(-k beta) max_{ball_k} LS``, with
the ball maxima computed exactly over all datasets of the same ``N`` (``k <= N`` reaches them all).
Both must stay under the core's bounds (Theorem 1, the corrected eq. (smooth-sens) with
``domain_size = |X|``, and the variance bounds), for ``beta`` in 0.05, 0.3, 1. About 25 s of CPU.

Part 2, every count vector. The core's smooth bounds are *defined* as ball maxima of a
local-sensitivity bound that depends on the counts only (corrections 1, 3 and 9). Over every
count vector of ``|X| <= 3`` strata and small ``N``, a breadth-first search computes those ball
maxima exactly; the ATE bound must equal it, capped at the global sensitivity ``2B`` (not merely
exceed it: a smaller value is a privacy bug, a larger one a utility bug), and the variance bound
must equal the sum of the ball maxima of its two terms. The same search shows the paper's printed
``R_x^(k)`` is not a ball maximum.

Part 3, the variance bound's monotone terms ``g`` and ``h`` dominate the appendix's per-stratum
expressions (correction 3 reading) on a grid and on random large counts.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpate_core.mechanisms.matching import (
    matching_local_sensitivity_bound,
    matching_smooth_sensitivity,
    matching_variance_local_sensitivity_bound,
    matching_variance_smooth_sensitivity,
)
from dpate_core.statistics import exact_matching, matching_variance
from tests.core import reference as ref

B = 1.0
BETAS = (0.05, 0.3, 1.0)
SIZES = [(n_strata, n) for n_strata in (1, 2) for n in range(2, 7)] + [(3, n) for n in range(2, 6)]
REL = 1e-12  # float slack on the truth side; the core rounds its bounds up by 2^-36


@functools.lru_cache(maxsize=1)
def _universe(n_strata: int, n: int):
    tau, var, cells = ref.enumerate_datasets(n, n_strata)
    # each count vector as one integer (its counts are digits in base n + 1): a 1-d unique is
    # several times faster than np.unique(cells, axis=0) on millions of rows
    radix = (n + 1) ** np.arange(cells.shape[1] - 1, -1, -1, dtype=np.int64)
    codes, inverse = np.unique(cells.astype(np.int64) @ radix, return_inverse=True)
    keys = codes[:, None] // radix % (n + 1)
    return tau, var, keys, inverse.ravel()


def _per_key(fn, keys: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """``fn(treated_counts, control_counts)`` for each distinct count vector, spread to datasets."""
    return np.array([fn(k[1::2], k[0::2]) for k in keys])[inverse]


def _worst_violation(truth: np.ndarray, bound: np.ndarray) -> int | None:
    """C-order index of the dataset whose truth exceeds its bound the most, or ``None``."""
    excess = truth.ravel() - bound * (1.0 + REL)
    worst = int(np.argmax(excess))
    return worst if excess[worst] > 0 else None


def _describe(index: int, n: int, n_strata: int, truth, bound) -> str:
    w, y, x = ref.decode_dataset(index, n, n_strata)
    return f"dataset w={w} y={y} x={x}: true {truth.ravel()[index]!r} > bound {bound[index]!r}"


# ---------------------------------------------------------------------------------------------
# Part 1: every ordered dataset


def test_enumeration_agrees_with_the_literal_loop_and_the_core():
    """The batch estimator used for enumeration is Algorithm 1: it agrees with the literal loop
    and with :func:`exact_matching` / :func:`matching_variance` on a sample of every universe."""
    rng = np.random.default_rng(7)
    for n_strata, n in [(1, 6), (2, 5)]:
        tau, var, _, _ = _universe(n_strata, n)
        for index in rng.choice(tau.size, 300, replace=False):
            w, y, x = ref.decode_dataset(int(index), n, n_strata)
            lit_tau, _, lit_var = ref.literal_matching(w, y, x)
            assert tau.ravel()[index] == pytest.approx(lit_tau, abs=1e-12)
            assert var.ravel()[index] == pytest.approx(lit_var, abs=1e-12)
            assert exact_matching(np.array(w), np.array(y), np.array(x)).tau == pytest.approx(
                lit_tau, abs=1e-12
            )
            assert matching_variance(np.array(w), np.array(y), np.array(x)) == pytest.approx(
                lit_var, abs=1e-12
            )


def test_local_sensitivity_over_axes_is_the_brute_force_over_neighbours():
    """The vectorised ``LS`` (max along each record's axis) equals a literal loop over every
    replace-one neighbour, on random datasets and on the datasets of largest ``LS``."""
    rng = np.random.default_rng(11)
    n_strata, n = 2, 4
    tau, var, _, _ = _universe(n_strata, n)
    ls_tau = ref.local_sensitivity_over_axes(tau).ravel()
    ls_var = ref.local_sensitivity_over_axes(var).ravel()
    picks = [*rng.choice(tau.size, 40, replace=False), int(ls_tau.argmax()), int(ls_var.argmax())]
    for index in picks:
        w, y, x = ref.decode_dataset(int(index), n, n_strata)
        assert ls_tau[index] == pytest.approx(
            ref.brute_force_local_sensitivity(w, y, x, n_strata, ref.Y_GRID), abs=1e-12
        )
        brute_var = ref.brute_force_local_sensitivity(
            w, y, x, n_strata, ref.Y_GRID, stat=lambda a, b, c: ref.literal_matching(a, b, c)[2]
        )
        assert ls_var[index] == pytest.approx(brute_var, abs=1e-12)


STATISTICS = {
    "ate": (0, matching_local_sensitivity_bound, matching_smooth_sensitivity),
    "variance": (
        1,
        matching_variance_local_sensitivity_bound,
        matching_variance_smooth_sensitivity,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("statistic", list(STATISTICS))
@pytest.mark.parametrize(("n_strata", "n"), SIZES)
def test_true_local_and_smooth_sensitivity_never_exceed_the_bounds(statistic, n_strata, n):
    """For every ordered dataset: true LS <= the local bound, and for each beta the true
    beta-smooth sensitivity <= the smooth bound with ``domain_size = |X|``."""
    position, local_fn, smooth_fn = STATISTICS[statistic]
    universe = _universe(n_strata, n)
    f, keys, inverse = universe[position], universe[2], universe[3]
    ls = ref.local_sensitivity_over_axes(f)
    bound = _per_key(lambda t, c: local_fn(t, c, n, B), keys, inverse)
    bad = _worst_violation(ls, bound)
    assert bad is None, "local sensitivity: " + _describe(bad, n, n_strata, ls, bound)
    ball = ref.dataset_ball_maxima(ls, n)
    for beta in BETAS:
        s_true = ref.true_smooth_sensitivity(ball, beta)
        s_bound = _per_key(
            lambda t, c, beta=beta: smooth_fn(t, c, n, B, beta, domain_size=n_strata),
            keys,
            inverse,
        )
        bad = _worst_violation(s_true, s_bound)
        assert bad is None, f"smooth, beta={beta}: " + _describe(bad, n, n_strata, s_true, s_bound)


def test_the_exhaustive_checker_fails_a_too_small_bound():
    """The enumeration reaches datasets whose true LS is over 40% of Theorem 1's bound (it is
    about 2.3x conservative): a bound 0.4 times as large, or the paper's variance bound scaled the
    same way, is caught, and so is the smooth bound at 0.4 times its size. (The paper's literal
    ``R_x^(k)`` is *not* caught here, it errs by less than the slack of Theorem 1; part 2 and
    ``test_smoothness.py`` catch it.)"""
    n_strata, n = 2, 5
    tau, _, keys, inverse = _universe(n_strata, n)
    ls = ref.local_sensitivity_over_axes(tau)
    bound = _per_key(lambda t, c: matching_local_sensitivity_bound(t, c, n, B), keys, inverse)
    assert _worst_violation(ls, 0.4 * bound) is not None
    s_true = ref.true_smooth_sensitivity(ref.dataset_ball_maxima(ls, n), 1.0)
    s_bound = _per_key(
        lambda t, c: matching_smooth_sensitivity(t, c, n, B, 1.0, domain_size=n_strata),
        keys,
        inverse,
    )
    assert _worst_violation(s_true, 0.4 * s_bound) is not None


@st.composite
def _larger_dataset(draw):
    """``N`` up to 40, up to 3 strata, skewed arms likely, outcomes at the extremes 0 and B."""
    n_strata = draw(st.integers(1, 3))
    n = draw(st.integers(2, 40))
    p = draw(st.sampled_from([0.03, 0.1, 0.5, 0.9, 0.97]))
    w = draw(st.lists(st.floats(0, 1).map(lambda u: int(u < p)), min_size=n, max_size=n))
    y = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    x = draw(st.lists(st.integers(0, n_strata - 1), min_size=n, max_size=n))
    return np.array(w), np.array(y), np.array(x), n_strata


def _true_local_sensitivities(w, y, x, n_strata):
    """``(LS of tau_hat, LS of V_hat)`` over every replace-one neighbour with ``Y in {0, B}``
    (extreme outcomes: the largest changes), computed with the core's estimators (which the tests
    above tie to the literal loop)."""
    from dpate_core.statistics import matching_statistics

    base = matching_statistics(w, y, x, domain_size=n_strata)
    ls_tau = ls_var = 0.0
    for i in range(w.size):
        for wv, yv, xv in itertools.product((0, 1), (0.0, 1.0), range(n_strata)):
            w2, y2, x2 = w.copy(), y.copy(), x.copy()
            w2[i], y2[i], x2[i] = wv, yv, xv
            other = matching_statistics(w2, y2, x2, domain_size=n_strata)
            ls_tau = max(ls_tau, abs(other.tau - base.tau))
            ls_var = max(ls_var, abs(other.variance - base.variance))
    return ls_tau, ls_var, base


@pytest.mark.slow
@settings(max_examples=150)
@given(_larger_dataset())
def test_local_bounds_beyond_the_enumeration(data):
    """Random datasets up to ``N = 40`` (past the exhaustive range), every neighbour: the true
    local sensitivities stay under Theorem 1's bound and the variance bound."""
    w, y, x, n_strata = data
    ls_tau, ls_var, base = _true_local_sensitivities(w, y, x, n_strata)
    t, c = base.treated_counts, base.control_counts
    assert ls_tau <= matching_local_sensitivity_bound(t, c, w.size, B) * (1 + REL)
    assert ls_var <= matching_variance_local_sensitivity_bound(t, c, w.size, B) * (1 + REL)


@pytest.mark.slow
@pytest.mark.parametrize("small", [1, 2, 3])
def test_local_bounds_on_skewed_strata_at_larger_n(small):
    """A stratum with ``M = 60`` treated and ``m`` controls, the domain holding a second (empty)
    stratum: every outcome pattern in ``{0, B}`` of the controls and the first three treated (the
    only records whose partners change when the smaller arm shrinks), the other treated all 0 or
    all B, every neighbour. The variance's true LS grows like ``(M / (m - 1))^2`` here (a control
    leaving hands its partner's weight to another), the closest the bound comes to being reached
    (a local search found true/bound 0.31 at N = 320, tending to 1/3 for m = 2)."""
    big = 60
    n = big + small
    w = np.array([0] * small + [1] * big)
    x = np.zeros(n, np.int64)
    t, c = np.array([big, 0]), np.array([small, 0])
    ate_bound = matching_local_sensitivity_bound(t, c, n, B)
    var_bound = matching_variance_local_sensitivity_bound(t, c, n, B)
    for head in itertools.product((0.0, 1.0), repeat=small + 3):
        for rest in (0.0, 1.0):
            y = np.array([*head, *([rest] * (big - 3))])
            ls_tau, ls_var, _ = _true_local_sensitivities(w, y, x, 2)
            assert ls_tau <= ate_bound * (1 + REL), (small, head, rest)
            assert ls_var <= var_bound * (1 + REL), (small, head, rest)


# ---------------------------------------------------------------------------------------------
# Part 2: every count vector; the smooth bounds are exact ball maxima

# (|X|, the N enumerated): with one stratum the k >= m corner is hidden by the cap at N, and a
# smaller arm can only matter at radii near 1/beta, so |X| = 2 also runs at N = 20 and 28
COUNT_SPACES = [(1, tuple(range(2, 41))), (2, (*range(2, 13), 20, 28)), (3, tuple(range(2, 8)))]


@functools.cache
def _count_space(n_strata: int, n: int):
    vectors = ref.count_vectors(n, 2 * n_strata)
    return vectors, ref.count_space_neighbours(vectors)


def _max_over_strata(fn, vectors: np.ndarray) -> np.ndarray:
    return np.array(
        [max(fn(int(v[2 * s + 1]), int(v[2 * s])) for s in range(len(v) // 2)) for v in vectors]
    )


@pytest.mark.parametrize(("n_strata", "sizes"), COUNT_SPACES, ids=["X1", "X2", "X3"])
def test_ate_smooth_bound_is_the_exact_ball_maximum_of_theorem_1(n_strata, sizes):
    """``matching_smooth_sensitivity(D) == min(2B, max_k e^(-k beta) max_{ball_k(D)} LS_Thm1)`` for
    every count vector (``domain_size = |X|``), with the ball maxima found by breadth-first search;
    and ``matching_local_sensitivity_bound`` is Theorem 1's formula. (The cap: ``LS <= 2B``
    everywhere, a constant is beta-smooth, and the minimum of two beta-smooth upper bounds is
    one.)"""
    for n in sizes:
        vectors, nbrs = _count_space(n_strata, n)
        ls = np.array([ref.theorem1_local_bound(v[1::2], v[0::2], n, B) for v in vectors])
        for v, value in zip(vectors, ls, strict=True):
            assert matching_local_sensitivity_bound(v[1::2], v[0::2], n, B) == pytest.approx(
                value, rel=1e-9
            )
        ball = ref.ball_maxima(ls, nbrs, n)
        for beta in BETAS:
            # the core caps the bound at the global sensitivity 2B (a beta-smooth constant >= LS)
            exact = np.minimum(ref.smooth_from_ball_maxima(ball, beta), 2.0 * B)
            for v, value in zip(vectors, exact, strict=True):
                got = matching_smooth_sensitivity(
                    v[1::2], v[0::2], n, B, beta, domain_size=n_strata
                )
                assert got >= value, f"counts {v.tolist()} N={n} beta={beta}: {got} < {value}"
                assert got == pytest.approx(value, rel=1e-9), f"counts {v.tolist()} N={n}"


@pytest.mark.parametrize(("n_strata", "n_max"), [(1, 12), (2, 7)])
def test_ate_smooth_bound_with_an_open_domain(n_strata, n_max):
    """``domain_size=None`` (a neighbour may bring a new covariate value) equals the exact ball
    maximum over a domain with one extra stratum, for data that leave that stratum empty (one
    absent stratum is as good as many: the bound is a maximum over strata)."""
    for n in range(2, n_max + 1):
        vectors, nbrs = _count_space(n_strata + 1, n)
        ls = np.array([ref.theorem1_local_bound(v[1::2], v[0::2], n, B) for v in vectors])
        ball = ref.ball_maxima(ls, nbrs, n)
        for beta in BETAS:
            exact = np.minimum(ref.smooth_from_ball_maxima(ball, beta), 2.0 * B)  # the 2B cap
            for v, value in zip(vectors, exact, strict=True):
                if v[-2:].any():
                    continue
                t, c = v[1:-2:2], v[0:-2:2]
                got = matching_smooth_sensitivity(t, c, n, B, beta, domain_size=None)
                assert got == pytest.approx(value, rel=1e-9), f"counts {v.tolist()} N={n}"
                assert matching_smooth_sensitivity(
                    t, c, n, B, beta, domain_size=n_strata + 1
                ) == pytest.approx(value, rel=1e-9)


def test_the_papers_R_k_is_not_the_ball_maximum():
    """The same breadth-first search shows that the paper's printed ``R_x^(k)`` is not the ball
    maximum of ``R`` (correction 1). Smallest case: ``|X| = 2``, ``N = 3``, stratum 0 with one
    treated and one control, stratum 1 with one treated; one replacement moves that treated record
    into stratum 0, giving (2, 1) and ``R = ceil(3 / 1) = 3``, where the paper has ``M + k = 2``.
    (Its smooth bound is still never below the exact one in these small spaces, because its terms
    keep growing past ``N``; its failure is beta-smoothness, shown in ``test_smoothness.py``.)"""
    found = set()
    for n in range(2, 9):
        vectors, nbrs = _count_space(2, n)
        r = np.array([max(ref.theorem1_R(v[1], v[0]), ref.theorem1_R(v[3], v[2])) for v in vectors])
        ball = ref.ball_maxima(r, nbrs, n)
        for i, v in enumerate(vectors):
            for k in range(1, n + 1):
                paper = max(ref.paper_R_k(v[1], v[0], k), ref.paper_R_k(v[3], v[2], k))
                if min(paper, n) < ball[k, i]:
                    found.add((n, tuple(int(a) for a in v), k))
    assert (3, (1, 1, 0, 1), 1) in found


@pytest.mark.parametrize(("n_strata", "sizes"), COUNT_SPACES, ids=["X1", "X2", "X3"])
def test_variance_smooth_bound_is_the_sum_of_exact_ball_maxima(n_strata, sizes):
    """``matching_variance_smooth_sensitivity(D) == max_k e^(-k beta) B^2/(2N^2)
    (max_{ball_k} max_x term+ + max_{ball_k} max_x term-)`` for every count vector (correction
    9: each term's ball maximum taken separately), and the local bound is ``k = 0`` of it."""
    for n in sizes:
        vectors, nbrs = _count_space(n_strata, n)
        scale = B * B / (2.0 * n * n)
        plus = _max_over_strata(ref.variance_plus_term, vectors)
        minus = _max_over_strata(ref.variance_minus_term, vectors)
        for v, value in zip(vectors, scale * (plus + minus), strict=True):
            assert matching_variance_local_sensitivity_bound(
                v[1::2], v[0::2], n, B
            ) == pytest.approx(value, rel=1e-9)
        ball = scale * (ref.ball_maxima(plus, nbrs, n) + ref.ball_maxima(minus, nbrs, n))
        for beta in BETAS:
            exact = ref.smooth_from_ball_maxima(ball, beta)
            for v, value in zip(vectors, exact, strict=True):
                got = matching_variance_smooth_sensitivity(
                    v[1::2], v[0::2], n, B, beta, domain_size=n_strata
                )
                assert got >= value, f"counts {v.tolist()} N={n} beta={beta}: {got} < {value}"
                assert got == pytest.approx(value, rel=1e-9), f"counts {v.tolist()} N={n}"


# ---------------------------------------------------------------------------------------------
# Part 3: the variance bound's g and h dominate the appendix's expressions


@pytest.mark.parametrize(("n_strata", "n_max"), [(1, 7), (2, 5)])
def test_appendix_add_and_remove_bounds_hold_at_every_insertion_position(n_strata, n_max):
    """The proofs bound ``|f(D) - f(D + r)|`` by ``LS+`` of ``D`` and by ``LS-`` of ``D + r``,
    stratum by stratum (``f = N tau_hat`` for Theorem 1, ``g = 2 N^2 V_hat`` for the appendix),
    "w.l.o.g." for a record added last, which is not without loss of generality (correction
    8). Here every dataset ``E`` of up to ``n_max`` records and every record removed from it (so
    every insertion position) is checked against the printed per-stratum terms."""
    universes = {size: ref.enumerate_datasets(size, n_strata) for size in range(1, n_max + 1)}
    for n in range(1, n_max):
        bounds = []
        for size in (n, n + 1):
            tau, var, cells = universes[size]
            keys, inverse = np.unique(cells, axis=0, return_inverse=True)
            per_key = {
                name: np.array(
                    [
                        max(fn(int(k[2 * s + 1]), int(k[2 * s])) for s in range(n_strata))
                        for k in keys
                    ]
                )[inverse.ravel()].reshape(tau.shape)
                for name, fn in (
                    ("f+", ref.paper_ate_ls_plus),
                    ("f-", ref.paper_ate_ls_minus),
                    ("g+", ref.paper_var_ls_plus),
                    ("g-", ref.paper_var_ls_minus),
                )
            }
            bounds.append((size * tau, 2.0 * size * size * var, per_key))
        (f_d, g_d, at_d), (f_e, g_e, at_e) = bounds
        for position in range(n + 1):  # E minus its record at `position` is D
            df = np.abs(f_e - np.expand_dims(f_d, position))
            dg = np.abs(g_e - np.expand_dims(g_d, position))
            assert (df <= np.expand_dims(at_d["f+"], position) + 1e-9).all(), (n, position)
            assert (df <= at_e["f-"] + 1e-9).all(), (n, position)
            assert (dg <= np.expand_dims(at_d["g+"], position) + 1e-9).all(), (n, position)
            assert (dg <= at_e["g-"] + 1e-9).all(), (n, position)


def _g_terms(t: int, c: int, exact: bool = False):
    """The core's two per-stratum variance terms for ``(t, c)``; Fractions when ``exact``."""
    big, small = max(t, c), min(t, c)
    if exact:
        big = Fraction(big)
    if small == 0:
        return (1 + big) ** 2 + 4 * big, ref.variance_h(big, 1)
    return ref.variance_g(big, small), ref.variance_h(big + 1, small)


def _check_domination(t: int, c: int, exact: bool) -> None:
    plus, minus = _g_terms(t, c, exact)
    assert plus >= ref.paper_var_ls_plus(t, c), (t, c)
    assert minus >= ref.paper_var_ls_minus_after_add(t, c), (t, c)
    assert minus >= ref.direct_ls_minus_after_add(t, c), (t, c)
    if min(t, c) > 0:
        big = Fraction(max(t, c)) if exact else max(t, c)
        assert ref.variance_h(big, min(t, c)) >= ref.paper_var_ls_minus(t, c), (t, c)


def test_g_and_h_dominate_the_appendix_terms_on_a_grid():
    """For every ``1 <= |T_x| + |C_x|`` with both below 150: ``g >= LS+_x``,
    ``h(M+1, m) >= max_{D''} LS-_x`` (both the appendix's printed "Therefore" and the maximum of
    its LS- over the two one-record additions), ``h >= LS-_x``; an empty-arm stratum's first term
    is the appendix's ``(1+M)^2 + 4M`` exactly."""
    for t in range(150):
        for c in range(150):
            if t + c:
                _check_domination(t, c, exact=False)
    for big in range(1, 150):
        assert _g_terms(big, 0)[0] == ref.paper_var_ls_plus(big, 0)


@given(st.integers(0, 10**7), st.integers(0, 10**7))
def test_g_and_h_dominate_the_appendix_terms_for_large_counts(t, c):
    """The same inequalities in exact rational arithmetic for counts up to 10^7."""
    if t + c:
        _check_domination(t, c, exact=True)


def test_g_and_h_are_monotone():
    """The ball-corner construction needs each term non-decreasing in ``M`` and non-increasing in
    ``m`` (both arms non-empty), and the empty-arm term non-decreasing in ``M``."""
    for big in range(1, 120):
        for small in range(1, big + 1):
            g, h = ref.variance_g(big, small), ref.variance_h(big + 1, small)
            assert ref.variance_g(big + 1, small) >= g
            assert ref.variance_h(big + 2, small) >= h
            if small > 1:
                assert ref.variance_g(big, small - 1) >= g
                assert ref.variance_h(big + 1, small - 1) >= h
        assert ref.variance_h(big + 1, 1) >= ref.variance_h(big, 1)
    assert math.isfinite(ref.variance_g(10**7, 1))
