"""The band cells' squares as sums of the used cells' (``adjusted._squares_sums``, stop 51): one
for both arms below ``N x epsilon`` 1,500 (one within-cell variance for both), each arm's from
it. The queries' sensitivity on neighbours, their reading without noise, the common variance's
noise against its spread, the public rule, and OpenDP's map of each site."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms._weighted_query import QUERY_BITS, query_units
from dpate_core.mechanisms.adjusted import (
    ARM_SQUARES,
    COMMON_SQUARES,
    histogram_vectors,
    plan_constants,
    used_strata,
)
from dpate_core.mechanisms.adjusted._squares_sums import query_variance, variance_noise
from dpate_core.mechanisms.adjusted._weightings import _used_cells
from dpate_core.mechanisms.propensity import (
    COMMON_VARIANCE_BELOW,
    Categorical,
    Numeric,
    is_common_variance,
    model_fit,
    plan_propensity,
    record_bands,
    split_covariates,
    squares_mode,
)
from dpate_core.release import draw_many, draw_once, noise_free

COLUMNS = (Categorical(4), Categorical(3), Numeric(0.0, 10.0))


def _data(
    rng: np.random.Generator, n: int, sd: tuple[float, float] = (0.1, 0.1)
) -> tuple[np.ndarray, ...]:
    """Three covariates, a mild propensity, a continuous outcome whose within-cell sd is ``sd``
    (controls, treated)."""
    z1, z2, z3 = rng.integers(0, 4, n), rng.integers(0, 3, n), rng.uniform(0, 10, n)
    p = 1 / (1 + np.exp(-0.5 * (-1 + 0.5 * z1 - 0.4 * z2 + 0.2 * z3)))
    w = (rng.uniform(size=n) < p).astype(np.int8)
    noise = rng.normal(0, 1, n) * np.where(w == 1, sd[1], sd[0])
    y = np.clip(0.4 + 0.02 * z1 + 0.01 * z3 + 0.1 * w + noise, 0, 1)
    return w, y, np.column_stack([z1, z2, z3]).astype(float)


def _names(plan) -> list[list[str]]:
    return [[s.name for s in plan.noise]] + [[s.name for s in st.sites] for st in plan.stages]


def test_the_public_rule_and_the_sites() -> None:
    # below N x epsilon 1,500 the squares are one sum in a stage after the histogram; from it
    # their vector beside the histogram; a binary outcome has no squares either way
    w, y, z = _data(np.random.default_rng(1), 600)
    for eps, common in (
        (1, True),
        (Fraction(5, 2) - Fraction(1, 600), True),
        (Fraction(5, 2), False),  # N x epsilon 1,500 exactly
    ):
        assert is_common_variance(600, eps) is common
        plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=eps)
        sums = COMMON_SQUARES if common else ARM_SQUARES
        assert _names(plan) == [["model"], ["histogram"], [sums]]
        assert squares_mode(600, eps) == ("common" if common else "arms")
        c = plan_constants(plan)
        assert (c.common_scale is not None) is common and (c.arm_scale is not None) is not common
    assert not is_common_variance(600, 1, binary=True) and squares_mode(600, 1, True) is None
    yb = (y > 0.5).astype(float)
    plan = plan_propensity(w, yb, z, COLUMNS, bound=1.0, epsilon=1, binary=True)
    assert _names(plan) == [["model"], ["histogram"]]
    assert COMMON_VARIANCE_BELOW == 1500


@pytest.mark.parametrize(
    ("epsilon", "site", "entries"), [(1, COMMON_SQUARES, 1), (2, ARM_SQUARES, 2)]
)
def test_the_query_moves_by_at_most_its_sensitivity_on_neighbours(epsilon, site, entries) -> None:
    """With the model and the histogram held fixed, one record moved to every band the model
    gives, either arm, its outcome at either end of the bound or at its middle: the private
    values (grid units) move by at most the public sensitivity, ``B^2/4`` for the one sum and
    ``B^2/2`` in L1 for the pair, and the worst pair of neighbours comes within 1% of it (a term
    at 0 in a used cell against one at ``B^2/4``; for the pair, in the other arm's)."""
    n = 800
    w, y, z = _data(np.random.default_rng(5), n)
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=epsilon)
    noisy = draw_once(plan, np.random.default_rng(1))  # simulation noise for the earlier stages
    fixed = {k: v for k, v in noisy.items() if k != site}
    fitted = model_fit(n, COLUMNS, Fraction(epsilon), plan.shares.shares, 5)
    band = record_bands(*fitted(np.asarray(fixed["model"])), split_covariates(z, COLUMNS))
    cells = [(z[np.flatnonzero(band == b)[0]], arm, end)
             for b in np.unique(band) for arm in (0, 1) for end in (0.0, 0.5, 1.0)]  # fmt: skip
    assert len(cells) >= 12

    def value(cell: tuple[np.ndarray, int, float]) -> np.ndarray:
        w2, y2, z2 = w.copy(), y.copy(), z.copy()
        z2[0], w2[0], y2[0] = cell
        other = plan_propensity(w2, y2, z2, COLUMNS, bound=1.0, epsilon=epsilon)
        return np.asarray(other.stages[1].locs(fixed)[site], dtype=np.float64)

    values = np.array([value(cell) for cell in cells])
    assert values.shape == (len(cells), entries)
    worst = float(np.max(np.abs(values[:, None, :] - values[None, :, :]).sum(axis=-1)))
    assert worst <= entries * query_units(n, 10)
    assert worst >= 0.99 * entries * (1 << QUERY_BITS)


