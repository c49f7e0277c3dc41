"""The propensity bands of equal overlap mass (``dpate_core/mechanisms/propensity/_band_edges.py``):
their edges against an independent reading of the overlap density, the confounding they leave,
the public switch, and what they buy a release with strong confounding."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms.propensity import (
    Categorical,
    Numeric,
    plan_parts,
    plan_propensity,
    residual_confounding_share,
)
from dpate_core.mechanisms.propensity import _bands as bands_module
from dpate_core.mechanisms.propensity import _release as propensity_release
from dpate_core.mechanisms.propensity._band_edges import (
    OVERLAP_FROM,
    band_edges,
    band_moments,
    filled_edges,
    overlap_bands,
    residual_multiple,
)
from dpate_core.mechanisms.propensity._prediction import band_counts
from dpate_core.release import draw_many

#: (means, variances, treated share) of three models' pictures: arms apart with unequal
#: spreads, a rare treated arm, arms barely apart
MODELS = [
    ((-0.6, 0.9), (0.8, 1.4), 0.3),
    ((-2.1, -0.4), (1.1, 0.9), 0.1),
    ((0.0, 0.05), (1.0, 1.0), 0.5),
]


def _grid(m: np.ndarray, v: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fine grid and the arms' weighted normal densities on it."""
    sd = np.sqrt(v)
    x = np.linspace(min(m - 12 * sd), max(m + 12 * sd), 400_001)
    f0 = (1 - share) * np.exp(-0.5 * ((x - m[0]) / sd[0]) ** 2) / sd[0]
    f1 = share * np.exp(-0.5 * ((x - m[1]) / sd[1]) ** 2) / sd[1]
    return x, f0, f1


@pytest.mark.parametrize(("means", "variances", "share"), MODELS)
@pytest.mark.parametrize("k", [2, 5, 10])
def test_the_bands_hold_equal_overlap_mass(means, variances, share, k) -> None:
    """Each band holds ``1 / K`` of ``sqrt(f_0 f_1)`` (read on a fine grid, not through the
    closed form), whatever the arms' share."""
    m, v = np.array(means), np.array(variances)
    edges = band_edges(m, v, k)
    x, f0, f1 = _grid(m, v, share)
    overlap = np.sqrt(f0 * f1)
    mass = np.bincount(np.searchsorted(edges, x), overlap, k) / overlap.sum()
    np.testing.assert_allclose(mass, 1.0 / k, atol=1e-4)
    assert np.all(np.diff(edges) > 0)


@pytest.mark.parametrize(("means", "variances", "share"), MODELS)
def test_the_residual_multiple_is_what_the_bands_leave_over_what_they_remove(
    means, variances, share
) -> None:
    """``c / (1 - c)``, ``c`` the share of the mixture's variance within the bands, against the
    same read on a fine grid."""
    m, v = np.array(means), np.array(variances)
    edges = band_edges(m, v, 5)
    x, f0, f1 = _grid(m, v, share)
    f = f0 + f1
    band = np.searchsorted(edges, x)
    p = np.bincount(band, f, 5)
    mu_b = np.bincount(band, f * x, 5) / p
    mu = (f * x).sum() / f.sum()
    c = 1 - (p * (mu_b - mu) ** 2).sum() / (f * (x - mu) ** 2).sum()
    assert residual_multiple(m, v, share, edges) == pytest.approx(c / (1 - c), rel=1e-4)


def test_arms_alike_give_equally_filled_bands_and_cochrans_share() -> None:
    """Where the model's arms are the same normal, its overlap density is the mixture itself:
    the bands are equally filled and leave Cochran's share (``c_K / (1 - c_K)`` of what they
    remove)."""
    m, v = np.array([[0.3, 0.3]]), np.array([[1.7, 1.7]])
    for k in (2, 5, 10):
        edges = band_edges(m, v, k)
        # the mixture's quantiles read linearly off a grid of about a sixtieth of an sd
        np.testing.assert_allclose(edges, filled_edges(m, v, np.array([0.2]), k), atol=1e-4)
        c = residual_confounding_share(k)
        assert residual_multiple(m, v, 0.2, edges)[0] == pytest.approx(c / (1 - c), rel=1e-6)


def test_the_tails_are_wider_where_the_arms_part() -> None:
    """Where one arm is rare (the tails) the bands hold more records than where both are
    common, so their arms' shares are less extreme: the band cells' noise in the band
    estimate, about ``sum_b 1 / e_b^2 + 1 / (1 - e_b)^2`` (``e_b`` the band's treated share),
    falls to a third to a sixth of equally filled bands' (at treated shares 0.5, 0.3 and 0.15)."""
    m, v = np.array([-0.8, 0.8]), np.array([1.0, 1.0])
    for share in (0.5, 0.3, 0.15):
        x, f0, f1 = _grid(m, v, share)
        f = f0 + f1
        records, treated = {}, {}
        for name, edges in (
            ("overlap", band_edges(m, v, 5)),
            ("equal", filled_edges(m[None], v[None], np.array([share]), 5)[0]),
        ):
            band = np.searchsorted(edges, x)
            records[name] = np.bincount(band, f, 5) / f.sum()
            treated[name] = np.bincount(band, f1, 5) / np.bincount(band, f, 5)
        np.testing.assert_allclose(records["equal"], 0.2, atol=1e-4)
        assert records["overlap"][0] > 0.25 and records["overlap"][2] < 0.15
        assert treated["overlap"][0] > 1.3 * treated["equal"][0]

        def noise(e: np.ndarray) -> float:
            return float(np.sum(1 / e**2 + 1 / (1 - e) ** 2))

        assert noise(treated["overlap"]) < 0.6 * noise(treated["equal"])
    # the plan's assumed band counts follow the same rule
    treated, control = band_counts(3000, 0.3, 0.0, 5, overlap=True)
    t_eq, c_eq = band_counts(3000, 0.3, 0.0, 5)
    assert treated.sum() + control.sum() == pytest.approx(3000)
    assert treated[0] / (treated[0] + control[0]) > t_eq[0] / (t_eq[0] + c_eq[0])
    assert treated[0] + control[0] > 1.2 * (t_eq[0] + c_eq[0])  # the rare-treated tail wider


