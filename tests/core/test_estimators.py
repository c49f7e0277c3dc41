"""The non-private estimators against independent computations.

- ``exact_matching`` and ``matching_variance`` (Algorithm 1 and the appendix's ``V_hat``, one
  compiled pass) against :func:`reference.literal_matching`, the algorithm as printed: ``tau``,
  every ``L_i`` and ``V_hat`` agree to 1e-12 on random data with empty arms, single strata, many
  strata, unequal arms, and on hand-picked cases.
- Against the closed-form stratified difference in means. With ``L_i`` the number of records
  matched to record ``i``, ``N tau_hat = sum_{x: both arms} [sum_{T_x} (1 + L_i) Y_i -
  sum_{C_x} (1 + L_i) Y_i]`` (the proof of Theorem 1), while the stratified difference in means is
  the same sum with weights ``1 + |C_x|/|T_x|`` on treated and ``1 + |T_x|/|C_x|`` on controls. A
  treated record of rank ``j`` has ``L_i = |C_x| // |T_x| + [j < |C_x| mod |T_x|]``, whose mean
  over the arm is ``|C_x| / |T_x|``. So the two are equal exactly
  (a) when ``|T_x| = |C_x|`` in every stratum with both arms (every ``L_i = 1``, every weight 2);
  (b) when every arm with unequal weights holds one outcome value (e.g. ``|T_x|`` divides
      ``|C_x|``: the treated weights are all ``1 + |C_x|/|T_x|``, but only the first ``|T_x|``
      controls are matched, so the controls must share one outcome);
  (c) on average over the cyclic rotations of the records inside each (stratum, arm) group: each
      record then takes every rank once, so its mean weight is the stratified one.
  "``|T_x|`` divides ``|C_x|`` and vice versa" is case (a).
- ``difference_in_means`` against a direct numpy computation.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpate_core.statistics import (
    difference_in_means,
    exact_matching,
    matching_statistics,
    matching_variance,
    stratum_counts,
    variance_bits,
)
from tests.core import reference as ref

TOL = 1e-12


def _grid_tolerance(y):
    """How far ``V_hat`` summed on the grid ``G 2^-k`` (``G`` the least power of two at or above
    every outcome, :func:`variance_bits`) can be from the unquantised value: each difference moves
    by at most one step ``G 2^-k``, so each square by at most ``2 G^2 2^-k``, and
    ``sum (1 + L_i)^2 <= 4 N^2``: at most ``4 G^2 2^-k``. Zero when the outcomes are on the grid."""
    top = float(np.max(y, initial=0.0))
    grid = 2.0 ** math.frexp(top)[1] if top > 0 else 1.0
    on_grid = np.all(
        np.rint(y / grid * 2.0 ** variance_bits(y.size)) * grid == y * 2.0 ** variance_bits(y.size)
    )
    return 0.0 if on_grid else 4 * grid**2 * 2.0 ** -variance_bits(y.size)


def _check_against_literal(w, y, x):
    w, y, x = np.asarray(w), np.asarray(y, dtype=float), np.asarray(x)
    lit_tau, lit_L, lit_var = ref.literal_matching(w, y, x)
    # 1e-12 absolute on the scale of B = max |Y| (B^2 for the variance, plus the grid's effect)
    scale = max(1.0, float(np.abs(y).max(initial=0.0)))
    var_tol = TOL * scale**2 + _grid_tolerance(y)
    got = exact_matching(w, y, x)
    assert got.tau == pytest.approx(lit_tau, abs=TOL * scale)
    np.testing.assert_array_equal(got.matches_used, lit_L)
    assert matching_variance(w, y, x) == pytest.approx(lit_var, abs=var_tol)
    stats = matching_statistics(w, y, x)
    assert stats.tau == pytest.approx(lit_tau, abs=TOL * scale)
    assert stats.variance == pytest.approx(lit_var, abs=var_tol)
    return got


@st.composite
def _datasets(draw, max_n=120):
    n = draw(st.integers(1, max_n))
    n_strata = draw(st.sampled_from([1, 2, 3, 10, max(1, n)]))
    p = draw(st.sampled_from([0.0, 0.05, 0.5, 0.9, 1.0]))
    w = draw(st.lists(st.booleans().map(int), min_size=n, max_size=n))
    if p in (0.0, 1.0):
        w = [int(p)] * n  # one arm empty everywhere
    y = draw(
        st.lists(
            st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0, 1e3),
            min_size=n,
            max_size=n,
        )
    )
    x = draw(st.lists(st.integers(0, n_strata - 1), min_size=n, max_size=n))
    return np.array(w), np.array(y), np.array(x)


@settings(max_examples=300)
@given(_datasets())
def test_exact_matching_agrees_with_the_literal_loop(data):
    _check_against_literal(*data)


def _random(rng, n, n_strata, p_treated=0.5):
    return (
        (rng.random(n) < p_treated).astype(np.int64),
        rng.random(n),
        rng.integers(0, n_strata, n),
    )


@pytest.mark.parametrize(
    ("n", "n_strata", "p_treated"),
    [
        (1, 1, 0.5),  # a single record: no match, tau 0
        (40, 1, 0.5),  # a single stratum
        (40, 1, 0.0),  # every record a control
        (40, 1, 1.0),  # every record treated
        (300, 1, 0.02),  # very unequal arms
        (300, 1, 0.97),
        (500, 400, 0.5),  # many strata, most without a match
        (5000, 60, 0.3),
        (3000, 3000, 0.5),  # as many strata as records
    ],
)
def test_literal_loop_on_shaped_data(n, n_strata, p_treated):
    rng = np.random.default_rng(n + n_strata)
    _check_against_literal(*_random(rng, n, n_strata, p_treated))


def test_record_order_matters_and_is_followed():
    """Algorithm 1 matches by rank in record order: reordering the controls changes ``tau_hat``
    (with 2 treated and 3 controls, the third control is matched to nobody), and the core
    follows the order the records come in."""
    w = np.array([1, 1, 0, 0, 0])
    x = np.zeros(5, np.int64)
    y_a = np.array([1.0, 1.0, 0.0, 0.0, 1.0])
    y_b = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
    a, b = _check_against_literal(w, y_a, x), _check_against_literal(w, y_b, x)
    assert a.tau != pytest.approx(b.tau)
    np.testing.assert_array_equal(a.matches_used, [2, 1, 1, 1, 0])


def test_hand_computed_example():
    """Stratum 0: treated Y = (1, 3), controls Y = (0, 2, 4); stratum 1: one treated, no control.
    Treated 0 -> control 0, treated 1 -> control 1; controls 0, 1, 2 -> treated 0, 1, 0.
    ``Yhat(1) - Yhat(0)`` = 1, 1, 1, 1, -3 (and 0 for stratum 1): ``tau = 1/6``.
    ``L`` = (2, 1, 1, 1, 0, 0); ``V = (9 + 4 + 4 + 4 + 9) / 72``."""
    w = np.array([1, 1, 0, 0, 0, 1])
    y = np.array([1.0, 3.0, 0.0, 2.0, 4.0, 5.0])
    x = np.array([0, 0, 0, 0, 0, 1])
    got = _check_against_literal(w, y, x)
    assert got.tau == pytest.approx(1 / 6, abs=TOL)
    np.testing.assert_array_equal(got.matches_used, [2, 1, 1, 1, 0, 0])
    assert matching_variance(w, y, x) == pytest.approx(30 / 72, abs=TOL)


@given(_datasets())
def test_tau_is_the_weighted_sum_of_the_proof(data):
    """``N tau_hat = sum_{x: both arms} [sum_{T_x} (1 + L_i) Y_i - sum_{C_x} (1 + L_i) Y_i]`` with
    the core's own ``L_i``, and ``sum_{T_x} L_i = |C_x|``, ``sum_{C_x} L_i = |T_x|``."""
    w, y, x = data
    got = exact_matching(w, y, x)
    L = got.matches_used
    total = 0.0
    for s in np.unique(x):
        t, c = (x == s) & (w == 1), (x == s) & (w == 0)
        if t.any() and c.any():
            total += ((1 + L[t]) * y[t]).sum() - ((1 + L[c]) * y[c]).sum()
            assert L[t].sum() == c.sum() and L[c].sum() == t.sum()
        else:
            assert not L[t | c].any()
    assert got.tau * w.size == pytest.approx(total, abs=1e-9 * max(1.0, np.abs(y).sum()))


