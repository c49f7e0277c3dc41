"""The adjusted release's fixed-effects queries (a split of four parts, stop 46, their
coefficients capped since stop 47; ``weighted_sum = true``): each query moves by at
most its sensitivity on neighbours, the secure draw has both stages, no noise gives the
histogram's estimate, the reported noise variance is the realised one's, smaller than the
histogram's alone, the caps are the best and not set by the largest stratum, and ``dpate
plan`` predicts the release's width."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpate_core.mechanisms._estimator import StudySite
from dpate_core.mechanisms._weighted_query import QUERY_BITS, query_units
from dpate_core.mechanisms.adjusted import (
    ADJUSTED,
    DEFAULT_SPLIT_QUERIES,
    INTERVAL_Z,
    AdjustedOptions,
    histogram_vectors,
    plan_adjusted,
    plan_constants,
)
from dpate_core.mechanisms.adjusted._fe_queries import DENOMINATOR, NUMERATOR, best_cap, caps
from dpate_core.mechanisms.adjusted._fe_squares import SQUARES
from dpate_core.mechanisms.adjusted._public import predict
from dpate_core.mechanisms.adjusted._weightings import squares_queried
from dpate_core.planning import Assumptions, PredictionInputs, SiteDesign
from dpate_core.release import draw_many, draw_once

QUERIES = DEFAULT_SPLIT_QUERIES
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


@pytest.mark.parametrize(("n", "seed", "signed"), [(2000, 1, False), (60, 2, True)])
def test_each_query_moves_by_at_most_its_sensitivity_on_neighbours(
    n: int, seed: int, signed: bool
) -> None:
    """With the histogram's draw held fixed, one record moved between every pair of (stratum,
    arm) cells, its outcome at either end of the bound in each: each query's grid value moves by
    at most its public sensitivity, and the worst pair comes within 1% of it; on well-filled
    strata the denominator's coefficients lie in ``[0, C_d]``, on sparse ones (negative noisy
    counts) in ``[-C_d, C_d]``, whose spread is twice the cap."""
    rng = np.random.default_rng(5)
    w, y, x = _data(rng, n)
    plan = _plan(w, y, x)
    noisy = draw_once(plan, np.random.default_rng(seed))  # simulation noise: the histogram
    fixed = {k: v for k, v in noisy.items() if k not in (NUMERATOR, DENOMINATOR)}
    c = plan_constants(plan)
    counts = np.clip(np.asarray(histogram_vectors(c, fixed)["counts"]), -n, n)
    assert (caps(c, counts)[2] > 0) == signed

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
    # the squares as one query too (._fe_squares) where the design is read with its stretch
    assert squares_queried(plan_constants(plan))
    assert [s.name for s in plan.stages[0].sites] == [NUMERATOR, DENOMINATOR, SQUARES]
    noisy = draw_once(plan)  # secure noise
    assert set(noisy) == {"histogram", NUMERATOR, DENOMINATOR, SQUARES}
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
    # two parts: no numerator or denominator query; the squares' one (this design is outside the
    # middle regime, squares_queried)
    two = _plan(w, y, x, split=("9/10", "1/10"))
    assert squares_queried(plan_constants(two))
    assert [s.name for st in two.stages for s in st.sites] == [SQUARES]


@pytest.mark.parametrize("signed", [True, False])
def test_the_cap_is_the_best_on_a_fine_grid(signed: bool) -> None:
    """:func:`best_cap`'s cap reaches the largest gain ``S_cn^2 / (S_cc + beta C^2)`` over a
    fine grid of caps (the gain is largest at one of the values, its candidates)."""
    rng = np.random.default_rng(6)
    values = np.concatenate([rng.normal(4, 9, 300), rng.exponential(60, 40)])
    beta = 3.0
    cap, gain = best_cap(values, beta, signed)
    grid = np.linspace(1.0, np.abs(values).max() + 1.0, 20_000)
    low = -grid[:, None] if signed else 0.0
    part = np.clip(values[None, :], low, grid[:, None])
    brute = np.sum(part * values, axis=1) ** 2 / (np.sum(part * part, axis=1) + beta * grid**2)
    assert gain == pytest.approx(brute.max(), rel=1e-3)
    assert gain >= brute.max() * (1 - 1e-9) or abs(cap - grid[np.argmax(brute)]) < 1.0


def test_the_queries_noise_is_the_caps_not_the_largest_strata() -> None:
    """One stratum holding a third of the records: the numerator's cap stays below its noisy
    counts (their excess is read from the histogram, where one cell's noise costs less than
    the query's at its count), so the query's noise is not set by them; the denominator's
    range is ``[0, C_d]`` or ``[-C_d, C_d]``."""
    rng = np.random.default_rng(8)
    w, y, x = _data(rng, 6000)
    x[:2000] = 0
    plan = _plan(w, y, x)
    c = plan_constants(plan)
    counts = np.asarray(histogram_vectors(c, draw_many(plan, rng, 50))["counts"])
    cap_a, cap_d, low_d = caps(c, counts)
    assert np.all(cap_a < counts[:, :2].max(axis=1))
    assert set(np.unique(low_d)) <= {0.0} | set(np.unique(cap_d))


@pytest.mark.parametrize(("n", "strata"), [(3000, 24), (10_000, 96)])
def test_the_plan_predicts_the_queries_width_within_25_percent(n: int, strata: int) -> None:
    """``dpate plan``'s prediction of the release with the queries (its simulated caps and
    weights) within 25% of the realised mean width, the planner stating the treated share, the
    outcome's mean and within-cell sd, the effect and the propensity's spread between strata
    (here its logit's sd, 0.55, over the records)."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, strata, n)
    logit = -0.2 + 0.9 * ((x % 5) - 2) / 1.41
    w = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    y = np.clip(0.3 + 0.02 * (x % 7) + 0.2 * w + rng.normal(0, 0.1, n), 0.0, 1.0)
    plan = plan_adjusted(
        w, y, x, bound=1.0, epsilon=1, domain_size=strata, split=QUERIES,
        weighting="fixed_effects",
    )  # fmt: skip
    out = plan.assemble(draw_many(plan, np.random.default_rng(1), 400))
    realised = float(np.mean(2 * INTERVAL_Z * np.sqrt(np.asarray(out.variance))))
    cells = 2 * x + w
    tot = np.bincount(cells, weights=y, minlength=2 * strata)
    cnt = np.maximum(np.bincount(cells, minlength=2 * strata), 1)
    within = np.sum(np.bincount(cells, weights=y * y, minlength=2 * strata) - tot**2 / cnt) / n
    assumed = Assumptions(
        arm_share=float(w.mean()), outcome_sd=float(np.sqrt(within)),
        outcome_mean=float(y.mean()), effect=0.2, propensity_sd=0.9,
    )  # fmt: skip
    design = SiteDesign.of("s", n, 1, 0, QUERIES, 4)
    inputs = PredictionInputs(design, strata, 1.0, assumed, AdjustedOptions("fixed_effects"))
    predicted = 2 * INTERVAL_Z * np.sqrt(predict(inputs)[2])
    assert predicted == pytest.approx(realised, rel=0.25)


def test_dpate_plan_notes_the_queries_beside_a_fixed_effects_study() -> None:
    """A fixed-effects plan gives the queries' predicted combined width beside its own
    (narrower on sparse strata), a plan with them says which assumption their prediction
    reads, and a subclassification study gets no such note (the queries would change its
    estimand)."""
    from dpate_core.planning import plan_study

    def notes(options: AdjustedOptions) -> list[str]:
        split = ADJUSTED.default_split(options).shares
        designs = [SiteDesign.of(s, 3000, 1, 0, split, len(split)) for s in ("a", "b")]
        plan = plan_study(
            "adjusted", "inverse_variance", designs, domain_size=96, bound=1.0,
            assumptions=Assumptions(outcome_sd=0.15, propensity_sd=0.8), recommend=False,
            options=options,
        )  # fmt: skip
        return list(plan.notes)

    (other,) = [x for x in notes(AdjustedOptions("fixed_effects")) if x.startswith("with weigh")]
    assert other.startswith("with weighted_sum = true") and "narrower" in other
    own = notes(AdjustedOptions("fixed_effects", weighted_sum=True))
    assert any(x.startswith("with weighted_sum = false") and "wider" in x for x in own)
    assert any("--propensity-sd" in x for x in own)
    subclassification = notes(AdjustedOptions("subclassification"))
    assert not [x for x in subclassification if x.startswith("with weighted_sum")]


@pytest.mark.parametrize(("n", "strata", "epsilon"), [(40, STRATA, Fraction(1, 10)), (300, 1, 1)])
def test_a_tiny_or_unstratified_site_publishes_only_what_the_server_accepts(
    n: int, strata: int, epsilon: Fraction
) -> None:
    """Near-empty cells (every noisy count below 1: the caps fall to 1) or one stratum: each
    release is unresolved or finite, within ``[-B, B]`` and plausible."""
    rng = np.random.default_rng(n)
    w, y, x = _data(rng, n)
    x = x % strata
    plan = plan_adjusted(
        w, y, x, bound=1.0, epsilon=epsilon, domain_size=strata, split=QUERIES,
        weighting="fixed_effects",
    )  # fmt: skip
    out = plan.assemble(draw_many(plan, rng, 60))
    for r in range(60):
        e = plan.estimate_of(out, r)
        if e.resolved:
            assert -1 <= e.tau <= 1 and np.isfinite(e.variance)
            assert ADJUSTED.plausible(e, AdjustedOptions("fixed_effects"), strata) == []


HISTOGRAM_ALONE = tuple(map(Fraction, ("9/10", "1/10")))


@pytest.mark.parametrize(
    ("n", "strata", "sites", "queries"),
    [
        (373, 16, 2, False),  # IHDP's 16 strata: 1% wider with the queries (combined)
        (249, 16, 3, False),  # 5% wider
        (361, 39, 2, False),  # Lalonde's 39: 4% wider
        (240, 39, 3, False),  # 5% wider, and 0.76-0.83 of releases resolved against 0.92-0.94
        (373, 128, 2, True),  # IHDP's 128: 1.73 -> 1.31
        (249, 128, 3, True),  # 1.92 -> 1.87
        (361, 192, 2, True),  # Lalonde's 192: 0.482 -> 0.358
        (240, 192, 3, True),  # 1.08 -> 1.00
        (1000, 24, 1, True),  # the bench Synth: 24-53% narrower from 1,000 records
        (1000, 384, 1, True),
        (10000, 24, 1, True),
    ],
)
def test_auto_releases_the_queries_where_they_were_measured_narrower(
    n: int, strata: int, sites: int, queries: bool
) -> None:
    """``weighted_sum = "auto"`` (the default) on the designs of docs/explanation/adjusted.md's
    measurements: on where the queries came out narrower, off where the histogram alone did;
    the study's default split then has the queries' four parts."""
    study = [StudySite(n, Fraction(1), HISTOGRAM_ALONE)] * sites
    choice = ADJUSTED.study_choice(AdjustedOptions("fixed_effects"), strata, study)
    assert choice.options.weighted_sum is queries
    assert ("with the fixed-effects queries" in choice.reason) is queries
    assert len(ADJUSTED.default_split(choice.options).shares) == (4 if queries else 2)


def test_auto_keeps_the_histogram_alone_where_the_spec_or_the_design_says_so() -> None:
    """No queries for subclassification (``"auto"`` picking it at large sites too), a binary
    outcome, a site without a declared ``n`` or a site's own two-part split; a declared split of
    four parts (a plan's design) is the queries'; declared ``true`` / ``false`` are kept."""
    from dpate_core.mechanisms.adjusted import DEFAULT_SPLIT_BINARY

    def queries(options: AdjustedOptions, *sites: StudySite, strata: int = 24) -> bool:
        return bool(ADJUSTED.study_choice(options, strata, sites).options.weighted_sum)

    auto, one = AdjustedOptions(), Fraction(1)
    big = StudySite(100_000, one, HISTOGRAM_ALONE)
    assert ADJUSTED.study_choice(auto, 24, [big]).variant == "subclassification"
    assert not queries(auto, big)
    small = StudySite(1000, one, HISTOGRAM_ALONE)  # fixed effects at 1,000 on 24 strata
    assert ADJUSTED.study_choice(auto, 24, [small]).variant == "fixed_effects"
    assert queries(auto, small)  # ... and the queries, unless:
    assert not queries(auto, StudySite(1000, one, tuple(map(Fraction, DEFAULT_SPLIT_BINARY))))
    assert not queries(auto, StudySite(None, one, HISTOGRAM_ALONE))
    assert not queries(auto, StudySite(1000, one, HISTOGRAM_ALONE, declared=True))
    assert not queries(AdjustedOptions(weighted_sum=False), small)
    four = tuple(map(Fraction, DEFAULT_SPLIT_QUERIES))
    assert queries(auto, StudySite(300, one, four, declared=True), strata=16)
    assert queries(AdjustedOptions(weighted_sum=True), StudySite(300, one, four), strata=16)
    with pytest.raises(ValueError, match="true, false or 'auto'"):
        AdjustedOptions(weighted_sum="yes")  # type: ignore[arg-type]