@pytest.mark.parametrize("epsilon", [1, 2])
def test_without_noise_each_arm_reads_the_variance_of_its_sums(epsilon) -> None:
    """Noise-free, on arms that spread differently (sd 0.08 and 0.16): below ``N x epsilon``
    1,500 both arms read the within-cell variance pooled over both arms' used band cells (their
    squared deviations from each cell's mean over ``sum (n - 1)``), from it each arm its own;
    computed here from the records and the bands the model puts them in."""
    n = 1000
    w, y, z = _data(np.random.default_rng(7), n, sd=(0.08, 0.16))
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=epsilon)
    c = plan_constants(plan)
    v = noise_free(plan)
    u = _used_cells(c, histogram_vectors(c, v))
    fitted = model_fit(n, COLUMNS, Fraction(epsilon), plan.shares.shares, 5)
    band = record_bands(*fitted(np.asarray(v["model"])), split_covariates(z, COLUMNS))
    used = np.flatnonzero(used_strata(c, np.clip(histogram_vectors(c, v)["counts"], 0, n)))
    assert used.size >= 2
    dev, df = np.zeros(2), np.zeros(2)
    for b in used:
        for arm in (0, 1):
            cell = y[(band == b) & (w == arm)]
            dev[arm] += float(np.sum((cell - cell.mean()) ** 2))
            df[arm] += cell.size - 1
    assert dev[0] / df[0] < 0.5 * dev[1] / df[1]  # the arms do spread differently
    want = [dev.sum() / df.sum()] * 2 if epsilon == 1 else list(dev / df)  # control, treated
    for arm, (q, s, nn) in enumerate(((u.q_c, u.s_c, u.nc), (u.q_t, u.s_t, u.nt))):
        dev_arm = np.sum(np.where(u.usable, q - s * s / nn, 0.0))
        got = dev_arm / np.sum(np.where(u.usable, nn - 1, 0))
        assert got == pytest.approx(want[arm], rel=2e-3)  # the grid's rounding of the squares


def test_the_reported_noise_of_the_common_variance_matches_its_spread() -> None:
    """Over fresh draws of the histogram and the query given one model (here its noise-free
    vector: the bands fixed), the common variance's spread is the variance the release reads
    for it (``variance_noise`` less its sampling term, which these draws do not have: the query's
    noise, and the sums' and counts' through ``s^2 / n``), within 10%; and it is a small part
    of what each arm's own variance from the squares' vector spreads by at the same budget."""
    n = 1000
    w, y, z = _data(np.random.default_rng(3), n)
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=1)
    c = plan_constants(plan)
    (model,) = plan.noise
    held = dataclasses.replace(plan, noise=(dataclasses.replace(model, scale=1e-300),))
    u = _used_cells(c, histogram_vectors(c, draw_many(held, np.random.default_rng(4), 4000)))
    mask = u.usable[0]
    keep = np.all(u.usable == mask, axis=-1)  # the draws that use the same bands
    assert keep.mean() > 0.9 and mask.sum() >= 2
    sigma2 = (np.sum(np.where(u.usable, u.q_t - u.s_t**2 / u.nt, 0.0), axis=-1)
              / np.sum(np.where(u.usable, u.nt - 1, 0.0), axis=-1))[keep]  # fmt: skip
    means = (np.clip(u.m_t, -c.half_b, c.half_b)[keep], np.clip(u.m_c, -c.half_b, c.half_b)[keep])
    arms = ((u.nt[keep], means[0]), (u.nc[keep], means[1]))
    _, reported = variance_noise(c, u.usable[keep], arms, np.zeros((int(keep.sum()), 1)))
    assert float(np.var(sigma2)) == pytest.approx(float(np.mean(reported)), rel=0.1)
    # the query's noise in the common variance against the squares' vector's in the treated
    # arm's own variance at the same part: a quarter for the sensitivity, 1 / k for the sum,
    # both arms' degrees of freedom
    eps_q = float(plan.shares.apply(plan.total)[2].epsilon)
    v_q = 2.0 * (1.0 / (2.0 * eps_q)) ** 2  # one noisy cell's squares at B = 1
    df_t, df_c = (float(np.sum(np.where(mask, nn[keep][0] - 1.0, 0.0))) for nn in (u.nt, u.nc))
    assert query_variance(c) / (df_t + df_c) ** 2 < 0.1 * v_q * int(mask.sum()) / df_t**2


@pytest.mark.parametrize(("epsilon", "entries"), [(Fraction(7, 10), 1), (Fraction(7, 2), 2)])
def test_opendp_own_privacy_map_agrees_with_the_squares_part(epsilon, entries) -> None:
    # an independent check of the accounting: OpenDP's vector Laplace measurement at the site's
    # scale (grid units) maps its L1 sensitivity (B^2/4 on the grid with the float margin, for
    # each entry a record can move) to the squares' part of epsilon
    from dpate_core.noise import _samplers as noise

    dp, _ = noise._opendp()
    w, y, z = _data(np.random.default_rng(2), 500)
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=epsilon)
    (site,) = plan.stages[1].sites
    assert np.shape(site.loc) == (entries,)
    part = plan.shares.apply(plan.total)[2]
    measurement = dp.m.make_laplace(*noise._opendp_vector(), scale=site.scale)
    spent = measurement.map(float(entries * query_units(500, 10)))
    assert spent <= math.nextafter(float(part.epsilon), math.inf)  # OpenDP rounds its map up
    assert spent == pytest.approx(float(part.epsilon), rel=1e-12)
