"""Server-side combiners (dpate_core.aggregation): MVAgg against the brute force, the other
combiners against hand computations and a textbook meta-analysis, the rule for unusable sites, and
the confidence interval."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dpate_core.aggregation import (
    AGGREGATORS,
    AggregateResult,
    NoUsableSiteError,
    agg_all,
    agg_largest,
    aggregate,
    inverse_variance,
    mvagg,
    mvagg_brute_force,
    random_effects,
)
from tests.examples import examples

Z95 = 1.959963984540054


def _objective(n, var, idx) -> float:
    """Algorithm 3's objective sum_{j in I} (N_j / N_I)^2 var_j, in exact-ish long form."""
    n_i = math.fsum(float(n[j]) for j in idx)
    return math.fsum(float(n[j]) ** 2 * float(var[j]) for j in idx) / n_i**2


def _all_objectives(n, var):
    """Every non-empty subset and its objective (independent of the module)."""
    J = len(n)
    out = []
    for size in range(1, J + 1):
        for subset in itertools.combinations(range(J), size):
            out.append((_objective(n, var, subset), subset))
    return out


# ---------------------------------------------------------------------------------------------
# MVAgg == brute force (correction 6)

_N_VALUES = [1, 2, 3, 4, 5, 10, 50, 100, 1000]
_VAR_VALUES = [1e-4, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 2.0, 4.0]


@st.composite
def instances(draw):
    J = draw(st.integers(1, 10))
    # small value sets make ties in N_j, var_j, N_j var_j and in the objective common
    n = draw(st.lists(st.sampled_from(_N_VALUES), min_size=J, max_size=J))
    use_grid = draw(st.booleans())
    var_strategy = (
        st.sampled_from(_VAR_VALUES)
        if use_grid
        else st.floats(1e-6, 1e3, allow_nan=False, allow_infinity=False)
    )
    var = draw(st.lists(var_strategy, min_size=J, max_size=J))
    tau = draw(st.lists(st.floats(-5, 5, allow_nan=False), min_size=J, max_size=J))
    return np.array(tau), np.array(n, dtype=float), np.array(var)


@pytest.mark.slow
@settings(max_examples=examples(2500))
@given(instances())
def test_mvagg_equals_brute_force(instance):
    tau, n, var = instance
    fast = mvagg(tau, n, var)
    brute = mvagg_brute_force(tau, n, var)
    v_fast = _objective(n, var, fast.used)
    v_brute = _objective(n, var, brute.used)
    assert v_fast == pytest.approx(v_brute, rel=1e-12, abs=0)
    # the reported variance is the objective of the set used
    assert fast.variance == pytest.approx(v_fast, rel=1e-12)
    objectives = _all_objectives(n, var)
    best = min(v for v, _ in objectives)
    assert v_fast == pytest.approx(best, rel=1e-12, abs=0)
    optimal = [s for v, s in objectives if v <= best * (1 + 1e-12)]
    if len(optimal) == 1:
        assert fast.used == brute.used == optimal[0]
        assert fast.estimate == pytest.approx(brute.estimate, rel=1e-12, abs=1e-12)
        n_i = n[list(fast.used)]
        expect = float(n_i @ tau[list(fast.used)] / n_i.sum())
        assert fast.estimate == pytest.approx(expect, rel=1e-12, abs=1e-12)


def test_mvagg_drops_a_noisy_small_site():
    # two precise large sites and a tiny noisy one: the optimum leaves the noisy one out
    tau, n, var = [1.0, 2.0, 30.0], [100, 100, 10], [0.01, 0.02, 5.0]
    res = mvagg(tau, n, var)
    assert res.used == (0, 1)
    assert res.estimate == pytest.approx(1.5)
    assert res.variance == pytest.approx((100**2 * 0.01 + 100**2 * 0.02) / 200**2)
    assert res.weights == pytest.approx((0.5, 0.5))
    # the objective of every other subset is larger
    assert res.variance < min(v for v, s in _all_objectives(n, var) if s != (0, 1))