@st.composite
def _balanced(draw):
    """Every stratum has as many treated as controls (or only one arm); shuffled record order."""
    sizes = draw(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 1)), min_size=1, max_size=8))
    w, x = [], []
    for s, (k, lonely) in enumerate(sizes):
        if lonely:  # one arm only: contributes 0 to both estimators
            w += [draw(st.integers(0, 1))] * max(k, 1)
            x += [s] * max(k, 1)
        else:
            w += [1] * k + [0] * k
            x += [s] * (2 * k)
    perm = draw(st.permutations(range(len(w))))
    y = draw(st.lists(st.floats(0, 1), min_size=len(w), max_size=len(w)))
    return np.array(w)[perm], np.array(y), np.array(x)[perm]


@given(_balanced())
def test_equals_stratified_difference_in_means_when_arms_balance(data):
    """Case (a): ``|T_x| = |C_x|`` wherever both arms are present."""
    w, y, x = data
    assert exact_matching(w, y, x).tau == pytest.approx(
        ref.stratified_difference_in_means(w, y, x), abs=TOL
    )


@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 3), st.data())
def test_equals_stratified_difference_in_means_when_the_unevenly_used_arm_is_constant(
    t, q, extra_strata, data
):
    """Case (b): ``|C_x| = q |T_x|`` (the treated all carry weight ``1 + q``), the controls share
    one outcome; plus balanced strata around it; and the mirror image with arms swapped."""
    for swap in (False, True):
        y_t = data.draw(st.lists(st.floats(0, 1), min_size=t, max_size=t))
        y_c = data.draw(st.floats(0, 1))
        w = [1] * t + [0] * (q * t)
        y = y_t + [y_c] * (q * t)
        x = [0] * (t + q * t)
        for s in range(1, extra_strata + 1):
            w += [1, 0]
            y += data.draw(st.lists(st.floats(0, 1), min_size=2, max_size=2))
            x += [s, s]
        w = np.array(w)
        if swap:
            w = 1 - w
        perm = data.draw(st.permutations(range(len(w))))
        w, y, x = w[perm], np.array(y)[perm], np.array(x)[perm]
        assert exact_matching(w, y, x).tau == pytest.approx(
            ref.stratified_difference_in_means(w, y, x), abs=TOL
        )


