"""Budget-split presets ("paper", "default"), the binary-outcome difference in means, and the
spec options that select them (registry, release, spec; docs/explanation/results.md, "Budget split
presets")."""

from __future__ import annotations

import copy
from fractions import Fraction

import numpy as np
import pytest

from dpate.schemas.spec import SpecError, StudySpec
from dpate_core.inference import site_bootstrap_interval
from dpate_core.mechanisms import ESTIMATORS, PlanInputs, estimator_of
from dpate_core.mechanisms.difference_in_means import (
    DifferenceInMeansOptions,
    plan_difference_in_means,
)
from dpate_core.mechanisms.matching import MatchingOptions
from dpate_core.privacy import BudgetSplit, to_float
from dpate_core.release import draw_many
from dpate_core.statistics import difference_in_means

THIRD = (Fraction(1, 3),) * 3
PUBLIC, PRIVATE = DifferenceInMeansOptions(True), DifferenceInMeansOptions(False)


def test_no_split_keeps_the_papers_even_split_and_presets_resolve():
    smooth = estimator_of("smooth_matching")
    assert smooth.split(None).shares == THIRD  # the paper's bytes do not change
    assert smooth.split("paper").shares == THIRD
    assert smooth.split("default").shares == (Fraction(11, 20), Fraction(3, 20), Fraction(3, 10))
    glob = estimator_of("global_matching")
    assert glob.split("default").shares == glob.split(None).shares == (Fraction(1, 2),) * 2
    adj = estimator_of("adjusted")
    assert adj.split("default") == adj.split(None)  # its searched split is already its default
    assert adj.split("paper").shares == (Fraction(1, 2),) * 2  # the histogram and the squares
    dim = estimator_of("dim")
    assert dim.split("paper", PUBLIC).shares == (Fraction(1, 2),) * 2
    with pytest.raises(ValueError, match=r"one of \['paper', 'default'\]"):
        smooth.split("best")


def test_binary_parts_in_the_registry():
    dim = ESTIMATORS["dim"]
    assert dim.part_names(PUBLIC, binary=True) == ("arm sums",)
    assert dim.part_names(PRIVATE, binary=True) == ("arm outcome histogram",)
    assert dim.n_parts(PUBLIC) == 2 and dim.n_parts(PRIVATE) == 2
    # private arms: the arms' sizes and sums are one query whatever the outcome (stop 44)
    assert dim.part_names(PRIVATE) == ("arm outcome histogram", "arm sums of squares")
    assert dim.split(None, PUBLIC, binary=True).shares == (Fraction(1),)


def test_dpate_plan_tries_no_dim_split_that_starves_the_squares():
    """A continuous outcome's variance comes from the noisy sums of squares: with a tenth or a
    fifth of the budget on them the interval under-covers at a few thousand records
    (``bench/bench_dim_split.py``: 0.898-0.921), so the splits ``dpate plan`` may recommend keep
    at least 3/10 for them, with public or private arm sizes."""
    dim = ESTIMATORS["dim"]
    for options in (PUBLIC, PRIVATE):
        tried = dim.splits_to_try(options)
        assert tried == ((Fraction(1, 2),) * 2, (Fraction(7, 10), Fraction(3, 10)))
        assert min(split[1] for split in tried) == Fraction(3, 10)


def _binary(n=4000, seed=0, bound=1.0):
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 2, n)
    y = bound * (rng.random(n) < np.where(w == 1, 0.6, 0.3))
    return w, y


def test_binary_difference_in_means_releases_only_the_sums():
    w, y = _binary()
    plan = plan_difference_in_means(w, y, bound=1.0, epsilon=1, binary=True)
    assert [s.name for s in plan.noise] == ["sum_treated", "sum_control"]
    # the whole budget on the sums: Lap(B / eps), exact and rounded up (B is 2^k grid units)
    assert plan.noise[0].value_scale == to_float(Fraction(1), round_up=True)
    assert plan.noise[0].scale == plan.noise[0].value_scale / plan.noise[0].unit


