"""The adjusted release's variance against what it estimates (docs/explanation/adjusted.md, "Variances"):
each weighting's sampling part is its estimate's spread when the patients are drawn again (the
cell statistics of bootstrap samples, fed to the release's own post-processing at a budget so
large that the noise is nil), its noise part the spread of its releases on fixed data, and
subclassification's estimate the average over the strata it reads."""

from __future__ import annotations

import numpy as np
import pytest

from dpate_core.mechanisms.adjusted import (
    INTERVAL_Z,
    histogram_vectors,
    plan_adjusted_from_statistics,
    plan_constants,
    plan_weighting,
)
from dpate_core.release import draw_many
from dpate_core.statistics import cell_statistics, histogram_cells
from dpate_core.synth import synth

B = 1.0
NIL = 10**6  # an epsilon at which the noise is nothing next to the sampling error


def _design(n: int, k: int, seed: int = 1):
    """Strata of unequal sizes, treatment more likely in the later ones, and an effect that
    varies between strata (-0.3 to 0.3): the estimate moves when the strata's arm sizes are
    drawn again."""
    rng = np.random.default_rng(seed)
    share = np.linspace(1.0, 3.0, k)
    x = rng.choice(k, n, p=share / share.sum())
    w = (rng.random(n) < 0.2 + 0.6 * x / (k - 1)).astype(np.int64)
    effect = -0.3 + 0.6 * x / (k - 1)
    y = np.clip(0.3 + 0.2 * x / (k - 1) + effect * w + rng.normal(0.0, 0.1, n), 0.0, B)
    return w, y, x


def _bootstrap(w, y, x, k, plan, reps, seed):
    """The release's post-processing of the exact cell statistics of ``reps`` bootstrap samples."""
    n, cells = w.size, 2 * k
    g, z = 2 * x + w, y - B / 2
    idx = np.random.default_rng(seed).integers(0, n, (reps, n))
    flat = (g[idx] + cells * np.arange(reps)[:, None]).ravel()
    size = reps * cells
    stats = {
        "counts": np.bincount(flat, minlength=size).reshape(reps, cells).astype(np.float64),
        "sums": np.bincount(flat, weights=z[idx].ravel(), minlength=size).reshape(reps, cells),
        "squares": np.bincount(flat, weights=(z * z)[idx].ravel(), minlength=size).reshape(
            reps, cells
        ),
    }
    return plan.assemble(stats)


def _plan(w, y, x, k, eps, weighting):
    stats = cell_statistics(w, y, x, domain_size=k, bound=B)
    return plan_adjusted_from_statistics(stats, epsilon=eps, weighting=weighting)


def _sampling(out):
    d = out.diagnostics
    return out.variance - d["noise_variance"] - d["unestimated_variance"]


@pytest.mark.parametrize("weighting", ["fixed_effects", "subclassification"])
def test_sampling_part_is_the_spread_over_new_samples(weighting):
    # the conditional (within-cell) variance alone reported 0.34 (fixed effects) and 0.61
    # (subclassification) of this spread: the stratum effects differ, and a new sample's arm
    # sizes weigh them differently
    w, y, x = _design(2000, 20)
    out = _bootstrap(w, y, x, 20, _plan(w, y, x, 20, NIL, weighting), 4000, 2)
    ratio = float(np.mean(_sampling(out)) / np.var(out.tau))
    assert 0.9 < ratio < 1.1, ratio


#: Synth's five covariates (dpate_core.synth.synth_strata): 384 strata
SPARSE_STRATA = 384


def _stacked(samples, k):
    """The exact cell statistics of several samples ``(w, y, x)`` of one size over ``k``
    strata, stacked (as :func:`_bootstrap`'s) for one call of a plan's post-processing."""
    z = [_exact(w, y, x, k) for w, y, x in samples]
    return {key: np.stack([s[key] for s in z]) for key in z[0]}