def test_mvagg_ties_go_to_the_shortest_prefix():
    # identical sites: every prefix of k sites has objective var / k, so all are used;
    # a site with N_j var_j tied to the prefix boundary is all-or-nothing (strict inequality)
    res = mvagg([1.0, 2.0, 3.0], [10, 10, 10], [1.0, 1.0, 1.0])
    assert res.used == (0, 1, 2)
    assert res.variance == pytest.approx(1.0 / 3.0)


def test_mvagg_scales_to_a_million_sites():
    rng = np.random.default_rng(3)
    J = 1_000_000
    n = rng.integers(50, 5000, J).astype(float)
    var = rng.gamma(2.0, 1.0, J) / n
    tau = rng.normal(0.5, 1.0, J)
    res = mvagg(tau, n, var)
    order = np.argsort(n * var, kind="stable")
    prefix = np.cumsum((n**2 * var)[order]) / np.cumsum(n[order]) ** 2
    assert res.variance == pytest.approx(prefix.min(), rel=1e-9)
    assert len(res.used) == int(np.argmin(prefix)) + 1


# ---------------------------------------------------------------------------------------------
# the other combiners, against hand computations


def test_agg_all_hand_computed():
    res = agg_all([1.0, 2.0, 4.0], [1, 2, 1], [1.0, 1.0, 4.0])
    assert res.method == "all"
    assert res.used == (0, 1, 2)
    assert res.weights == pytest.approx((0.25, 0.5, 0.25))
    assert res.estimate == pytest.approx(0.25 + 1.0 + 1.0)
    assert res.variance == pytest.approx(0.0625 * 1 + 0.25 * 1 + 0.0625 * 4)


def test_agg_largest_takes_the_first_of_the_largest():
    res = agg_largest([1.0, 2.0, 3.0, 4.0], [5, 9, 9, 2], [0.1, 0.2, 0.3, 0.4])
    assert res.used == (1,)
    assert res.estimate == 2.0
    assert res.variance == 0.2
    assert res.weights == (1.0,)


def test_inverse_variance_hand_computed():
    res = inverse_variance([1.0, 3.0], [10, 10], [1.0, 3.0])
    # weights 1 and 1/3 -> 3/4 and 1/4
    assert res.weights == pytest.approx((0.75, 0.25))
    assert res.estimate == pytest.approx(1.5)
    assert res.variance == pytest.approx(1.0 / (1.0 + 1.0 / 3.0))


def test_random_effects_hand_computed():
    # tau = (0, 4), var = (1, 3): w = (1, 1/3), FE = 1, Q = 1 + 9/3 = 4, dof = 1,
    # c = 4/3 - (1 + 1/9)/(4/3) = 1/2, tau^2 = (4 - 1)/(1/2) = 6, I^2 = 3/4,
    # w* = (1/7, 1/9): estimate = (4/9)/(16/63) = 7/4, variance = 63/16
    res = random_effects([0.0, 4.0], [1, 1], [1.0, 3.0])
    assert res.extra["Q"] == pytest.approx(4.0)
    assert res.extra["tau2"] == pytest.approx(6.0)
    assert res.extra["I2"] == pytest.approx(0.75)
    assert res.estimate == pytest.approx(1.75)
    assert res.variance == pytest.approx(63 / 16)
    assert res.weights == pytest.approx((9 / 16, 7 / 16))


def test_random_effects_equal_variances():
    # tau = (0, 2, 4), var 1: Q = 8, c = 2, tau^2 = 3, I^2 = 3/4, estimate 2, variance 4/3
    res = random_effects([0.0, 2.0, 4.0], [5, 5, 5], [1.0, 1.0, 1.0])
    assert (res.extra["Q"], res.extra["tau2"], res.extra["I2"]) == pytest.approx((8.0, 3.0, 0.75))
    assert res.estimate == pytest.approx(2.0)
    assert res.variance == pytest.approx(4.0 / 3.0)


