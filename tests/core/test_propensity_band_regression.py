"""The propensity release's band cells read by regression on the model's index, within and
across the bands (``dpate_core/mechanisms/propensity/_band_regression.py``; stop 54)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms.adjusted import (
    assemble_subclassification,
    histogram_vectors,
    subclassification_linearisation,
)
from dpate_core.mechanisms.propensity import (
    REGRESSION_FROM,
    REGRESSION_SHARED,
    band_positions,
    band_regression,
    correction_coefficients,
    is_regressed,
    model_share_split,
    plan_parts,
    plan_propensity,
)
from dpate_core.mechanisms.propensity._release import _per_row
from dpate_core.release import draw_many
from tests.core.test_propensity_band_edges import _strong

HALF = model_share_split("1/2")  # "auto"'s split from n x epsilon 1,500


def _fixed_model_draws(plan, rng: np.random.Generator, reps: int) -> dict:
    """``reps`` draws of the band cells' noise under one draw of the model's (the bands fixed)."""
    spec = plan.noise[0]
    row = (spec.loc + spec.scale * rng.laplace(size=np.asarray(spec.loc).size)) * spec.unit
    v = {"model": np.repeat(row[None], reps, axis=0)}
    for stage in plan.stages:
        locs = stage.locs(dict(v))
        for site in stage.sites:
            noise = rng.laplace(0.0, 1.0, (reps, np.asarray(locs[site.name]).shape[-1]))
            v[site.name] = np.asarray((locs[site.name] + site.scale * noise) * site.unit)
    return v


def _regression(plan, v: dict):
    parts = plan_parts(plan)
    c = parts.constants
    hv = histogram_vectors(c, v)
    sub = assemble_subclassification(c, hv)
    lin = subclassification_linearisation(c, hv, sub.tau)
    positions = _per_row(parts.fits, band_positions)(v["model"])
    return c, sub, lin, band_regression(lin, positions, sub.tau, c)


def test_the_switch_is_public_and_exact() -> None:
    """From the model's ``N x epsilon_model`` 750, and not beside the weighted sum (its query
    reads the band estimate's coefficients)."""
    assert REGRESSION_FROM == 750 and REGRESSION_SHARED == Fraction(1, 2)
    assert is_regressed(1500, Fraction(1, 2)) and not is_regressed(1499, Fraction(1, 2))
    assert is_regressed(1875, Fraction(2, 5)) and not is_regressed(1874, Fraction(2, 5))
    rng = np.random.default_rng(1)
    w, y, z, cols = _strong(rng, 1500)
    for split, want in ((HALF, True), (model_share_split("2/5"), False),
                        (model_share_split("1/2", weighted=True), False)):  # fmt: skip
        plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=split)
        assert plan_parts(plan).regressed is want


def test_the_estimate_is_linear_in_the_cell_means_and_its_delta_method_holds() -> None:
    """``tau_R = sum_b g_tb m_tb - g_cb m_cb`` to rounding, each arm's ``g`` summing to the
    bands' weights; under one model draw (the bands fixed) the cells' noise variance the delta
    method reads from ``g`` is the spread of ``tau_R`` over the cells' draws (within 0.8-1.25:
    a mistaken ``g`` gave a third of it), and with strong confounding it is below half the band
    estimate's."""
    rng = np.random.default_rng(3)
    w, y, z, cols = _strong(rng, 2000)
    plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=HALF)
    v = _fixed_model_draws(plan, rng, 400)
    c, sub, lin, reg = _regression(plan, v)
    used = np.asarray(lin.usable, dtype=bool)
    assert reg.regressed.all()
    g_t, g_c = reg.lin.weight, reg.lin.weight_c
    linear = np.sum(np.where(used, g_t * lin.cell_t - g_c * lin.cell_c, 0.0), axis=-1)
    np.testing.assert_allclose(linear, reg.tau, atol=1e-12)
    for g in (g_t, g_c):
        np.testing.assert_allclose(
            np.sum(np.where(used, g, 0.0), axis=-1), np.sum(lin.weight, axis=-1), rtol=1e-12
        )
    noise = float(np.mean(correction_coefficients(c, reg.lin)[1][0]))
    assert 0.8 < noise / float(np.var(reg.tau)) < 1.25
    assert float(np.var(reg.tau)) < 0.5 * float(np.var(sub.tau))


def test_strong_confounding_narrower_and_covered() -> None:
    """With strong confounding at 2,000 records (one data set, 300 releases, each its own model
    draw): the release's error is at most three quarters of the band estimate's on the same
    draws, its bias smaller, and its reported variance within 0.8-1.6 of its mean squared error
    (measured on this data set and two more: 0.28-0.42 of the MSE, bias +0.004 to +0.011
    against +0.012 to +0.023, reported / MSE 1.05-1.36, the band estimate's 0.91-1.04); its
    shared sd is half the band estimate's."""
    rng = np.random.default_rng(7)
    w, y, z, cols = _strong(rng, 2000)
    plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=HALF)
    v = draw_many(plan, rng, 300)
    out = plan.assemble(v)
    band = plan_parts(plan)._replace(regressed=False).assemble(v)
    err, err_band = np.asarray(out.tau) - 0.3, np.asarray(band.tau) - 0.3
    mse, mse_band = float(np.mean(err**2)), float(np.mean(err_band**2))
    assert mse < 0.75 * mse_band
    assert abs(float(np.mean(err))) < abs(float(np.mean(err_band)))
    assert 0.8 < float(np.mean(out.variance)) / mse < 1.6
    shared = np.asarray(out.diagnostics["shared_sd"])
    np.testing.assert_allclose(shared, 0.5 * np.asarray(band.diagnostics["shared_sd"]))


@pytest.mark.parametrize("n", [1500, 3000])
def test_fewer_than_three_usable_bands_keep_the_band_estimate(n: int) -> None:
    """A release whose noisy counts leave fewer than three usable bands is the band estimate."""
    rng = np.random.default_rng(n)
    w, y, z, cols = _strong(rng, n)
    plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=HALF)
    v = draw_many(plan, rng, 20)
    c, sub, lin, _ = _regression(plan, v)
    few = lin._replace(usable=np.asarray(lin.usable) & (np.arange(c.n_strata) < 2))
    positions = _per_row(plan_parts(plan).fits, band_positions)(v["model"])
    kept = band_regression(few, positions, sub.tau, c)
    assert not kept.regressed.any()
    np.testing.assert_array_equal(kept.tau, sub.tau)
    # its linearisation is the band estimate's: both arms weighted by the bands' weights
    np.testing.assert_array_equal(kept.lin.weight, few.weight)
    np.testing.assert_array_equal(kept.lin.weight_c, few.weight)
    np.testing.assert_array_equal(kept.lin.d_nt, few.d_nt)