def test_fixed_effects_sampling_part_matches_fresh_samples_on_sparse_strata():
    # Synth with five covariates at 600 patients: 384 strata, most holding one or two patients
    # of an arm. The released sampling part is about the variance of the estimate over fresh
    # samples of the population (0.98 over 4,000 samples, bench/bench_adjusted_sampling.py;
    # these 2,000 read 0.88, blocks of 1,000 0.83-0.99); a bootstrap of one sample overstates
    # it by a half to two thirds: resampling duplicates or drops the single patient of a cell
    # (docs/explanation/adjusted.md, "The sampling part against repeated sampling")
    from dpate_core.synth import synth_strata

    fresh = [synth_strata(600, seed=900 + i) for i in range(2000)]
    first = fresh[0]
    plan = _plan(first.w, first.y, first.x, SPARSE_STRATA, NIL, "fixed_effects")
    out = plan.assemble(_stacked([(s.w, s.y, s.x) for s in fresh], SPARSE_STRATA))
    truth = float(np.var(out.tau))
    ratio = float(np.mean(_sampling(out))) / truth
    assert 0.8 < ratio < 1.1, ratio
    boot = [
        float(np.var(_bootstrap(s.w, s.y, s.x, SPARSE_STRATA, plan, 400, i).tau))
        for i, s in enumerate(fresh[:3])
    ]
    assert np.mean(boot) / truth > 1.3, np.mean(boot) / truth


def test_fixed_effects_sampling_part_is_the_sum_of_squared_influences():
    # the polynomial of the cell statistics is the record-level sandwich: each treated record's
    # influence n_c (y - ybar_c - tau), each control's n_t (ybar_t - y - tau), summed squared over
    # D^2, less D (s_t^2 + s_c^2) / D^2 with each arm's pooled within-cell variance
    k = 6
    w, y, x = _design(300, k, seed=4)
    out = _plan(w, y, x, k, NIL, "fixed_effects").assemble(_exact(w, y, x, k))
    n_t = np.bincount(x[w == 1], minlength=k).astype(float)
    n_c = np.bincount(x[w == 0], minlength=k).astype(float)
    mean_t = np.bincount(x[w == 1], weights=y[w == 1], minlength=k) / n_t
    mean_c = np.bincount(x[w == 0], weights=y[w == 0], minlength=k) / n_c
    d = float(np.sum(n_t * n_c))
    tau = float(np.sum(n_t * n_c * (mean_t - mean_c)) / d)
    h = np.where(w == 1, n_c[x] * (y - mean_c[x] - tau), n_t[x] * (mean_t[x] - y - tau))
    # each arm's within-cell variance pooled over its k cells: sum of squares over n - k
    within = [
        float(
            np.sum((y[w == a] - (mean_t if a else mean_c)[x[w == a]]) ** 2) / (np.sum(w == a) - k)
        )
        for a in (1, 0)
    ]
    expected = float(np.sum(h * h)) / d**2 - sum(within) / d
    assert out.tau == pytest.approx(tau, rel=1e-6)
    assert out.diagnostics["sampling_variance_dp"] == pytest.approx(expected, rel=1e-5)


def _exact(w, y, x, k):
    g, z = 2 * x + w, y - B / 2
    return {
        "counts": np.bincount(g, minlength=2 * k).astype(np.float64),
        "sums": np.bincount(g, weights=z, minlength=2 * k),
        "squares": np.bincount(g, weights=z * z, minlength=2 * k),
    }


def test_fixed_effects_noise_part_is_given_the_noisy_denominator():
    # 400 records in 16 strata at eps 1: the noisy denominator is a few of its sds; the variance
    # of the error given it is V_N / D_hat^2, and multiplying that by the spread of 1 / D_hat^2
    # over other draws (1 + 3 Var(D) / D^2, as it did) counted that spread twice: 1.45 times the
    # releases' actual spread
    w, y, x = _design(400, 16)
    plan = _plan(w, y, x, 16, 1, "fixed_effects")
    out = plan.assemble(draw_many(plan, np.random.default_rng(3), 20_000))
    ok = np.isfinite(out.tau)
    assert ok.mean() > 0.9
    ratio = float(np.mean(out.diagnostics["noise_variance"][ok]) / np.var(out.tau[ok]))
    assert 0.9 < ratio < 1.2, ratio


def test_fixed_effects_barely_resolved_releases_cover():
    # Synth, 1,000 records in 100 strata at eps 1/4 (effect 0.5): the denominator D = sum n_t
    # n_c is below one of its noise sds, so the 3% of releases whose noisy D passes 2 sds are
    # those whose noise pushed it up, and A / D_hat is pulled towards 0 (mean 0.06). The delta
    # method divides by that D_hat^2 and its intervals (clipped to [-B, B]) covered 0.36; the
    # public design predicts 4% resolved (below FIELLER_BELOW), so the release stretches them
    # to Fieller's length: 0.84
    from dpate_core.mechanisms.adjusted import FIELLER_BELOW, design_resolution
    from dpate_core.synth import synth

    d = synth(1000, 100, a=0.0, b=0.2, seed=7)
    w, y, x = d.w.astype(np.int64), d.y, d.x
    plan = _plan(w, y, x, 100, "1/4", "fixed_effects")
    out = plan.assemble(draw_many(plan, np.random.default_rng(4), 40_000))
    ok = np.isfinite(out.tau)
    assert 0.01 < ok.mean() < 0.15
    exact = _plan(w, y, x, 100, NIL, "fixed_effects").assemble(_exact(w, y, x, 100)).tau
    half = np.minimum(INTERVAL_Z * np.sqrt(out.variance[ok]), B)
    covered = float(np.mean(np.abs(out.tau[ok] - exact) <= half))
    assert covered >= 0.8, covered
    public = plan_constants(plan)
    assert design_resolution(public.n, public.n_strata, public.v_n) < FIELLER_BELOW