def test_random_effects_without_heterogeneity_is_the_fixed_effect():
    tau, n, var = [1.0, 1.2, 0.9], [1, 1, 1], [1.0, 2.0, 0.5]
    re, fe = random_effects(tau, n, var), inverse_variance(tau, n, var)
    assert re.extra["tau2"] == 0.0 and re.extra["I2"] == 0.0
    assert re.estimate == pytest.approx(fe.estimate)
    assert re.variance == pytest.approx(fe.variance)


def test_random_effects_single_site():
    res = random_effects([0.3], [10], [0.04])
    assert res.estimate == 0.3 and res.variance == pytest.approx(0.04)
    assert res.extra == {"Q": 0.0, "I2": 0.0, "tau2": 0.0}


# BCG vaccine trials (Colditz et al. 1994; dat.bcg in R's metafor): tpos, tneg, cpos, cneg.
# Reference: metafor::rma(yi, vi, data = escalc("RR", ...), method = "DL") prints
# estimate -0.7141, se 0.1787, CI (-1.0644, -0.3638), tau^2 0.3088, I^2 92.12%, Q(12) = 152.2330.
_BCG = np.array(
    [
        [4, 119, 11, 128],
        [6, 300, 29, 274],
        [3, 228, 11, 209],
        [62, 13536, 248, 12619],
        [33, 5036, 47, 5761],
        [180, 1361, 372, 1079],
        [8, 2537, 10, 619],
        [505, 87886, 499, 87892],
        [29, 7470, 45, 7232],
        [17, 1699, 65, 1600],
        [186, 50448, 141, 27197],
        [5, 2493, 3, 2338],
        [27, 16886, 29, 17825],
    ],
    dtype=float,
)


def test_random_effects_matches_metafor_on_the_bcg_trials():
    a, b, c, d = _BCG.T
    yi = np.log((a / (a + b)) / (c / (c + d)))
    vi = 1 / a - 1 / (a + b) + 1 / c - 1 / (c + d)
    res = random_effects(yi, a + b + c + d, vi)
    assert res.extra["Q"] == pytest.approx(152.2330, abs=5e-5)
    assert res.extra["tau2"] == pytest.approx(0.3088, abs=5e-5)
    assert res.extra["I2"] == pytest.approx(0.9212, abs=5e-5)
    assert res.estimate == pytest.approx(-0.7141, abs=5e-5)
    assert math.sqrt(res.variance) == pytest.approx(0.1787, abs=5e-5)
    lo, hi = res.ci95
    assert (lo, hi) == pytest.approx((-1.0644, -0.3638), abs=5e-5)