@pytest.mark.parametrize("binary", [True, False])
def test_private_arm_histogram_releases_pass_the_servers_check(binary):
    """The server's rule for a release with private arm sizes (``plausible``): its noise
    variance depends on the arm means, which are not published, so it must lie in the range the
    published ``tau`` leaves open. Every genuine release passes (binary ones were refused
    until stop 44: the rule read the arm sums' formula), and a noise variance under the least
    the public values allow is refused."""
    import dataclasses

    w, y = _binary(n=600, bound=2.0)
    if not binary:
        y = np.random.default_rng(1).uniform(0.0, 2.0, w.size)
    plan = plan_difference_in_means(
        w, y, bound=2.0, epsilon="1/2", binary=binary, arm_sizes_public=False
    )
    dim = ESTIMATORS["dim"]
    noisy = draw_many(plan, np.random.default_rng(5), 200)
    for i in range(200):
        est = plan.estimate({k: v[i] for k, v in noisy.items()})
        assert dim.plausible(est, PRIVATE, 1) == []
    low = dict(est.diagnostics, noise_variance=0.4 * est.diagnostics["noise_variance"])
    forged = dataclasses.replace(est, diagnostics=low)
    assert "is not a noise variance the mechanism can report" in " ".join(
        dim.plausible(forged, PRIVATE, 1)
    )


def test_private_arms_continuous_outcome_reports_its_realised_noise():
    """Private arm sizes, an outcome in ``[0, B]``: the ``(arm, end)`` histogram's reported noise
    variance is the realised one (within 5% over 20,000 draws), and at the default even split
    it is over 2.5 times smaller than the arm sums' noise alone at the three-part split they
    had until stop 44 (``Lap(2B / (eps / 3))`` on each arm sum, a third for the count)."""
    rng = np.random.default_rng(2)
    n = 4000
    w = rng.integers(0, 2, n)
    y = np.clip(0.8 + 0.3 * w + rng.normal(0.0, 0.4, n), 0.0, 2.0)
    plan = plan_difference_in_means(w, y, bound=2.0, epsilon=1, arm_sizes_public=False)
    assert [s.name for s in plan.noise] == ["histogram", "sumsq_treated", "sumsq_control"]
    out = plan.assemble(draw_many(plan, np.random.default_rng(3), 20_000))
    exact = difference_in_means(w, y)
    realised = float(np.mean((np.asarray(out.tau) - exact.tau) ** 2))
    assert float(np.mean(out.diagnostics["noise_variance"])) == pytest.approx(realised, rel=0.05)
    nt, nc = np.sum(w == 1), np.sum(w == 0)
    three_parts = 2 * (2 * 2.0 / (1 / 3)) ** 2 * (1 / nt**2 + 1 / nc**2)
    assert realised < three_parts / 2.5


def test_binary_difference_in_means_with_private_arms_releases_one_histogram():
    """Private arm sizes, a binary outcome: one query, the (arm, outcome) histogram at
    ``Lap(2 / eps)`` (one record in one bin), whose arm means ``E / (E + F)`` carry less noise
    than the arm sums at ``Lap(2B / eps_1)`` beside a treated count; its reported noise
    variance is the realised one, and without noise it is the exact estimate and variance."""
    w, y = _binary(bound=2.0)
    private = plan_difference_in_means(
        w, y, bound=2.0, epsilon=1, binary=True, arm_sizes_public=False
    )
    assert [s.name for s in private.noise] == ["histogram"] and private.shares == BudgetSplit.even(
        1
    )
    (site,) = private.noise
    t, c = w == 1, w == 0
    np.testing.assert_array_equal(
        site.loc, [np.sum(y[c] == 2.0), np.sum(y[t] == 2.0), np.sum(y[c] == 0), np.sum(y[t] == 0)]
    )
    assert site.scale == 2.0 and site.kind == "integer_laplace"
    out = private.assemble(draw_many(private, np.random.default_rng(3), 20_000))
    exact = difference_in_means(w, y)
    realised = float(np.mean((np.asarray(out.tau) - exact.tau) ** 2))
    reported = float(np.mean(out.diagnostics["noise_variance"]))
    assert reported == pytest.approx(realised, rel=0.05)
    # the arm sums at Lap(2B / eps_1) and the count at Lap(1 / eps_2), the even split: the
    # sums' noise alone is 2 (2B / (eps / 2))^2 (1/N_t^2 + 1/N_c^2), over four times this one's
    nt, nc = t.sum(), c.sum()
    two_queries = 2 * (2 * 2.0 / 0.5) ** 2 * (1 / nt**2 + 1 / nc**2)
    assert realised < two_queries / 4
    exact_plan = plan_difference_in_means(
        w, y, bound=2.0, epsilon=10**9, binary=True, arm_sizes_public=False
    )
    est = exact_plan.estimate({"histogram": exact_plan.noise[0].value})
    assert est.tau == pytest.approx(exact.tau, abs=1e-12)
    assert est.diagnostics["sampling_variance_dp"] == pytest.approx(exact.variance, rel=1e-12)
    assert est.diagnostics["n_treated_dp"] == pytest.approx(nt)
    assert site_bootstrap_interval(est, draws=2000).lo < est.tau
    # dpate plan predicts it at the data's own arm share, outcome mean and effect
    from dpate_core.planning import Assumptions, SiteDesign, predict_site

    a = Assumptions(arm_share=float(t.mean()), outcome_mean=float(y.mean()), effect=exact.tau)
    pred = predict_site(
        "dim", SiteDesign.of("a", w.size, 1, 0, None, 1), domain_size=1, bound=2.0,
        options=PRIVATE, assumptions=a, binary=True,
    )  # fmt: skip
    assert pred.noise_variance == pytest.approx(reported, rel=0.05)


