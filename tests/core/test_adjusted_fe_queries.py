"""The adjusted release's fixed-effects queries (a split of four parts, stop 46; the library's,
not yet a spec option): each query moves by at most its sensitivity on neighbours, the secure
draw has both stages, no noise gives the histogram's estimate, and the reported noise variance is
the realised one's, smaller than the histogram's alone."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms._weighted_query import QUERY_BITS, query_units
from dpate_core.mechanisms.adjusted import ADJUSTED, AdjustedOptions, plan_adjusted
from dpate_core.mechanisms.adjusted._fe_queries import DENOMINATOR, NUMERATOR
from dpate_core.release import draw_many, draw_once

QUERIES = ("9/20", "1/20", "3/10", "1/5")
STRATA = 24


def _data(rng: np.random.Generator, n: int, base: float = 0.3) -> tuple[np.ndarray, ...]:
    x = rng.integers(0, STRATA, n)
    w = (rng.uniform(size=n) < 0.25 + 0.5 * (x % 4) / 3).astype(np.int8)
    y = np.clip(base + 0.01 * (x % 6) + 0.2 * w + rng.normal(0, 0.1, n), 0.0, 1.0)
    return w, y, x


def _plan(w, y, x, epsilon=1, split=QUERIES):
    return plan_adjusted(
        w, y, x, bound=1.0, epsilon=epsilon, domain_size=STRATA, split=split,
        weighting="fixed_effects",
    )  # fmt: skip


def test_each_query_moves_by_at_most_its_sensitivity_on_neighbours() -> None:
    """With the histogram's draw held fixed, one record moved between every pair of (stratum,
    arm) cells, its outcome at either end of the bound in each: each query's grid value moves by
    at most its public sensitivity, and the worst pair comes within 1% of it."""
    rng = np.random.default_rng(5)
    n = 2000
    w, y, x = _data(rng, n)
    plan = _plan(w, y, x)
    noisy = draw_once(plan, np.random.default_rng(1))  # simulation noise for the histogram
    fixed = {k: v for k, v in noisy.items() if k not in (NUMERATOR, DENOMINATOR)}

    def values(stratum: int, arm: int, end: float) -> dict:
        w2, y2, x2 = w.copy(), y.copy(), x.copy()
        x2[0], w2[0], y2[0] = stratum, arm, end
        return _plan(w2, y2, x2).stages[0].locs(fixed)

    cells = [values(g, arm, end) for g in range(STRATA) for arm in (0, 1) for end in (0.0, 1.0)]
    limits = {NUMERATOR: query_units(n, 2 * STRATA), DENOMINATOR: query_units(n, STRATA)}
    for name, limit in limits.items():
        got = [float(v[name][0]) for v in cells]
        assert max(got) - min(got) <= limit
        assert max(got) - min(got) >= 0.99 * (1 << QUERY_BITS)


def test_a_secure_release_has_both_stages_and_is_plausible() -> None:
    rng = np.random.default_rng(2)
    w, y, x = _data(rng, 3000)
    plan = _plan(w, y, x)
    assert [s.name for s in plan.stages[0].sites] == [NUMERATOR, DENOMINATOR]
    noisy = draw_once(plan)  # secure noise
    assert set(noisy) == {"histogram", "squares", NUMERATOR, DENOMINATOR}
    e = plan.estimate(noisy)
    assert e.resolved and -1 <= e.tau <= 1
    assert ADJUSTED.plausible(e, AdjustedOptions("fixed_effects"), STRATA) == []
    with pytest.raises(ValueError, match="fixed_effects"):
        plan_adjusted(
            w, y, x, bound=1.0, epsilon=1, domain_size=STRATA, split=QUERIES,
            weighting="subclassification",
        )  # fmt: skip


def test_without_noise_it_is_the_histograms_estimate() -> None:
    w, y, x = _data(np.random.default_rng(4), 3000)
    taus = []
    for split in (QUERIES, None):
        plan = _plan(w, y, x, epsilon=10**8, split=split)
        taus.append(np.asarray(plan.assemble(draw_many(plan, np.random.default_rng(0), 3)).tau))
    np.testing.assert_allclose(taus[0], taus[1], atol=1e-6)


def test_the_reported_noise_is_the_realised_and_smaller_than_the_histograms() -> None:
    """One data set, 400 draws of the noise: the release's own error variance against the noise
    variance it reports (within 0.85-1.2), with and without the queries; with them smaller."""
    w, y, x = _data(np.random.default_rng(9), 3000)
    realised = {}
    for split in (QUERIES, None):
        plan = _plan(w, y, x, split=split)
        out = plan.assemble(draw_many(plan, np.random.default_rng(7), 400))
        noise = float(np.var(np.asarray(out.tau)))
        reported = float(np.nanmean(np.asarray(out.diagnostics["noise_variance"])))
        assert 0.85 <= reported / noise <= 1.2, split
        realised[split is None] = noise
    assert realised[False] < 0.75 * realised[True]


def test_the_split_decides_and_the_budget_is_exact() -> None:
    w, y, x = _data(np.random.default_rng(3), 500)
    plan = _plan(w, y, x, epsilon=Fraction(1, 2))
    assert plan.shares.shares == tuple(map(Fraction, QUERIES))
    assert sum(p.epsilon for p in plan.shares.apply(plan.total)) == Fraction(1, 2)
    assert _plan(w, y, x, split=("9/10", "1/10")).stages == ()