def _rotate_groups(w, y, x, shifts):
    """Reorder the outcomes inside each (stratum, arm) group by a cyclic shift of its records."""
    y = y.copy()
    for (s, arm), shift in shifts.items():
        idx = np.flatnonzero((x == s) & (w == arm))
        y[idx] = np.roll(y[idx], shift)
    return y


@pytest.mark.parametrize("seed", range(12))
def test_rotation_average_is_the_stratified_difference_in_means(seed):
    """Case (c): averaged over every combination of cyclic rotations inside each group, tau_hat is
    exactly the stratified difference in means (unequal arms, up to two strata)."""
    rng = np.random.default_rng(seed)
    n_strata = 1 + seed % 2
    w, x = [], []
    for s in range(n_strata):
        t, c = rng.integers(1, 5), rng.integers(1, 5)
        w += [1] * t + [0] * c
        x += [s] * (t + c)
    perm = rng.permutation(len(w))
    w, x = np.array(w)[perm], np.array(x)[perm]
    y = rng.random(len(w))
    groups = [(s, arm) for s in range(n_strata) for arm in (0, 1)]
    ranges = [range(int(((x == s) & (w == arm)).sum())) for s, arm in groups]
    taus = [
        exact_matching(w, _rotate_groups(w, y, x, dict(zip(groups, combo, strict=True))), x).tau
        for combo in itertools.product(*ranges)
    ]
    assert np.mean(taus) == pytest.approx(ref.stratified_difference_in_means(w, y, x), abs=TOL)


def test_matching_statistics_counts_and_domain():
    rng = np.random.default_rng(3)
    w, y, x = _random(rng, 1000, 7)
    stats = matching_statistics(w, y, x, domain_size=10)
    t, c = stratum_counts(w, x, domain_size=10)
    np.testing.assert_array_equal(stats.treated_counts, np.bincount(x[w == 1], minlength=10))
    np.testing.assert_array_equal(stats.control_counts, np.bincount(x[w == 0], minlength=10))
    np.testing.assert_array_equal(stats.treated_counts, t)
    np.testing.assert_array_equal(stats.control_counts, c)
    assert stats.n == 1000
    with pytest.raises(ValueError, match="domain"):
        matching_statistics(w, y, x, domain_size=5)