def test_binary_variance_is_p_one_minus_p_and_matches_the_general_estimate():
    w, y = _binary(bound=2.0)
    exact = difference_in_means(w, y)
    plan = plan_difference_in_means(w, y, bound=2.0, epsilon=10**9, binary=True)
    est = plan.estimate({s.name: s.value for s in plan.noise})  # no noise: the formula itself
    assert est.tau == pytest.approx(exact.tau, abs=1e-12)
    assert est.diagnostics["sampling_variance_dp"] == pytest.approx(exact.variance, rel=1e-12)
    # at eps = 1 the binary mode's tau is less noisy (all the budget on the sums)
    general = plan_difference_in_means(w, y, bound=2.0, epsilon=1)
    binary = plan_difference_in_means(w, y, bound=2.0, epsilon=1, binary=True)
    rng = np.random.default_rng(1)
    sd_g = np.std(general.assemble(draw_many(general, rng, 4000)).tau)
    sd_b = np.std(binary.assemble(draw_many(binary, rng, 4000)).tau)
    assert sd_b < 0.6 * sd_g
    # the published fields feed the bootstrap model
    site = binary.estimate({k: float(v[0]) for k, v in draw_many(binary, rng, 1).items()})
    assert site_bootstrap_interval(site, draws=2000).lo < site.tau


def test_binary_refuses_other_values():
    w, y = _binary()
    y = y.copy()
    y[3] = 0.5
    with pytest.raises(ValueError, match="exactly 0 or B"):
        plan_difference_in_means(w, y, bound=1.0, epsilon=1, binary=True)


def test_plan_inputs_carry_binary_and_variance_mode():
    w, y = _binary()
    dim_cost = estimator_of("dim").cost(_priv())
    p = PlanInputs(w, y, np.zeros_like(w), 1, 1.0, dim_cost, None, PUBLIC)
    assert estimator_of("dim").plan(p).noise[-1].name == "sumsq_control"
    pb = PlanInputs(w, y, np.zeros_like(w), 1, 1.0, _priv(), (Fraction(1),), PUBLIC, binary=True)
    assert [s.name for s in estimator_of("dim").plan(pb).noise] == ["sum_treated", "sum_control"]
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, w.size)
    stratified = MatchingOptions(variance="stratified")
    pm = PlanInputs(w, y, x, 4, 1.0, _priv(Fraction(1, 10**5)), None, stratified)
    names = [s.name for s in estimator_of("smooth_matching").plan(pm).noise]
    assert names == ["tau", "variance_counts", "variance_sums", "variance_squares",
                     "log_smooth_sensitivity"]  # fmt: skip


def _priv(delta=Fraction(0)):
    from dpate_core.privacy import PrivacyParams

    return PrivacyParams(Fraction(1), delta)


BASE = {
    "study_id": "s",
    "design": "randomized",
    "estimator": "dim",
    "arm_sizes_public": True,
    "treatment": {"column": "w"},
    "outcome": {"column": "y", "bound": 1.0},
    "sites": [
        {"id": "a", "data": "a.csv", "epsilon": "1", "lifetime_cap": {"epsilon": "10"}},
    ],
}


def _spec(**changes):
    d = copy.deepcopy(BASE)
    for key, value in changes.items():
        target = d
        *path, last = key.split(".")
        for p in path:
            target = target[int(p)] if isinstance(target, list) else target[p]
        target[last] = value
    return StudySpec.from_dict(d)


