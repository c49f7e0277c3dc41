"""The DP covariate-balance table (dpate_core.balance): the query's sensitivity (replace-one,
every neighbour of small data sets), its noise scale, and the table's standardized mean
differences against a direct computation from the records."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.balance import (
    BalanceLayout,
    balance_scale,
    balance_sensitivity,
    balance_table,
    dp_balance,
    level_counts,
    plan_balance,
)

# two covariates: a 3-level category and a numeric one cut into 2 finite bins (midpoints 5, 15)
LAYOUT = BalanceLayout(
    names=("sex_site", "age"),
    labels=(("a", "b", "c"), ("[0, 10)", "[10, 20]")),
    values=(None, (5.0, 15.0)),
)


def _cells(w: np.ndarray, x: np.ndarray, layout: BalanceLayout = LAYOUT) -> np.ndarray:
    return np.bincount(2 * x + w, minlength=2 * layout.domain_size)


def test_sensitivity_is_2p_over_every_replace_one_neighbour():
    """Every record of small data sets replaced by every possible record: the L1 distance of
    the query never passes 2 p, and reaches it (so the scale 2 p / eps is the one needed)."""
    records = [(w, x) for w in (0, 1) for x in range(LAYOUT.domain_size)]
    worst = 0
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 6))
        data = [records[i] for i in rng.integers(0, len(records), n)]
        w = np.array([r[0] for r in data])
        x = np.array([r[1] for r in data])
        base = level_counts(_cells(w, x), LAYOUT)
        for i, new in itertools.product(range(n), records):
            w2, x2 = w.copy(), x.copy()
            w2[i], x2[i] = new
            worst = max(worst, int(np.abs(level_counts(_cells(w2, x2), LAYOUT) - base).sum()))
    assert balance_sensitivity(LAYOUT) == 4
    assert worst == balance_sensitivity(LAYOUT)


def test_sensitivity_with_bands_is_still_2p():
    bands = np.array([0, 1, 0, 1, 2, 2])  # a public band of each of the 6 strata
    w = np.array([0, 1, 1, 0])
    x = np.array([0, 3, 5, 2])
    base = level_counts(_cells(w, x), LAYOUT, bands, 3)
    for i, (nw, nx) in itertools.product(range(4), [(a, b) for a in (0, 1) for b in range(6)]):
        w2, x2 = w.copy(), x.copy()
        w2[i], x2[i] = nw, nx
        moved = np.abs(level_counts(_cells(w2, x2), LAYOUT, bands, 3) - base).sum()
        assert moved <= 4


def test_noise_scale_is_2p_over_epsilon_rounded_up():
    assert balance_scale(LAYOUT, Fraction(1, 10)) == 40.0
    assert balance_scale(LAYOUT, Fraction(1, 3)) >= 12.0
    assert Fraction(balance_scale(LAYOUT, Fraction(1, 3))) >= Fraction(12)
    plan = plan_balance(_cells(np.array([0, 1]), np.array([0, 1])), LAYOUT, "1/3")
    assert plan.scale == balance_scale(LAYOUT, Fraction(1, 3)) and plan.epsilon == Fraction(1, 3)
    with pytest.raises(ValueError, match="must be positive"):
        plan_balance(_cells(np.array([0, 1]), np.array([0, 1])), LAYOUT, 0)


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, LAYOUT.domain_size, n)
    age_bin = x % 2
    w = (rng.random(n) < np.where(age_bin == 1, 0.7, 0.3)).astype(np.int64)  # older: treated
    return w, x


def _direct_smd(v_t: np.ndarray, v_c: np.ndarray, indicator: bool) -> float:
    m_t, m_c = v_t.mean(), v_c.mean()
    s_t = m_t * (1 - m_t) if indicator else v_t.var()
    s_c = m_c * (1 - m_c) if indicator else v_c.var()
    return (m_t - m_c) / math.sqrt((s_t + s_c) / 2)


def test_table_without_noise_is_the_records_standardized_mean_differences():
    w, x = _data(5000, 1)
    exact = level_counts(_cells(w, x), LAYOUT).astype(float)
    table = balance_table(exact, LAYOUT, 1.0, 1, within="by construction")
    rows = {(r.covariate, r.level): r for r in table.rows}
    sex, age = x // 2, np.array([5.0, 15.0])[x % 2]
    for lev, label in enumerate(("a", "b", "c")):
        ind = (sex == lev).astype(float)
        want = _direct_smd(ind[w == 1], ind[w == 0], indicator=True)
        assert rows[("sex_site", label)].smd_before == pytest.approx(want, rel=1e-12)
        assert rows[("sex_site", label)].smd_within == 0.0  # strata fix every covariate
    want = _direct_smd(age[w == 1], age[w == 0], indicator=False)
    assert rows[("age", None)].smd_before == pytest.approx(want, rel=1e-12)
    assert rows[("age", None)].mean_treated == pytest.approx(age[w == 1].mean())
    assert abs(rows[("age", None)].smd_before) > 0.5  # the simulated imbalance shows


def test_within_bands_is_the_weighted_within_band_difference():
    w, x = _data(4000, 2)
    bands = np.array([0, 1, 0, 1, 0, 1])  # band = the age bin: balances age exactly
    exact = level_counts(_cells(w, x), LAYOUT, bands, 2).astype(float)
    table = balance_table(exact, LAYOUT, 1.0, 1, n_bands=2, within="released")
    age = {r.covariate: r for r in table.rows}["age"]
    assert age.smd_within == pytest.approx(0.0, abs=1e-12)
    assert abs(age.smd_before) > 0.5


def test_one_draw_is_close_at_a_large_site_and_never_undefined_as_nan():
    w, x = _data(100_000, 4)
    noisy = dp_balance(_cells(w, x), LAYOUT, 1, rng=np.random.default_rng(0))
    exact = balance_table(level_counts(_cells(w, x), LAYOUT).astype(float), LAYOUT, 1.0, 1)
    for got, want in zip(noisy.rows, exact.rows, strict=True):
        assert got.smd_before == pytest.approx(want.smd_before, abs=0.01)
    doc = noisy.as_dict()
    assert doc["epsilon"] == "1" and doc["noise_scale"] == 4.0 and doc["within"] == "none"
    assert all(r["smd_within"] is None for r in doc["rows"])
    empty = dp_balance(np.zeros(12, dtype=int), LAYOUT, 1000, rng=np.random.default_rng(0))
    for r in empty.as_dict()["rows"]:  # counts clipped at 0: undefined means are null
        for k in ("mean_treated", "mean_control", "smd_before"):
            assert r[k] is None or math.isfinite(r[k])


def test_records_path_is_the_cell_path_for_strata():
    """From records (each covariate's level per record, a band per record), the query is the
    one from the per-cell counts when the levels and bands are those of the strata."""
    from dpate_core.balance import record_counts

    w, x = _data(400, 11)
    bands = np.array([0, 1, 0, 1, 2, 2])
    levels = [x // 2, x % 2]
    np.testing.assert_array_equal(
        record_counts(w, levels, LAYOUT, bands[x], 3), level_counts(_cells(w, x), LAYOUT, bands, 3)
    )
    np.testing.assert_array_equal(
        record_counts(w, levels, LAYOUT), level_counts(_cells(w, x), LAYOUT)
    )


def test_records_path_with_value_dependent_bands_is_still_2p():
    """A record's band a public function of its numeric value (a released model's band), the
    value read in public bins: every replacement of every record of small data sets moves the
    query by at most 2 p, and some by exactly 2 p."""
    from dpate_core.balance import bin_levels, record_counts

    layout = BalanceLayout(
        names=("grp", "score"), labels=(("a", "b"), tuple("0123")), values=(None, (1, 3, 5, 7))
    )
    band_of = lambda g, v: np.searchsorted([2.5, 5.0], v + 1.5 * g)  # noqa: E731
    candidates = [(a, g, v) for a in (0, 1) for g in (0, 1) for v in (0.0, 2.4, 3.9, 6.1, 8.0)]
    rng = np.random.default_rng(2)
    worst = 0
    for _ in range(15):
        n = int(rng.integers(1, 5))
        data = np.array([candidates[i] for i in rng.integers(0, len(candidates), n)])

        def query(d: np.ndarray) -> np.ndarray:
            w, g, v = d[:, 0].astype(int), d[:, 1].astype(int), d[:, 2]
            levels = [g, bin_levels(v, 0.0, 8.0, 4)]
            return record_counts(w, levels, layout, band_of(g, v), 3)

        base = query(data)
        for i, new in itertools.product(range(n), candidates):
            moved = data.copy()
            moved[i] = new
            worst = max(worst, int(np.abs(query(moved) - base).sum()))
    assert worst == balance_sensitivity(layout) == 4


def test_bounded_bins_read_every_value_in_one_bin():
    from dpate_core.balance import NUMERIC_BALANCE_BINS, bin_levels, bounded_bins

    edges = bounded_bins(18, 95)
    assert len(edges) == NUMERIC_BALANCE_BINS + 1 and edges[0] == 18 and edges[-1] == 95
    v = np.array([-5.0, 18.0, 25.69, 25.7, 56.0, 94.99, 95.0, 300.0])
    got = bin_levels(v, 18, 95)
    assert got.tolist() == [0, 0, 0, 1, 4, 9, 9, 9]
    inside = (v >= 18) & (v <= 95)
    lo, hi = np.asarray(edges)[got], np.asarray(edges)[got + 1]
    assert np.all((lo[inside] <= v[inside]) & (v[inside] <= hi[inside]))