SECRET = 0.123456789  # a recognisable outcome: no error message may echo it


@pytest.mark.parametrize(
    ("w", "y", "x", "pattern"),
    [
        ([1, 2], [SECRET, 1.0], [0, 0], "0 and 1"),
        ([1, 0], [SECRET], [0, 0], "one length"),
        ([1, 0], [SECRET, 1.0], [0, -1], r"x must lie in \[0, 1\)"),
        ([1, 0], [-SECRET, 1.0], [0, 0], "outcomes must"),
        ([1, 0], [np.nan, 1.0], [0, 0], "outcomes must"),
        ([1, 0], [SECRET, 1.0], [SECRET, 0.0], "integer"),
        ([], [], [], "at least one record"),
    ],
)
def test_matching_refuses_malformed_input_without_echoing_values(w, y, x, pattern):
    with pytest.raises(ValueError, match=pattern) as err:
        exact_matching(np.array(w, dtype=np.int64), np.array(y), np.array(x))
    assert "0.1234" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# Difference in means


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.floats(-1e4, 1e4, allow_nan=False)),
        min_size=2,
        max_size=200,
    ).filter(lambda r: 0 < sum(a for a, _ in r) < len(r))
)
def test_difference_in_means_against_numpy(records):
    w = np.array([a for a, _ in records])
    y = np.array([b for _, b in records])
    got = difference_in_means(w, y)
    yt, yc = y[w == 1], y[w == 0]
    assert got.n_treated == yt.size and got.n_control == yc.size
    scale = max(1.0, np.abs(y).max())
    assert got.tau == pytest.approx(yt.mean() - yc.mean(), abs=1e-12 * scale)
    expected = np.var(yt) / yt.size + np.var(yc) / yc.size  # divisor n, as the paper's s^2
    assert got.variance == pytest.approx(expected, abs=1e-9 * scale**2)
    assert got.variance >= 0


def test_difference_in_means_accepts_booleans_and_needs_both_arms():
    y = np.array([1.0, 2.0, 4.0, 8.0])
    got = difference_in_means(np.array([True, True, False, False]), y)
    assert got.tau == pytest.approx(1.5 - 6.0)
    assert got.variance == pytest.approx(0.25 / 2 + 4.0 / 2)
    with pytest.raises(ValueError, match="both arms"):
        difference_in_means(np.ones(4, np.int64), y)


# ---------------------------------------------------------------------------------------------
# the DP difference in means' exact arm sums (dpate_core.mechanisms.difference_in_means.arm_statistics)


def _dim_locs(plan) -> dict[str, float]:
    return {s.name: float(s.value) for s in plan.noise}


@pytest.mark.parametrize("bound", [1.0, 2.5, 1 / 3])
def test_dim_exact_sums_move_only_at_rounding_level(bound):
    """The grid-rounded sums are within ``N B 2^-(k+1)`` of the old float sums (``yt.sum()``,
    ``yt @ yt``), and the noise-free estimate within ``B 2^-k`` of the old one."""
    from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
    from dpate_core.statistics import grid_bits

    rng = np.random.default_rng(11)
    n = 5_000
    w = rng.integers(0, 2, n)
    y = rng.uniform(0.0, bound, n)
    plan = plan_difference_in_means(w, y, bound=bound, epsilon=1)
    got = _dim_locs(plan)
    k, m = grid_bits(n, centred=False)
    t = w == 1
    old = {
        "sum_treated": float(y[t].sum()),
        "sum_control": float(y[~t].sum()),
        "sumsq_treated": float(y[t] @ y[t]),
        "sumsq_control": float(y[~t] @ y[~t]),
    }
    for name, value in old.items():
        unit = bound * 2.0**-k if name.startswith("sum_") else bound * bound * 2.0**-m
        tol = 0.5 * unit * n + 1e-12 * abs(value)
        assert abs(got[name] - value) <= tol, name
        assert got[name] != value  # rounded: the test would see the old float sums
    exact = plan.assemble({s.name: s.value for s in plan.noise})
    want = difference_in_means(w, y)
    assert abs(float(exact.tau) - want.tau) <= bound * 2.0**-k + 1e-12
    assert float(exact.tau) == pytest.approx(want.tau, abs=1e-9 * bound)
    sampling = float(exact.diagnostics["sampling_variance_dp"])
    assert sampling == pytest.approx(want.variance, rel=1e-9)