def _dl_loop(tau, var):
    """DerSimonian and Laird (1986) written out with plain loops (independent of the module)."""
    k = len(tau)
    w = [1.0 / v for v in var]
    sw = math.fsum(w)
    fe = math.fsum(wi * ti for wi, ti in zip(w, tau, strict=True)) / sw
    q = math.fsum(wi * (ti - fe) ** 2 for wi, ti in zip(w, tau, strict=True))
    c = sw - math.fsum(wi * wi for wi in w) / sw
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    ws = [1.0 / (v + tau2) for v in var]
    est = math.fsum(wi * ti for wi, ti in zip(ws, tau, strict=True)) / math.fsum(ws)
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    return est, 1.0 / math.fsum(ws), q, tau2, i2


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.floats(-10, 10), st.floats(1e-3, 10.0)),
        min_size=2,
        max_size=30,
    )
)
@example([(0.0, 1.0), (3.1e-157, 1.0)])  # Q subnormal: (Q - (k-1)) / Q overflows
def test_random_effects_matches_a_loop_implementation(rows):
    tau = [r[0] for r in rows]
    var = [r[1] for r in rows]
    res = random_effects(tau, [1] * len(rows), var)
    est, v, q, tau2, i2 = _dl_loop(tau, var)
    assert res.estimate == pytest.approx(est, rel=1e-9, abs=1e-9)
    assert res.variance == pytest.approx(v, rel=1e-9)
    assert res.extra["Q"] == pytest.approx(q, rel=1e-9, abs=1e-9)
    assert res.extra["tau2"] == pytest.approx(tau2, rel=1e-7, abs=1e-9)
    assert res.extra["I2"] == pytest.approx(i2, rel=1e-7, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# the rule for unusable sites, the interval, the dispatch


@pytest.mark.parametrize("method", sorted(AGGREGATORS))
def test_unusable_sites_are_excluded_with_a_reason(method):
    tau = [1.0, math.nan, 2.0, 3.0, 4.0, 5.0, 6.0]
    n = [10, 10, 10, 10, 10, 0, 10]
    var = [0.1, 0.1, 0.0, -0.5, math.inf, 0.1, 0.3]
    res = aggregate(method, tau, n, var)
    assert set(res.excluded) == {1, 2, 3, 4, 5}
    assert "estimate is not finite" in res.excluded[1]
    assert "variance is not finite and positive" in res.excluded[2]
    assert "variance is not finite and positive" in res.excluded[3]
    assert "variance is not finite and positive" in res.excluded[4]
    assert "sample size" in res.excluded[5]
    assert set(res.used) <= {0, 6}
    assert math.isfinite(res.estimate) and math.isfinite(res.variance) and res.variance > 0
    # the same as combining the usable sites alone (indices mapped back)
    clean = aggregate(method, [1.0, 6.0], [10, 10], [0.1, 0.3])
    assert res.estimate == pytest.approx(clean.estimate)
    assert res.variance == pytest.approx(clean.variance)
    assert res.used == tuple([0, 6][i] for i in clean.used)


@pytest.mark.parametrize("method", sorted(AGGREGATORS))
@pytest.mark.parametrize(
    ("tau", "n", "var"),
    [
        ([1.0, 2.0], [10, 10], [0.0, -1.0]),
        ([math.nan, math.inf], [10, 10], [0.1, 0.1]),
        ([1.0], [10], [math.nan]),
        ([], [], []),
    ],
)
def test_no_usable_site_raises(method, tau, n, var):
    with pytest.raises(NoUsableSiteError):
        aggregate(method, tau, n, var)
    assert issubclass(NoUsableSiteError, ValueError)


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="1-d arrays of one length"):
        mvagg([1.0, 2.0], [10], [0.1, 0.1])


def test_unknown_aggregator_names_the_choices():
    with pytest.raises(ValueError, match=r"aggregator \('median'\) is not one of") as info:
        aggregate("median", [1.0], [1], [1.0])
    for name in AGGREGATORS:
        assert name in str(info.value)


@pytest.mark.parametrize("method", sorted(AGGREGATORS))
def test_confidence_interval_is_estimate_plus_minus_z_sd(method):
    res = aggregate(method, [0.5, 1.5, 1.0, 0.2], [100, 50, 80, 10], [0.04, 0.09, 0.05, 1.0])
    assert isinstance(res, AggregateResult)
    lo, hi = res.ci95
    half = 1.959964 * math.sqrt(res.variance)
    assert lo == pytest.approx(res.estimate - half, rel=1e-6)
    assert hi == pytest.approx(res.estimate + half, rel=1e-6)
    assert (hi - lo) / 2 == pytest.approx(Z95 * math.sqrt(res.variance), rel=1e-12)
    lo90, hi90 = res.conf_int(0.90)
    assert (hi90 - lo90) / 2 == pytest.approx(1.6448536269514722 * math.sqrt(res.variance))
    assert math.fsum(res.weights) == pytest.approx(1.0)
    assert len(res.weights) == len(res.used)


# ---------------------------------------------------------------------------------------------
# The registry's one vectorised implementation gives the bytes of plain scalar combiners: the
# reference implementations below, written one site at a time.