def test_the_switch_is_public_and_exact() -> None:
    """From ``N x epsilon_model`` 400 the bands are of equal overlap mass, below it equally
    filled (and the shared sd Cochran's share): read from ``N`` and the split only."""
    assert OVERLAP_FROM == 400
    assert overlap_bands(400, 1) and not overlap_bands(399, 1)
    assert overlap_bands(1000, Fraction(2, 5)) and not overlap_bands(999, Fraction(2, 5))
    rng = np.random.default_rng(5)
    for n, split, want in ((1600, ("1/4", "29/40", "1/40"), True),
                           (1599, ("1/4", "29/40", "1/40"), False)):  # fmt: skip
        w, y, z, cols = _strong(rng, n)
        plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=split)
        model = plan_parts(plan).fit(draw_many(plan, rng, 1)["model"][0])
        assert model.overlap is want
        if not want:
            assert model.residual_multiple(model.edges(5)) == residual_confounding_share(5)


def _strong(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Five covariates (three categorical, two numeric), a propensity logit of sd about 1.6
    and an outcome moved along it: strong confounding, an effect of 0.3."""
    c1, c2, c3 = rng.integers(0, 4, n), rng.integers(0, 3, n), rng.integers(0, 2, n)
    u1, u2 = rng.uniform(0, 1, n), rng.beta(2, 2, n)
    lin = 2.0 * (-0.8 + 0.4 * c1 - 0.5 * c2 + 0.6 * c3 + 1.2 * u1 - 0.8 * u2)
    w = (rng.uniform(size=n) < 1 / (1 + np.exp(-lin))).astype(np.int8)
    base = 0.3 + 0.05 * c1 - 0.04 * c2 + 0.05 * c3 + 0.15 * u1 - 0.1 * u2
    y = np.clip(base + 0.3 * w + rng.normal(0, 0.1, n), 0, 1)
    cols = (Categorical(4), Categorical(3), Categorical(2), Numeric(0, 1), Numeric(0, 1))
    return w, y, np.column_stack([c1, c2, c3, u1, u2]).astype(float), cols


def test_overlap_bands_narrow_a_release_with_strong_confounding(monkeypatch) -> None:
    """At 2,000 records with strong confounding (half of eps 1 to the model, as ``"auto"``
    gives it there) the bands of equal overlap mass report a variance well below equally
    filled bands' on the same data and noise (measured 0.6-0.7 of it; asked: below 0.85), and
    their estimates stay as close to the truth on average: the band estimate's (the release
    reads its cells by regression on the index there since stop 54, which this leaves out)."""
    monkeypatch.setattr(propensity_release, "is_regressed", lambda n, e: False)
    rng = np.random.default_rng(21)
    w, y, z, cols = _strong(rng, 2000)
    split = ("1/2", "29/60", "1/60")

    def releases(overlap: bool) -> tuple[float, float]:
        monkeypatch.setattr(bands_module, "overlap_bands", lambda n, e: overlap)
        plan = plan_propensity(w, y, z, cols, bound=1.0, epsilon=1, split=split)
        out = plan.assemble(draw_many(plan, np.random.default_rng(3), 200))
        ok = np.isfinite(out.variance)
        return float(np.mean(out.variance[ok])), float(np.mean(out.tau[ok]))

    v_overlap, t_overlap = releases(True)
    v_equal, t_equal = releases(False)
    assert v_overlap < 0.85 * v_equal
    assert abs(t_overlap - 0.3) < abs(t_equal - 0.3) + 0.5 * math.sqrt(v_overlap)


def test_band_moments_add_up_to_each_arms_normal() -> None:
    """Each arm's band masses sum to 1 and its partial means to its mean; each band's mean
    index (partial mean over mass) lies between the band's edges."""
    m, v = np.array([[-0.4, 0.9], [0.0, 0.2]]), np.array([[1.0, 2.2], [0.5, 0.5]])
    edges = band_edges(m, v, 5)
    mass, first = band_moments(m, v, edges)
    assert mass.shape == first.shape == (2, 2, 5)
    np.testing.assert_allclose(mass.sum(axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(first.sum(axis=-1), m, atol=1e-9)
    inner = first / mass
    cuts = np.concatenate([np.full((2, 1), -np.inf), edges, np.full((2, 1), np.inf)], axis=-1)
    assert np.all(inner > cuts[:, None, :-1]) and np.all(inner < cuts[:, None, 1:])