def test_dim_sums_are_batch_and_strata_independent():
    """Summing the integer statistics of any batching (or of any strata) gives the whole data's
    bit for bit; float sums of batches generally do not."""
    from dpate_core.mechanisms.difference_in_means import (
        arm_statistics,
        plan_difference_in_means,
        plan_difference_in_means_from_statistics,
    )
    from dpate_core.statistics._grid_sums import CellStatistics, _cell_kernel, grid_bits

    rng = np.random.default_rng(5)
    n = 10_001
    w = rng.integers(0, 2, n)
    y = rng.uniform(0.0, 1.0, n) ** 3
    x = rng.integers(0, 7, n)
    whole = plan_difference_in_means(w, y, bound=1.0, epsilon=1)
    k, m = grid_bits(n, centred=False)
    parts = [
        _cell_kernel(w[i : i + 37], y[i : i + 37], x[i : i + 37], 7, 1.0, k, m, 0.0)
        for i in range(0, n, 37)
    ]
    cells = CellStatistics(
        *(np.sum([p[j] for p in parts], axis=0) for j in (1, 2, 3)), 1.0, k, m, False
    )
    batched = plan_difference_in_means_from_statistics(cells, epsilon=1)
    assert _dim_locs(batched) == _dim_locs(whole)
    one = arm_statistics(w, y, bound=1.0)
    assert one.counts.size == 2 and not one.centred and (one.k, one.m) == (k, m)
    float_batched = sum(float(y[i : i + 37][w[i : i + 37] == 1].sum()) for i in range(0, n, 37))
    assert float_batched != float(y[w == 1].sum())  # what made the float sums unstreamable


def test_dim_rounding_keeps_a_binary_outcome_exact_and_refuses_centred_statistics():
    from dpate_core.mechanisms.difference_in_means import (
        plan_difference_in_means,
        plan_difference_in_means_from_statistics,
    )
    from dpate_core.statistics import cell_statistics

    bound = 2.5
    w = np.array([1, 1, 1, 0, 0, 0, 0])
    y = np.array([bound, 0.0, bound, 0.0, bound, 0.0, 0.0])
    for binary in (False, True):
        got = _dim_locs(plan_difference_in_means(w, y, bound=bound, epsilon=1, binary=binary))
        assert got["sum_treated"] == 2 * bound and got["sum_control"] == bound
        if not binary:
            assert got["sumsq_treated"] == 2 * bound * bound
    centred = cell_statistics(w, y, np.zeros(7, np.int64), domain_size=1, bound=bound)
    with pytest.raises(ValueError, match="uncentred statistics"):
        plan_difference_in_means_from_statistics(centred, epsilon=1)
    from dpate_core.mechanisms.adjusted import plan_adjusted_from_statistics
    from dpate_core.mechanisms.difference_in_means import arm_statistics

    with pytest.raises(ValueError, match="needs centred cell statistics"):
        plan_adjusted_from_statistics(arm_statistics(w, y, bound=bound), epsilon=1)


def test_dim_grid_keeps_the_largest_arm_sums_exact():
    """``grid_bits(N, centred=False)``: N records all at B in one arm sum to exactly 2^53 grid
    units (N a power of two above the 2^-40 cap), the largest integer a float holds with its
    neighbours; one more bit would not be exact."""
    from dpate_core.mechanisms.difference_in_means import arm_statistics
    from dpate_core.statistics import grid_bits

    n = 1 << 14
    k, m = grid_bits(n, centred=False)
    assert (k, m) == (39, 39) and grid_bits(n) == (39, 40)  # centred: the end histogram's 2^53
    st = arm_statistics(np.ones(n, np.int8), np.full(n, 2.5), bound=2.5)
    assert int(st.sums[1]) == int(st.squares[1]) == 2**53 and st.counts.tolist() == [0, n]