def _old_inputs(tau, n, variance):
    tau = np.asarray(tau, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    if tau.size == 0:
        raise NoUsableSiteError("no site estimates to aggregate")
    excluded: dict[int, str] = {}
    bad_tau = ~np.isfinite(tau)
    bad_n = ~(np.isfinite(n) & (n >= 1))
    bad_var = ~np.isfinite(var) | (var <= 0)
    for j in np.flatnonzero(bad_tau | bad_n | bad_var):
        why = []
        if bad_tau[j]:
            why.append("estimate is not finite")
        if bad_n[j]:
            why.append("sample size is not a finite number >= 1")
        if bad_var[j]:
            why.append("variance is not finite and positive")
        excluded[int(j)] = "; ".join(why)
    ok = np.flatnonzero(~(bad_tau | bad_n | bad_var))
    if ok.size == 0:
        raise NoUsableSiteError("none usable")
    return tau, n, var, ok, excluded


def _old_weighted(method, tau, var, idx, weights, excluded, extra=None) -> AggregateResult:
    w = weights / weights.sum()
    est = float(w @ tau[idx])
    variance = float((w * w) @ var[idx])
    return AggregateResult(
        method=method,
        estimate=est,
        variance=variance,
        used=tuple(np.asarray(idx, dtype=np.int64).tolist()),
        weights=tuple(np.asarray(w, dtype=np.float64).tolist()),
        excluded=excluded,
        extra=extra or {},
    )


def _old_mvagg(tau, n, variance) -> AggregateResult:
    tau, n, var, ok, excluded = _old_inputs(tau, n, variance)
    key = n[ok] * var[ok]
    order = ok[np.argsort(key, kind="stable")]
    num = np.cumsum(n[order] ** 2 * var[order])
    den = np.cumsum(n[order]) ** 2
    best = int(np.argmin(num / den))
    idx = np.sort(order[: best + 1])
    return _old_weighted("mvagg", tau, var, idx, n[idx], excluded)


def _old_agg_all(tau, n, variance) -> AggregateResult:
    tau, n, var, ok, excluded = _old_inputs(tau, n, variance)
    return _old_weighted("all", tau, var, ok, n[ok], excluded)


def _old_agg_largest(tau, n, variance) -> AggregateResult:
    tau, n, var, ok, excluded = _old_inputs(tau, n, variance)
    j = ok[int(np.argmax(n[ok]))]
    return _old_weighted("largest", tau, var, np.array([j]), np.ones(1), excluded)


def _old_inverse_variance(tau, n, variance) -> AggregateResult:
    tau, n, var, ok, excluded = _old_inputs(tau, n, variance)
    return _old_weighted("inverse_variance", tau, var, ok, 1.0 / var[ok], excluded)


def _old_random_effects(tau, n, variance) -> AggregateResult:
    tau, n, var, ok, excluded = _old_inputs(tau, n, variance)
    t, v = tau[ok], var[ok]
    w = 1.0 / v
    fe = float(w @ t / w.sum())
    q = float(w @ (t - fe) ** 2)
    dof = ok.size - 1
    c = float(w.sum() - (w @ w) / w.sum())
    tau2 = max(0.0, (q - dof) / c) if c > 0 else 0.0
    i2 = max(0.0, (q - dof) / q) if q > 0 else 0.0
    w_star = 1.0 / (v + tau2)
    extra = {"Q": q, "I2": i2, "tau2": tau2}
    return _old_weighted("random_effects", tau, var + tau2, ok, w_star, excluded, extra)


OLD = {
    "mvagg": _old_mvagg,
    "all": _old_agg_all,
    "largest": _old_agg_largest,
    "inverse_variance": _old_inverse_variance,
    "random_effects": _old_random_effects,
}


def _bytes(res: AggregateResult) -> bytes:
    """Every field, floats as their exact hex form (so -0.0 and the last bit count)."""

    def f(x):
        return float(x).hex()

    return repr(
        (
            res.method,
            f(res.estimate),
            f(res.variance),
            res.used,
            [f(w) for w in res.weights],
            sorted(res.excluded.items()),
            sorted((k, f(v)) for k, v in res.extra.items()),
        )
    ).encode()


@pytest.mark.parametrize("method", sorted(OLD))
@pytest.mark.parametrize("case", ["plain", "ties", "bad", "heterogeneous"])
def test_registry_gives_the_old_bytes(method, case):
    """aggregate(...) through the vectorised implementation's one-row case is byte-identical to
    the scalar code it replaced (published result documents keep their bytes)."""
    rng = np.random.default_rng(zlib_key(method, case))
    for _ in range(300):
        J = int(rng.integers(1, 40))
        tau = rng.normal(0.3, 0.5 if case != "heterogeneous" else 5.0, J)
        var = np.exp(rng.normal(-6, 3, J))
        n = rng.integers(1, 5000, J).astype(float)
        if case == "ties":
            n[:] = 100.0
            var[1:] = var[0]
        if case == "bad":
            mask = rng.random(J) < 0.25
            var[mask] = rng.choice([0.0, -1.0, np.nan, np.inf], mask.sum())
            tau[rng.random(J) < 0.05] = np.nan
            n[rng.random(J) < 0.05] = 0.0
        try:
            want = OLD[method](tau, n, var)
        except NoUsableSiteError:
            with pytest.raises(NoUsableSiteError):
                aggregate(method, tau, n, var)
            continue
        assert _bytes(aggregate(method, tau, n, var)) == _bytes(want)


def zlib_key(*parts: str) -> int:
    import zlib

    return zlib.crc32("|".join(parts).encode())


def test_registry_declares_each_aggregator_once():
    """The scalar table, the vectorised table and the registry hold the same names, and each
    aggregator declares what the spec, the result document and the figures need."""
    import dpate_core.aggregation as aggregators
    from dpate_core.aggregation import COMBINERS
    from dpate_core.simulation import COMBINERS_MANY

    assert list(COMBINERS) == list(aggregators.AGGREGATORS) == list(COMBINERS_MANY)
    assert set(aggregators.AGGREGATORS) >= set(OLD)
    for name, agg in aggregators.AGGREGATORS.items():
        assert agg.name == name and agg.label and agg.why_used and agg.why_not_used
        assert {"color", "marker", "ls"} <= set(agg.style)
    with pytest.raises(ValueError, match="already registered"):
        aggregators.register(aggregators.AGGREGATORS["mvagg"])


@pytest.mark.parametrize(
    "method", ["inverse_variance", "mvagg", "all", "largest", "random_effects"]
)
def test_a_shared_part_adds_its_cross_terms(method):
    """Sites whose errors share a part of sd ``b_j`` (a common bias, in each site's variance
    already): the combined variance adds ``sum_{i != j} w_i w_j b_i b_j`` over the sites used, the
    same in the server's call and the vectorised one; none shared (or all 0, or only
    unresolved sites sharing) changes nothing, bit for bit."""
    from dpate_core.aggregation import shared_term
    from dpate_core.simulation import aggregate_many

    tau, n, var = [0.1, 0.3, 0.2], [100, 200, 300], [0.04, 0.02, 0.03]
    b = [0.05, 0.02, 0.0]
    plain = aggregate(method, tau, n, var)
    assert aggregate(method, tau, n, var, shared=[0.0] * 3) == plain
    with_b = aggregate(method, tau, n, var, shared=b)
    w = np.zeros(3)
    w[list(plain.used)] = plain.weights
    cross = sum(w[i] * w[j] * b[i] * b[j] for i in range(3) for j in range(3) if i != j)
    assert with_b.variance == pytest.approx(plain.variance + cross)
    assert with_b.estimate == plain.estimate and with_b.used == plain.used
    assert float(shared_term(w, np.array(b))) == pytest.approx(cross)
    many = aggregate_many(method, np.array([tau]), np.array([n]), np.array([var]), np.array([b]))
    assert many.variance[0] == pytest.approx(with_b.variance)
    # an unresolved site's shared sd is never combined
    gone = aggregate(method, tau, n, var, resolved=[True, True, False], shared=[0, 0, 0.3])
    assert gone.variance == aggregate(method, tau, n, var, resolved=[True, True, False]).variance
    with pytest.raises(ValueError, match="must not be negative"):
        aggregate(method, tau, n, var, shared=[-0.1, 0, 0])