@pytest.mark.parametrize(
    ("n", "size", "eps"),
    [(1000, 100, "1/4"), (1000, 100, "9/10"), (3333, 100, "11/50"), (361, 192, 1),
     (240, 39, 1), (249, 128, 1), (7, 3, 1), (10_001, 384, "1/2")],
)  # fmt: skip
def test_design_resolution_is_the_plans_default_share(n, size, eps):
    # the release's switch (Fieller's length below FIELLER_BELOW) reads the share dpate plan
    # predicts under its default assumptions (half treated, every stratum filled evenly),
    # computed in closed form from N, |X| and the count noise alone
    from fractions import Fraction

    from dpate_core.mechanisms.adjusted import DEFAULT_SPLIT, AdjustedOptions, design_resolution
    from dpate_core.planning import SiteDesign, predict_site
    from dpate_core.privacy import BudgetSplit
    from dpate_core.statistics import COUNT_SENSITIVITY

    shares = BudgetSplit.of(DEFAULT_SPLIT, len(DEFAULT_SPLIT)).shares
    design = SiteDesign("s", n, Fraction(eps), Fraction(0), shares)
    predicted = predict_site(
        "adjusted", design, domain_size=size, bound=1.0,
        options=AdjustedOptions(weighting="fixed_effects"),
    ).resolved_probability  # fmt: skip
    # a count is the histogram's two bins: twice one bin's Laplace variance at 2 / eps_h
    v_n = 2.0 * 2.0 * (COUNT_SENSITIVITY / float(Fraction(eps) * shares[0])) ** 2
    assert design_resolution(n, size, v_n) == pytest.approx(predicted, rel=1e-9, abs=1e-12)


def test_fixed_effects_divides_out_the_plug_in_excess_where_nearly_every_release_resolves():
    # Synth, 1,000 records in 100 strata at eps 13/20: the design predicts 96% of releases resolve
    # (94% do). The delta method reads V(t) = Var(A_hat - t D_hat) at the noisy estimate, which
    # adds V_D (tau_hat - tau)^2, V_D the noise part's Var(D_hat); divided by 1 + Var(D_hat) /
    # D_hat^2 the released numerator (noise variance times D_hat^2) is its value at the true
    # cell statistics on average (over 1.05 times it without the division;
    # docs/explanation/adjusted.md, "The plug-in excess")
    from dpate_core.mechanisms.adjusted import _weightings

    d = synth(1000, 100, a=0.0, b=0.2, seed=7)
    plan = _plan(d.w.astype(np.int64), d.y, d.x, 100, "13/20", "fixed_effects")
    c = plan_constants(plan)
    assert _weightings.design_resolution(c.n, c.n_strata, c.v_n) >= (
        _weightings.PLUG_IN_CORRECTED_FROM
    )
    noisy = draw_many(plan, np.random.default_rng(5), 4_000)
    shipped = plan.assemble(noisy)
    with pytest.MonkeyPatch.context() as mp:  # the same release without the division
        mp.setattr(_weightings, "PLUG_IN_CORRECTED_FROM", 2.0)
        excess = plan.assemble(noisy)
    true = histogram_cells(np.asarray(plan.noise[0].value, dtype=np.float64), c.bound)
    counts, sums = true["counts"], true["sums"]
    n_c, n_t, s_c, s_t = counts[0::2], counts[1::2], sums[0::2], sums[1::2]
    tau = np.sum(s_t * n_c - s_c * n_t) / np.sum(n_t * n_c)
    v_n, v_s = c.v_n, c.v_s
    true_numerator = np.sum(
        v_n * ((s_t - tau * n_t) ** 2 + (s_c + tau * n_c) ** 2)
        + v_s * (n_t**2 + n_c**2)
        + 2 * v_s * v_n
        + tau**2 * v_n**2
    )
    noisy_counts = np.clip(histogram_vectors(c, noisy)["counts"], -c.n, c.n)
    d_hat = np.sum(noisy_counts[:, 1::2] * noisy_counts[:, 0::2], axis=1)
    ok = np.isfinite(shipped.tau)
    assert ok.mean() > 0.9
    np.testing.assert_array_equal(shipped.tau, excess.tau)

    def numerator(out):
        return float(np.mean(out.diagnostics["noise_variance"][ok] * d_hat[ok] ** 2))

    assert 0.95 < numerator(shipped) / true_numerator < 1.03, numerator(shipped) / true_numerator
    assert numerator(excess) / true_numerator > 1.05, numerator(excess) / true_numerator


