"""Global sensitivity of the matching ATE (GlobalDPMatching, correction 2).

The paper uses ``B``; the true global sensitivity is at least ``(N + 1) B / N``. The core uses
``2B``, which is provable: every record contributes ``Yhat_i(1) - Yhat_i(0)`` in ``[-B, B]`` (0 in a
stratum without a match), so ``|tau_hat| <= B`` and two datasets differ by at most ``2B``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpate_core.mechanisms.matching import matching_global_sensitivity
from dpate_core.statistics import exact_matching
from tests.core import reference as ref


def _errata_witness(n: int, bound: float, position: int = 0):
    """correction 2: stratum 0 holds ``N - 2`` controls with ``Y = 0`` and one treated with
    ``Y = B`` (at ``position``), stratum 1 one control with ``Y = B``; the neighbour changes the
    treated record to ``(W = 1, Y = 0, X = 1)``."""
    w = np.zeros(n, np.int64)
    y = np.zeros(n)
    x = np.zeros(n, np.int64)
    w[position], y[position] = 1, bound
    last = n - 1 if position != n - 1 else 0
    y[last], x[last] = bound, 1
    w2, y2, x2 = w.copy(), y.copy(), x.copy()
    y2[position], x2[position] = 0.0, 1
    return (w, y, x), (w2, y2, x2)


@pytest.mark.parametrize("n", [3, 4, 7, 50, 1000, 100_000])
@pytest.mark.parametrize("bound", [1.0, 0.37, 250.0])
def test_errata_witness_reaches_n_plus_one_over_n_times_b(n, bound):
    """``tau_hat`` moves from ``(N-1)B/N`` to ``-2B/N``: by ``(N+1)B/N > B``; the constant used is
    at least that."""
    d, d2 = _errata_witness(n, bound)
    tau, tau2 = exact_matching(*d).tau, exact_matching(*d2).tau
    assert tau == pytest.approx((n - 1) * bound / n, rel=1e-12)
    assert tau2 == pytest.approx(-2 * bound / n, rel=1e-12)
    gap = abs(tau - tau2)
    assert gap == pytest.approx((n + 1) * bound / n, rel=1e-12)
    assert gap > bound
    assert matching_global_sensitivity(n, bound) >= gap


@pytest.mark.parametrize("n", [3, 5, 8])
def test_errata_witness_at_every_position(n):
    """Matching depends on record order; the witness works wherever the treated record sits, and
    the literal loop agrees."""
    for position in range(n):
        d, d2 = _errata_witness(n, 1.0, position)
        lit, lit2 = ref.literal_matching(*d)[0], ref.literal_matching(*d2)[0]
        assert exact_matching(*d).tau == pytest.approx(lit, abs=1e-12)
        assert exact_matching(*d2).tau == pytest.approx(lit2, abs=1e-12)
        assert abs(lit - lit2) == pytest.approx((n + 1) / n, abs=1e-12)


def test_papers_proposition_witness_reaches_b():
    """The paper's own witness (Proposition, ``Delta >= B``): ``N - 1`` treated with ``Y = B``
    and one control with ``Y = 0``, which the neighbour turns treated."""
    n = 9
    w = np.ones(n, np.int64)
    w[-1] = 0
    y = np.ones(n)
    y[-1] = 0.0
    x = np.zeros(n, np.int64)
    w2 = w.copy()
    w2[-1] = 1
    assert abs(exact_matching(w, y, x).tau - exact_matching(w2, y, x).tau) == pytest.approx(1.0)


@functools.cache
def _true_global_sensitivity(n_strata: int, n: int) -> float:
    tau, _, _ = ref.enumerate_datasets(n, n_strata)
    return float(ref.local_sensitivity_over_axes(tau).max())


@pytest.mark.parametrize("n", range(3, 7))
def test_true_global_sensitivity_by_enumeration(n):
    """Over every ordered dataset with ``|X| = 2``, ``Y in {0, B/2, B}``: the largest change of
    ``tau_hat`` under one replacement is exactly ``(N+1)B/N`` (the witness is the worst case
    here), and never above ``matching_global_sensitivity``."""
    gs = _true_global_sensitivity(2, n)
    assert gs == pytest.approx((n + 1) / n, rel=1e-12)
    assert gs <= matching_global_sensitivity(n, 1.0)
    assert _true_global_sensitivity(1, n) <= matching_global_sensitivity(n, 1.0)


def test_global_sensitivity_is_two_b():
    for n in (2, 10, 10**7):
        for bound in (1.0, 0.5, 1e6):
            assert matching_global_sensitivity(n, bound) == 2 * bound


@pytest.mark.parametrize(("n", "bound"), [(1, 1.0), (0, 1.0), (5, 0.0), (5, -1.0), (5, np.inf)])
def test_global_sensitivity_refuses_invalid_arguments(n, bound):
    with pytest.raises(ValueError, match=r"n \(|bound B"):
        matching_global_sensitivity(n, bound)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 1), st.sampled_from([0.0, 1.0]) | st.floats(0, 1), st.integers(0, 4)
        ),
        min_size=1,
        max_size=80,
    )
)
def test_tau_hat_never_leaves_minus_b_to_b(records):
    """The proof of the ``2B`` constant: ``|tau_hat| <= B`` for every dataset with ``Y`` in
    ``[0, B]`` (extreme outcomes drawn often)."""
    w, y, x = (np.array(col) for col in zip(*records, strict=True))
    assert abs(exact_matching(w, y, x).tau) <= 1.0 + 1e-12