def test_spec_presets_binary_and_variance():
    plain = _spec()
    assert "binary" not in plain.canonical_dict()["outcome"]  # old specs hash as before
    assert "variance" not in plain.canonical_dict()
    assert plain.budget_split("a").shares == (Fraction(1, 2),) * 2
    binary = _spec(**{"outcome.binary": True})
    assert binary.release_parts == 1
    assert binary.budget_split("a").shares == (Fraction(1),)
    assert binary.spec_hash != plain.spec_hash
    paper = _spec(**{"sites.0.budget_split": "paper"})
    assert paper.budget_split("a").shares == (Fraction(1, 2),) * 2
    with pytest.raises(SpecError, match="budget_split"):
        _spec(**{"sites.0.budget_split": "best"})
    with pytest.raises(SpecError, match="variance"):
        _spec(variance="stratified")
    with pytest.raises(SpecError, match=r"budget_split has 2 shares"):
        _spec(**{"outcome.binary": True, "sites.0.budget_split": ["1/2", "1/2"]})
    with pytest.raises(SpecError, match="two values"):
        _spec(**{"outcome.binary": True, "outcome.labels": {"Yes": 1, "Maybe": 0.5}})


def test_spec_matching_options():
    obs = {
        "design": "observational",
        "estimator": "smooth_matching",
        "covariates": [{"column": "x", "kind": "categorical", "levels": ["u", "v"]}],
    }
    d = copy.deepcopy(BASE)
    d.pop("arm_sizes_public")
    d.update(obs)
    d["sites"][0]["delta"] = "1e-5"
    d["sites"][0]["lifetime_cap"] = {"epsilon": "10", "delta": "1e-4"}
    spec = StudySpec.from_dict(d)
    assert spec.options == MatchingOptions("appendix")
    assert spec.budget_split("a").shares == THIRD
    d["variance"] = "stratified"
    d["sites"][0]["budget_split"] = "default"
    spec = StudySpec.from_dict(d)
    assert spec.options == MatchingOptions("stratified")
    assert spec.budget_split("a").shares == (Fraction(11, 20), Fraction(3, 20), Fraction(3, 10))
    d["outcome"]["binary"] = True
    with pytest.raises(SpecError, match=r"outcome\.binary"):
        StudySpec.from_dict(d)


@pytest.mark.parametrize("weighting", ["subclassification", "fixed_effects"])
def test_binary_adjusted_releases_one_histogram_and_equals_the_general_one_without_noise(
    weighting,
):
    """adjusted with ``binary``: one part, the (cell, outcome) histogram at the whole budget,
    Laplace ``2 / eps`` on each of its ``4 |X|`` bins; the counts, sums and squares read from it
    are the records' own, so without noise the estimate and its variance are the general
    release's; any other outcome value is refused."""
    from dpate_core.mechanisms.adjusted import ADJUSTED, DEFAULT_SPLIT_BINARY, plan_adjusted

    assert ADJUSTED.binary_outcome
    assert ADJUSTED.part_names(None, binary=True) == ("cell outcome histogram",)
    assert ADJUSTED.split(None, None, binary=True).shares == (Fraction(1),)
    assert DEFAULT_SPLIT_BINARY == ("1",)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 6, 3000)
    w = (rng.random(3000) < 0.3 + 0.06 * x).astype(np.int8)
    y = (rng.random(3000) < 0.2 + 0.05 * x + 0.1 * w).astype(np.float64)
    kw = dict(bound=1.0, domain_size=6, weighting=weighting)
    plan = plan_adjusted(w, y, x, epsilon=1, binary=True, **kw)
    assert [s.name for s in plan.noise] == ["histogram"]
    (site,) = plan.noise
    assert site.scale == 2 and site.kind == "integer_laplace" and np.size(site.loc) == 4 * 6
    events = np.bincount(2 * x + w, weights=y, minlength=12)
    others = np.bincount(2 * x + w, weights=1 - y, minlength=12)
    np.testing.assert_array_equal(site.loc, np.concatenate([events, others]))
    assert sum(p.epsilon for p in plan.shares.apply(plan.total)) == 1
    est = plan.estimate({k: v[0] for k, v in draw_many(plan, rng, 1).items()})
    assert est.resolved and ADJUSTED.plausible(est, None, 6) == []
    big = 10**9
    general = plan_adjusted(w, y, x, epsilon=big, **kw)
    binary = plan_adjusted(w, y, x, epsilon=big, binary=True, **kw)
    a = general.assemble(draw_many(general, np.random.default_rng(4), 3))
    b = binary.assemble(draw_many(binary, np.random.default_rng(4), 3))
    np.testing.assert_allclose(b.tau, a.tau, rtol=1e-9)
    np.testing.assert_allclose(b.variance, a.variance, rtol=1e-6)
    with pytest.raises(ValueError, match="exactly 0 or B"):
        plan_adjusted(w, y * 0.5, x, epsilon=1, binary=True, **kw)