def test_fixed_effects_keeps_the_delta_method_where_the_design_resolves():
    # a design predicted to resolve in most releases publishes the delta method's variance
    # (divided by its plug-in excess): the same release with the switch forced on is wider
    from dpate_core.mechanisms.adjusted import _weightings

    w, y, x = _design(400, 16)
    plan = _plan(w, y, x, 16, 1, "fixed_effects")
    noisy = draw_many(plan, np.random.default_rng(5), 2_000)
    shipped = plan.assemble(noisy)
    with pytest.MonkeyPatch.context() as mp:  # the switch forced on
        mp.setattr(_weightings, "FIELLER_BELOW", 2.0)
        stretched = plan.assemble(noisy)
    ok = np.isfinite(shipped.tau) & np.isfinite(stretched.tau)
    assert ok.mean() > 0.9
    np.testing.assert_array_equal(shipped.tau[ok], stretched.tau[ok])
    # (the shipped release's stretch for its sandwich's noise can, rarely, exceed Fieller's
    # factor: 1 release in 2,000 here)
    assert np.mean(stretched.variance[ok] >= shipped.variance[ok]) > 0.99
    assert np.mean(stretched.variance[ok] > shipped.variance[ok]) > 0.9


def test_subclassification_averages_over_the_strata_with_both_treatments():
    # a stratum holding treated patients only: Algorithm 1 counts its patients with an effect of
    # 0 (0.4 * 0.75 = 0.3 here); the release estimates the average effect over the patients of
    # the strata where both treatments occur (0.4), and says so
    n = 4000
    x = np.repeat([0, 1, 2, 3], n // 4)
    w = np.where(x == 3, 1, np.arange(n) % 2)
    y = np.clip(0.3 + 0.4 * w + 0.0 * x, 0.0, B)
    out = _plan(w, y, x, 4, NIL, "subclassification").assemble(_exact(w, y, x, 4))
    assert out.tau == pytest.approx(0.4, abs=1e-6)
    assert out.diagnostics["usable_strata"] == 3


def test_subclassification_noisy_variance_is_stretched_to_cover():
    # Synth sites of 3,333 records over 100 strata at eps 40 (subclassification): the within-cell
    # sd is 0.029, so the pooled within-cell variance read from the noisy squares is mostly
    # noise and the reported variance moved by half its mean from release to release: its
    # intervals covered 0.91-0.93 of the true 0.5. Stretched by 1 + (z^2 + 1) r^2 / 4 they
    # covered 0.977 (the clamp at 0 already adds to the estimate's mean); with the clamp's bias
    # in the stretch (stop 48) they cover 0.961
    from dpate_core.release import draw_many
    from dpate_core.synth import synth

    covered = []
    for i in range(300):
        d = synth(3333, 100, seed=1000 + i)
        stats = cell_statistics(d.w, d.y, d.x, domain_size=100, bound=B)
        plan = plan_adjusted_from_statistics(stats, epsilon=40)
        assert plan_weighting(plan) == "subclassification"
        out = plan.assemble(draw_many(plan, np.random.default_rng(i), 4))
        covered.append(np.abs(out.tau - 0.5) <= INTERVAL_Z * np.sqrt(out.variance))
    coverage = float(np.mean(covered))
    assert 0.94 <= coverage <= 0.97, coverage


def test_noisy_variance_stretch_is_the_second_order_coverage_correction():
    from statistics import NormalDist

    from dpate_core.mechanisms.adjusted._weightings import _noisy_variance_stretch

    z = INTERVAL_Z
    assert _noisy_variance_stretch(np.array(2.0), np.array(0.0)) == 1.0
    # r = 1/2: 1 + (z^2 + 1) / 16; the coverage it restores, averaged over a symmetric +-r
    stretch = float(_noisy_variance_stretch(np.array(1.0), np.array(0.25)))
    assert stretch == pytest.approx(1.0 + (z * z + 1.0) / 16.0)
    cover = [2.0 * NormalDist().cdf(z * np.sqrt(stretch * (1.0 + d))) - 1.0 for d in (-0.5, 0.5)]
    plain = [2.0 * NormalDist().cdf(z * np.sqrt(1.0 + d)) - 1.0 for d in (-0.5, 0.5)]
    assert np.mean(plain) < 0.925 and abs(np.mean(cover) - 0.95) < 0.01


def _forced_fixed_effects(d, eps):
    stats = cell_statistics(d.w, d.y, d.x, domain_size=100, bound=B)
    return plan_adjusted_from_statistics(stats, epsilon=eps, weighting="fixed_effects")


def test_fixed_effects_noisy_sandwich_is_stretched_to_cover():
    # the same Synth sites at eps 40, fixed effects forced (a study's one weighting can give a
    # large site fixed effects because a small one needs it): the sandwich reads each cell's
    # noisy squares, mostly noise next to a within-cell sd of 0.029, and its intervals covered
    # 0.896 unstretched (0.984 stretched by 1 + (z^2 + 1) r^2 / 4 with no floor on the estimate)
    covered = []
    for i in range(300):
        d = synth(3333, 100, seed=1000 + i)
        plan = _forced_fixed_effects(d, 40)
        out = plan.assemble(draw_many(plan, np.random.default_rng(i), 4))
        covered.append(np.abs(out.tau - 0.5) <= INTERVAL_Z * np.sqrt(out.variance))
    coverage = float(np.mean(covered))
    assert 0.935 <= coverage <= 0.975, coverage


@pytest.mark.parametrize("eps", [14, 40])
def test_sandwich_noise_variance_is_the_spread_of_the_sandwich(eps):
    # at fixed records the raw fixed-effects sandwich moves with the noise of its squares' query,
    # the sums and the counts it reads; the delta method at each noisy point, averaged, is that
    # spread
    from dpate_core.mechanisms.adjusted._fe_squares import SQUARES, reading
    from dpate_core.mechanisms.adjusted._weightings import (
        _fixed_effects_sampling,
        sandwich_noise_variance,
    )

    d = synth(3333, 100, seed=1000)
    plan = _forced_fixed_effects(d, eps)
    c = plan_constants(plan)
    draws = draw_many(plan, np.random.default_rng(3), 2000)
    assert SQUARES in draws and "squares" not in draws
    out = plan.assemble(draws)
    v = histogram_vectors(c, draws)
    cnt = np.clip(v["counts"], -float(c.n), float(c.n))
    s = np.clip(v["sums"], -c.n * c.half_b, c.n * c.half_b)
    part = reading(c, cnt, s, v)
    big_d = np.sum(cnt[:, 0::2] * cnt[:, 1::2], axis=-1)
    raw = _fixed_effects_sampling(c, cnt, s, part, out.tau, big_d)[0]
    predicted = np.mean(sandwich_noise_variance(c, (cnt, s, part.cells), out.tau, big_d,
                                                part.variance))  # fmt: skip
    assert 0.8 < predicted / np.var(raw) < 1.25, predicted / np.var(raw)
    # the query's noise is a small part of what the squares' vector's would be at its budget
    # (v_q sum alpha^2, the sandwich's squares part read from a noisy vector)
    vector = np.mean(c.v_q * np.sum(_alpha(c, cnt) ** 2, axis=-1))
    assert np.mean(part.variance) < 0.1 * vector


def _alpha(c, cnt):
    from dpate_core.mechanisms.adjusted._fe_squares import coefficients

    return coefficients(c, cnt)[0]


def test_noisy_variance_stretch_never_falls_as_the_estimate_rises():
    from dpate_core.mechanisms.adjusted._weightings import _noisy_variance_stretch

    total = np.linspace(0.01, 10.0, 2000)
    kappa = (INTERVAL_Z**2 + 1.0) / 4.0
    for var_total, bias in ((1.0, 0.0), (1.0, 0.3), (4.0, 1.0)):
        published = total * _noisy_variance_stretch(total, np.full_like(total, var_total), bias)
        assert np.all(np.diff(published) >= -1e-12)
        assert np.all(published >= total)
        # where the estimate is well above its noise: the second-order correction itself
        m2 = kappa * (var_total + bias * bias)
        far = total >= np.sqrt(m2)
        r2, mu = var_total / total[far] ** 2, bias / total[far]
        want = np.maximum(1.0 + kappa * (r2 + mu * mu) - mu, 1.0)
        assert published[far] == pytest.approx(total[far] * want)
