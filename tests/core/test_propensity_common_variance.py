"""One within-cell variance for both arms from one sum of the used band cells' squares
(``adjusted._common_squares``, the propensity release below ``N x epsilon`` 1,500; stop 51): the
query's sensitivity on neighbours, its reading without noise, its noise variance against its
spread, the public rule, and the plan reading the same constants."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms._weighted_query import QUERY_BITS, query_units
from dpate_core.mechanisms.adjusted import (
    COMMON_SQUARES,
    histogram_vectors,
    plan_constants,
    used_strata,
)
from dpate_core.mechanisms.adjusted._common_squares import query_variance, variance_noise
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
        expected = [["histogram"], [COMMON_SQUARES]] if common else [["histogram", "squares"]]
        assert _names(plan) == [["model"], *expected]
        assert (plan_constants(plan).common_scale is not None) is common
    assert not is_common_variance(600, 1, binary=True)
    yb = (y > 0.5).astype(float)
    plan = plan_propensity(w, yb, z, COLUMNS, bound=1.0, epsilon=1, binary=True)
    assert _names(plan) == [["model"], ["histogram"]]
    assert COMMON_VARIANCE_BELOW == 1500


def test_the_query_moves_by_at_most_its_sensitivity_on_neighbours() -> None:
    """With the model and the histogram held fixed, one record moved to every band the model
    gives, either arm, its outcome at either end of the bound or at its middle: the private
    value (grid units) moves by at most the public sensitivity ``B^2/4``, and the worst pair
    comes within 1% of it (a term at 0 in a used cell against one at ``B^2/4``)."""
    n = 800
    w, y, z = _data(np.random.default_rng(5), n)
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=1)
    noisy = draw_once(plan, np.random.default_rng(1))  # simulation noise for the earlier stages
    fixed = {k: v for k, v in noisy.items() if k != COMMON_SQUARES}
    fitted = model_fit(n, COLUMNS, Fraction(1), plan.shares.shares, 5)
    band = record_bands(*fitted(np.asarray(fixed["model"])), split_covariates(z, COLUMNS))
    cells = [(z[np.flatnonzero(band == b)[0]], arm, end)
             for b in np.unique(band) for arm in (0, 1) for end in (0.0, 0.5, 1.0)]  # fmt: skip
    assert len(cells) >= 12

    def value(cell: tuple[np.ndarray, int, float]) -> float:
        w2, y2, z2 = w.copy(), y.copy(), z.copy()
        z2[0], w2[0], y2[0] = cell
        other = plan_propensity(w2, y2, z2, COLUMNS, bound=1.0, epsilon=1)
        return float(other.stages[1].locs(fixed)[COMMON_SQUARES][0])

    values = [value(cell) for cell in cells]
    worst = max(values) - min(values)
    assert worst <= query_units(n, 10)
    assert worst >= 0.99 * (1 << QUERY_BITS)


def test_without_noise_it_reads_the_variance_pooled_over_both_arms() -> None:
    """Noise-free, both arms read the within-cell variance pooled over both arms' used band
    cells (their squared deviations from each cell's mean over ``sum (n - 1)``), computed here
    from the records and the bands the model puts them in."""
    n = 1000
    w, y, z = _data(np.random.default_rng(7), n, sd=(0.08, 0.16))
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=1)
    c = plan_constants(plan)
    v = noise_free(plan)
    u = _used_cells(c, histogram_vectors(c, v))
    fitted = model_fit(n, COLUMNS, Fraction(1), plan.shares.shares, 5)
    band = record_bands(*fitted(np.asarray(v["model"])), split_covariates(z, COLUMNS))
    used = np.flatnonzero(used_strata(c, np.clip(histogram_vectors(c, v)["counts"], 0, n)))
    assert used.size >= 2
    dev, df = 0.0, 0
    for b in used:
        for arm in (0, 1):
            cell = y[(band == b) & (w == arm)]
            dev += float(np.sum((cell - cell.mean()) ** 2))
            df += cell.size - 1
    pooled = dev / df
    for q, s, nn in ((u.q_t, u.s_t, u.nt), (u.q_c, u.s_c, u.nc)):
        arm = np.sum(np.where(u.usable, q - s * s / nn, 0.0)) / np.sum(
            np.where(u.usable, nn - 1, 0)
        )
        assert arm == pytest.approx(pooled, rel=2e-3)  # the grid's rounding of the squares


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


def test_opendp_own_privacy_map_agrees_with_the_squares_part() -> None:
    # an independent check of the accounting: OpenDP's Laplace measurement at the query's scale
    # (grid units) maps its sensitivity (B^2/4 on the grid, with the float margin) to the
    # squares' part of epsilon
    from dpate_core.noise import _samplers as noise

    dp, _ = noise._opendp()
    w, y, z = _data(np.random.default_rng(2), 500)
    plan = plan_propensity(w, y, z, COLUMNS, bound=1.0, epsilon=Fraction(7, 10))
    (site,) = plan.stages[1].sites
    part = plan.shares.apply(plan.total)[2]
    measurement = dp.m.make_laplace(*noise._opendp_vector(), scale=site.scale)
    spent = measurement.map(float(query_units(500, 10)))
    assert spent <= float(part.epsilon)
    assert spent == pytest.approx(float(part.epsilon), rel=1e-12)