def test_a_binary_outcomes_histogram_has_sensitivity_two_and_exact_bins() -> None:
    """Replace one record (its treatment, outcome and stratum all free): the (cell, outcome)
    histogram moves by at most 2 in L1, the sensitivity its noise is scaled to; its bins are the
    records' own counts of events and non-events per cell, read exactly from the grid sums."""
    from dpate_core.statistics import cell_statistics, outcome_histogram

    rng = np.random.default_rng(11)
    n, size = 300, 5
    w, x = rng.integers(0, 2, n), rng.integers(0, size, n)
    y = rng.integers(0, 2, n) * 4.0  # B = 4
    base = outcome_histogram(cell_statistics(w, y, x, domain_size=size, bound=4.0))
    events = np.bincount(2 * x + w, weights=y / 4.0, minlength=2 * size)
    np.testing.assert_array_equal(
        base, np.concatenate([events, np.bincount(2 * x + w, minlength=2 * size) - events])
    )
    moved = []
    for i in range(n):  # every record, replaced by a fresh draw of all three values
        w2, y2, x2 = w.copy(), y.copy(), x.copy()
        w2[i], y2[i], x2[i] = rng.integers(0, 2), rng.integers(0, 2) * 4.0, rng.integers(0, size)
        h = outcome_histogram(cell_statistics(w2, y2, x2, domain_size=size, bound=4.0))
        moved.append(int(np.abs(h - base).sum()))
    assert max(moved) == 2 and set(moved) <= {0, 2}
    with pytest.raises(ValueError, match="0 or B"):
        outcome_histogram(cell_statistics(w, y * 0.5 + 1.0, x, domain_size=size, bound=4.0))


def test_a_binary_outcomes_cells_carry_the_noise_the_variance_reads() -> None:
    """From the histogram's noisy bins, the counts ``E + F`` and centred sums ``(B/2)(E - F)``
    carry noise of the variances the release's formulas read (``v_n = 2 scale_n^2``, ``v_s = 2
    b_s^2``, :func:`histogram_scales`) and uncorrelated, as independent count and sum noise
    would be; the count's tail (a sum of two Laplaces) is :func:`count_kept`'s."""
    from dpate_core.mechanisms.adjusted import count_kept, plan_adjusted
    from dpate_core.statistics import cell_statistics, histogram_cells, histogram_scales

    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, 800)
    w = (rng.random(800) < 0.4).astype(np.int8)
    y = (rng.random(800) < 0.3).astype(np.float64) * 2.0  # B = 2
    plan = plan_adjusted(w, y, x, bound=2.0, epsilon=Fraction(1, 2), domain_size=4, binary=True)
    (site,) = plan.noise
    cells = cell_statistics(w, y, x, domain_size=4, bound=2.0)
    noisy = histogram_cells(draw_many(plan, rng, 40_000)["histogram"], 2.0)
    e_n = noisy["counts"] - cells.counts
    e_s = noisy["sums"] - cells.sums * cells.sum_unit
    scale_n, b_s = histogram_scales(site.value_scale, 2.0)
    assert np.abs(e_n.mean(axis=0)).max() < 0.1 and np.abs(e_s.mean(axis=0)).max() < 0.1
    np.testing.assert_allclose(e_n.var(axis=0), 2 * scale_n**2, rtol=0.04)
    np.testing.assert_allclose(e_s.var(axis=0), 2 * b_s**2, rtol=0.04)
    corr = [np.corrcoef(e_n[:, j], e_s[:, j])[0, 1] for j in range(8)]
    assert max(abs(c) for c in corr) < 0.03
    # the threshold's tail: P(n + e >= m) for the two-Laplace count noise, against the draws,
    # at thresholds below, at and above the true count (the Laplace tail of the same variance
    # is off by up to 0.03 here)
    for j, count in enumerate(cells.counts[:4]):
        for d in (-12.0, -5.0, -1.0, 0.0, 2.0, 6.0, 15.0):
            seen = float(np.mean(e_n[:, j] >= d))
            kept = count_kept(np.array([float(count)]), count + d, scale_n)[0]
            assert kept == pytest.approx(seen, abs=0.008), (count, d)
