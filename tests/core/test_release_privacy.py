"""Empirical privacy of each release on worst-case neighbouring datasets.

For a pair of neighbours D, D' (one record replaced), each release is run many times on both (the
simulation path: the release's own plan, ``draw_many`` from a seeded Generator and the mechanism's
own assembly, ``plan.assembly``), an output statistic is histogrammed into bins, and for
every bin with enough mass the estimated probability ratio must stay within ``e^eps`` of the part
of the budget that statistic consumes, up to sampling error: a bin is a violation only when the
one-sided Clopper-Pearson lower bound of ``P_D(bin)`` exceeds ``e^eps`` times the upper bound of
``P_D'(bin)`` plus ``delta`` (both directions, Bonferroni over bins). Deliberately broken
mechanisms (Laplace at half the scale; the paper's global sensitivity ``B`` for GlobalDPMatching,
correction 2) show that the checker rejects what it should.

``test_release.py`` checks that vectorised ``assemble`` equals one release at a time, and that the
step every release adds after the assembly (``tau`` clipped to ``[-B, B]``, NaN where the release
is not resolved) reads nothing but the assembly's outputs: post-processing, so the assembly's
outputs are what privacy is judged on, at full resolution (a clipped ``tau`` would pile its mass
into atoms at ``+-B``). A value the assembly does not resolve (NaN) is one atom of its own.

An empirical test cannot prove privacy (the ``delta``-sized failures of correction 1 are far
below what 2*10^5 draws can see); it catches calibration errors of a constant factor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import (
    global_dp_matching,
    plan_matching,
    smooth_beta,
    smooth_dp_matching,
)
from dpate_core.privacy import PrivacyParams, to_float
from dpate_core.release import MechanismPlan, draw_many, draw_once
from dpate_core.statistics import matching_statistics

B = 1.0
REPS = 200_000
N_BINS = 40
MIN_BIN_COUNT = 200  # pooled count below which a bin is not judged
ALPHA = 1e-6  # family-wise false-alarm rate of the checker


# ---------------------------------------------------------------------------------------------
# the checker


@dataclass(frozen=True)
class PrivacyCheck:
    violations: list[tuple[float, float, float]]  # (bin low edge, ratio lower bound, allowed)
    max_ratio: float  # largest estimated probability ratio over judged bins (point estimate)
    judged_bins: int

    @property
    def ok(self) -> bool:
        return not self.violations


def _edges(pilot: np.ndarray) -> np.ndarray:
    inner = np.unique(np.quantile(pilot, np.linspace(0.0, 1.0, N_BINS + 1)[1:-1]))
    return np.concatenate(([-np.inf], inner, [np.inf]))


def _counts(sample: np.ndarray, edges: np.ndarray) -> np.ndarray:
    # bins [e_i, e_{i+1}); a value equal to an edge (point masses) goes to the bin it opens
    idx = np.searchsorted(edges, sample, side="right") - 1
    return np.bincount(idx, minlength=edges.size - 1)


def check_privacy(
    a: np.ndarray, b: np.ndarray, epsilon: float, delta: float, pilot: np.ndarray
) -> PrivacyCheck:
    """Histogram test of ``P[M(D) in bin] <= e^eps P[M(D') in bin] + delta`` (and the reverse)."""
    edges = _edges(pilot)
    ca, cb = _counts(a, edges), _counts(b, edges)
    na, nb = a.size, b.size
    judged = np.flatnonzero(ca + cb >= MIN_BIN_COUNT)
    level = ALPHA / (4 * max(judged.size, 1))  # two bounds per direction, two directions
    bound = math.exp(epsilon)
    violations = []
    max_ratio = 0.0
    for i in judged:
        for k1, n1, k2, n2 in ((ca[i], na, cb[i], nb), (cb[i], nb, ca[i], na)):
            lower1 = stats.beta.ppf(level, k1, n1 - k1 + 1) if k1 > 0 else 0.0
            upper2 = stats.beta.ppf(1 - level, k2 + 1, n2 - k2) if k2 < n2 else 1.0
            if lower1 > bound * upper2 + delta:
                violations.append((float(edges[i]), float(lower1 / upper2), bound))
            if k2 > 0:
                max_ratio = max(max_ratio, (k1 / n1) / (k2 / n2))
    return PrivacyCheck(violations, max_ratio, int(judged.size))


def test_checker_accepts_identical_and_tight_mechanisms_and_rejects_loose_claims():
    rng = np.random.default_rng(0)
    # Lap(1) shifted by 1: the exact ratio is e^1 on a large set (both tails)
    a = rng.laplace(0.0, 1.0, REPS)
    b = rng.laplace(1.0, 1.0, REPS)
    pilot = np.concatenate([rng.laplace(0.0, 1.0, 20_000), rng.laplace(1.0, 1.0, 20_000)])
    tight = check_privacy(a, b, 1.0, 0.0, pilot)
    assert tight.ok and tight.judged_bins >= 30
    assert tight.max_ratio == pytest.approx(math.e, rel=0.1)  # the bound is attained
    assert not check_privacy(a, b, 0.8, 0.0, pilot).ok  # a 20% too small eps is caught
    same = check_privacy(a, rng.laplace(0.0, 1.0, REPS), 0.05, 0.0, pilot)
    assert same.ok


# ---------------------------------------------------------------------------------------------
# neighbouring datasets and the mechanisms under test


@dataclass(frozen=True)
class Pair:
    name: str
    d: tuple[np.ndarray, np.ndarray, np.ndarray]  # (w, y, x)
    d_prime: tuple[np.ndarray, np.ndarray, np.ndarray]
    domain_size: int


def _data(rows):
    w, y, x = zip(*rows, strict=True)
    return np.array(w, np.int64), np.array(y, float), np.array(x, np.int64)


def _neighbours(name, rows, index, new_row, domain_size) -> Pair:
    assert 0 <= index < len(rows)
    changed = list(rows)
    changed[index] = new_row
    return Pair(name, _data(rows), _data(changed), domain_size)


def _errata1_smallest() -> Pair:
    # correction 1: |X| = 1, N = 2, counts (T, C) = (2, 0) vs (1, 1); tau moves 0 -> B
    return _neighbours("errata1_N2", [(1, B, 0), (1, 0.0, 0)], 1, (0, 0.0, 0), 1)


def _errata2_witness(n: int = 3) -> Pair:
    # correction 2: x0 = {N-2 controls Y=0, one treated Y=B}, x1 = {one control Y=B};
    # the treated record becomes (W=1, Y=0, X=x1): tau goes from (N-1)B/N to -2B/N
    rows = [(0, 0.0, 0)] * (n - 2) + [(1, B, 0), (0, B, 1)]
    return _neighbours(f"errata2_N{n}", rows, n - 2, (1, 0.0, 1), 2)


def _imbalanced_stratum(change: str) -> Pair:
    # correction 1 at realistic size: N = 5000, |X| = 100, a stratum (67, 1) next to balanced
    # ones. "counts": a treated record of that stratum moves to another stratum, (67,1)->(66,1);
    # "outcome": the single control's outcome goes 0 -> B (tau moves by 68B/N).
    rng = np.random.default_rng(2024)
    rows = [(1, B, 0)] * 67 + [(0, 0.0, 0)]
    rest = 5000 - len(rows)
    xs = 1 + np.arange(rest) % 99
    ws = (np.arange(rest) // 99) % 2
    ys = np.round(rng.uniform(0, B, rest), 3)
    rows += [(int(w), float(y), int(x)) for w, y, x in zip(ws, ys, xs, strict=True)]
    if change == "counts":
        return _neighbours("imbalanced_counts", rows, 0, (1, 0.0, 5), 100)
    return _neighbours("imbalanced_outcome", rows, 67, (0, B, 0), 100)


MATCHING_PAIRS = [
    _errata1_smallest(),
    _errata2_witness(3),
    _errata2_witness(40),
    _imbalanced_stratum("counts"),
    _imbalanced_stratum("outcome"),
]


def _dim_pairs() -> list[tuple[Pair, bool]]:
    # public arms: one treated outcome goes 0 -> B (the largest change a neighbour can make)
    rows = [(1, 0.3, 0)] * 9 + [(1, 0.0, 0)] + [(0, 0.6, 0)] * 10
    public = _neighbours("dim_outcome", rows, 9, (1, B, 0), 1)
    # private arms: a treated record with Y=B becomes a control with Y=B (both sums and N_t move)
    rows2 = [(1, 0.2, 0)] * 9 + [(1, B, 0)] + [(0, 0.7, 0)] * 10
    private = _neighbours("dim_arm_move", rows2, 9, (0, B, 0), 1)
    return [(public, True), (private, False)]


EPS = "1"
DELTA = "1e-5"


def _matching_plan(estimator: str, data, domain_size: int, eps=EPS) -> MechanismPlan:
    w, y, x = data
    st = matching_statistics(w, y, x, domain_size, bound=B)
    return plan_matching(estimator, st, bound=B, epsilon=eps, delta=DELTA, domain_size=domain_size)


#: where a histogram puts an unresolved release (NaN): an atom below every number released
UNRESOLVED_ATOM = -1e300


def _run(plan: MechanismPlan, seed: int, reps: int = REPS):
    """The mechanism's own assembly (before the publication step, which is post-processing)."""
    assembly = plan.assembly
    return assembly(draw_many(plan, np.random.default_rng(seed), reps))


def _statistic(out, name: str) -> np.ndarray:
    value = getattr(out, name) if hasattr(out, name) else out.diagnostics[name]
    value = np.where(np.isnan(value), UNRESOLVED_ATOM, np.asarray(value, dtype=float))
    return np.broadcast_to(value, (np.size(out.tau),))


def _assert_private(
    plan_d, plan_dp, statistic: str, part: PrivacyParams, tag: str, reps: int = REPS
):
    out_d, out_dp = _run(plan_d, 1, reps), _run(plan_dp, 2, reps)
    a, b = _statistic(out_d, statistic), _statistic(out_dp, statistic)
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # a public constant (e.g. GlobalDPMatching's noise var)
        assert a[0] == b[0], f"{tag}: a constant output differs between neighbours"
        return PrivacyCheck([], 1.0, 0)
    pilot_d, pilot_dp = _run(plan_d, 3, 20_000), _run(plan_dp, 4, 20_000)
    pilot = np.concatenate([_statistic(pilot_d, statistic), _statistic(pilot_dp, statistic)])
    eps, delta = float(part.epsilon), float(part.delta)
    result = check_privacy(a, b, eps, delta, pilot)
    assert result.judged_bins >= 10, f"{tag}: too few bins with mass to judge"
    assert result.ok, f"{tag}: probability ratio beyond e^{eps:.3f}: {result.violations[:3]}"
    return result


def _parts(total: PrivacyParams, shares, *idx) -> PrivacyParams:
    parts = [total.scale(Fraction(s)) for s in shares]
    out = PrivacyParams(Fraction(0), Fraction(0))
    for i in idx:
        out = out + parts[i]
    return out


TOTAL = PrivacyParams.of(EPS, DELTA)

# ---------------------------------------------------------------------------------------------
# the releases are private on worst-case neighbours


# every released output, and the budget parts (indices into the split) it is computed from
SMOOTH_OUTPUTS = {
    "tau": (0,),
    "variance": (1, 2),  # max(V_dp, 0) + 8 S2_dp / eps_1^2
    "raw_variance": (1, 2),
    "sampling_variance_dp": (1,),
    "smooth_sensitivity_dp": (2,),
    "noise_variance": (2,),
}
GLOBAL_OUTPUTS = {
    "tau": (0,),
    "variance": (1,),
    "raw_variance": (1,),
    "sampling_variance_dp": (1,),
    "noise_variance": (),  # public constant
}
DIM_PUBLIC_OUTPUTS = {
    "tau": (0,),  # the arm sums
    "variance": (0, 1),  # sums and sums of squares
    "raw_variance": (0, 1),
    "sampling_variance_dp": (0, 1),
    "noise_variance": (),
}
DIM_PRIVATE_OUTPUTS = {
    "tau": (0,),  # the (arm, end) histogram: the arms' sizes and sums
    "variance": (0, 1),
    "raw_variance": (0, 1),
    "sampling_variance_dp": (0, 1),
    "n_treated_dp": (0,),
    "noise_variance": (0,),
}


def _check_outputs(plan_d, plan_dp, outputs, total, tag):
    assert set(outputs) >= {"tau", "variance"}
    results = {}
    for name, idx in outputs.items():
        part = _parts(total, plan_d.shares.shares, *idx)
        results[name] = _assert_private(plan_d, plan_dp, name, part, f"{tag} {name}")
    return results


@pytest.mark.slow
@pytest.mark.parametrize("pair", MATCHING_PAIRS, ids=lambda p: p.name)
def test_smooth_dp_matching_is_private_on_worst_case_neighbours(pair):
    plan_d = _matching_plan("smooth_matching", pair.d, pair.domain_size)
    plan_dp = _matching_plan("smooth_matching", pair.d_prime, pair.domain_size)
    assert plan_d.shares.shares == (Fraction(1, 3),) * 3
    _check_outputs(plan_d, plan_dp, SMOOTH_OUTPUTS, TOTAL, pair.name)


@pytest.mark.slow
@pytest.mark.parametrize("pair", [MATCHING_PAIRS[2], MATCHING_PAIRS[3]], ids=lambda p: p.name)
def test_smooth_dp_matching_is_private_at_the_papers_epsilon(pair):
    # the paper's eps = 5: each part gets 5/3 >= 1, where the classic Gaussian calibration of the
    # Lemma is invalid and the analytic one is used (correction 4)
    plan_d = _matching_plan("smooth_matching", pair.d, pair.domain_size, eps="5")
    plan_dp = _matching_plan("smooth_matching", pair.d_prime, pair.domain_size, eps="5")
    _check_outputs(plan_d, plan_dp, SMOOTH_OUTPUTS, PrivacyParams.of("5", DELTA), pair.name)


@pytest.mark.slow
@pytest.mark.parametrize("pair", MATCHING_PAIRS, ids=lambda p: p.name)
def test_global_dp_matching_is_private_on_worst_case_neighbours(pair):
    plan_d = _matching_plan("global_matching", pair.d, pair.domain_size)
    plan_dp = _matching_plan("global_matching", pair.d_prime, pair.domain_size)
    _check_outputs(plan_d, plan_dp, GLOBAL_OUTPUTS, TOTAL, pair.name)


@pytest.mark.parametrize(("pair", "public"), _dim_pairs(), ids=["public_arms", "private_arms"])
def test_dp_difference_in_means_is_private_on_worst_case_neighbours(pair, public):
    plan_d = plan_difference_in_means(*pair.d[:2], bound=B, epsilon=EPS, arm_sizes_public=public)
    plan_dp = plan_difference_in_means(
        *pair.d_prime[:2], bound=B, epsilon=EPS, arm_sizes_public=public
    )
    outputs = DIM_PUBLIC_OUTPUTS if public else DIM_PRIVATE_OUTPUTS
    results = _check_outputs(plan_d, plan_dp, outputs, PrivacyParams.of(EPS), pair.name)
    assert results["tau"].max_ratio > 1.1  # the pair is not trivially close: there is a signal


def test_every_released_output_is_checked():
    w, y, x = _imbalanced_stratum("counts").d
    for estimator, outputs in (
        ("smooth_matching", SMOOTH_OUTPUTS),
        ("global_matching", GLOBAL_OUTPUTS),
    ):
        out = _run(_matching_plan(estimator, (w, y, x), 100), 0, 10)
        assert set(outputs) == {"tau", "variance", "raw_variance", *out.diagnostics}
    for public, outputs in ((True, DIM_PUBLIC_OUTPUTS), (False, DIM_PRIVATE_OUTPUTS)):
        plan = plan_difference_in_means(w, y, bound=B, epsilon=EPS, arm_sizes_public=public)
        out = _run(plan, 0, 10)
        assert set(outputs) == {"tau", "variance", "raw_variance", *out.diagnostics}


def test_the_simulated_mechanism_is_the_release():
    # what the tests above sample is what the releases compute: same plan, same assemble
    pair = _errata2_witness(3)
    for estimator, release in (
        ("smooth_matching", smooth_dp_matching),
        ("global_matching", global_dp_matching),
    ):
        plan = _matching_plan(estimator, pair.d, pair.domain_size)
        for seed in range(5):
            want = release(
                *pair.d, bound=B, epsilon=EPS, delta=DELTA, domain_size=pair.domain_size,
                rng=np.random.default_rng(seed),
            )  # fmt: skip
            got = plan.estimate(draw_once(plan, np.random.default_rng(seed)))
            assert got == want


# ---------------------------------------------------------------------------------------------
# the checker rejects broken mechanisms


def _half_scale(plan: MechanismPlan, names: set[str]) -> MechanismPlan:
    noise = tuple(
        dataclasses.replace(s, scale=s.scale / 2) if s.name in names else s for s in plan.noise
    )
    return dataclasses.replace(plan, noise=noise)


def _expect_violation(plan_d, plan_dp, statistic, part, tag, reps=REPS):
    with pytest.raises(AssertionError, match="probability ratio beyond"):
        _assert_private(plan_d, plan_dp, statistic, part, tag, reps)


def test_checker_rejects_difference_in_means_at_half_the_scale():
    pair, public = _dim_pairs()[0]
    plan_d = plan_difference_in_means(*pair.d[:2], bound=B, epsilon=EPS, arm_sizes_public=public)
    plan_dp = plan_difference_in_means(
        *pair.d_prime[:2], bound=B, epsilon=EPS, arm_sizes_public=public
    )
    sums = {"sum_treated", "sum_control"}
    part = _parts(PrivacyParams.of(EPS), plan_d.shares.shares, 0)
    _expect_violation(_half_scale(plan_d, sums), _half_scale(plan_dp, sums), "tau", part, "dim")


def test_checker_rejects_global_matching_with_the_papers_sensitivity():
    # correction 2: GS = B (the paper) instead of 2B is Laplace at half the scale; on the
    # witness (N = 3) tau moves by 4B/3 > B, and the ratio e^(4 eps_1 / 3) is seen
    pair = _errata2_witness(3)
    plan_d = _matching_plan("global_matching", pair.d, pair.domain_size)
    plan_dp = _matching_plan("global_matching", pair.d_prime, pair.domain_size)
    part = _parts(TOTAL, plan_d.shares.shares, 0)
    _expect_violation(
        _half_scale(plan_d, {"tau"}), _half_scale(plan_dp, {"tau"}), "tau", part, "paper GS"
    )


def test_checker_rejects_the_private_smooth_sensitivity_at_half_sigma():
    # part 3 (the Gaussian on ln S) is the tightest part of SmoothDPMatching: on the corrections
    # section 1 pair (67, 1) -> (66, 1), ln S moves by exactly beta_1. At half the analytic
    # Gaussian's sigma the released S_dp breaks e^(eps_3); 2*10^6 draws make it visible.
    pair = _imbalanced_stratum("counts")
    plan_d = _matching_plan("smooth_matching", pair.d, pair.domain_size)
    plan_dp = _matching_plan("smooth_matching", pair.d_prime, pair.domain_size)
    beta1 = smooth_beta(to_float(Fraction(1, 3), round_up=False), 1e-5 / 3)
    assert abs(plan_d.noise[2].loc - plan_dp.noise[2].loc) == pytest.approx(beta1, rel=1e-6)
    part = _parts(TOTAL, plan_d.shares.shares, 2)
    name = {"log_smooth_sensitivity"}
    _assert_private(plan_d, plan_dp, "smooth_sensitivity_dp", part, "S_dp", reps=2_000_000)
    _expect_violation(
        _half_scale(plan_d, name), _half_scale(plan_dp, name), "smooth_sensitivity_dp", part,
        "S_dp half sigma", reps=2_000_000,
    )  # fmt: skip


def test_dim_sums_are_noised_where_neighbours_differ_by_at_most_the_sensitivity():
    """The arm sums are noised in grid units (``NoiseSpec.unit``): on neighbours (one treated
    outcome moved from 0 to ``B``) the values handed to the sampler differ by at most ``2^k``,
    exactly, the sensitivity the scale is computed from. Converted to outcome units first (the
    correctly rounded ``sum * B 2^-k``, what was noised before), the difference exceeds ``B`` by
    an ulp for about a third of such pairs at a non-dyadic ``B``: Laplace noise calibrated to
    ``B`` would then not quite give ``eps``."""
    from dpate_core.statistics import grid_bits

    rng = np.random.default_rng(0)
    bound, n = 1 / 3, 2000
    k, m = grid_bits(n, centred=False)
    converted_beyond_b = 0
    for _ in range(60):
        w, y = rng.integers(0, 2, n), rng.random(n) * bound
        i = int(np.flatnonzero(w == 1)[0])
        low, high = y.copy(), y.copy()
        low[i], high[i] = 0.0, bound
        specs = [
            {s.name: s for s in plan_difference_in_means(w, v, bound=bound, epsilon=1).noise}
            for v in (low, high)
        ]
        for name, units in (("sum_treated", k), ("sumsq_treated", m)):
            a, b = specs[0][name], specs[1][name]
            assert abs(Fraction(b.loc) - Fraction(a.loc)) <= Fraction(2) ** units
            assert a.loc == int(a.loc) and b.loc == int(b.loc)  # exact integers
        a, b = specs[0]["sum_treated"], specs[1]["sum_treated"]
        converted_beyond_b += abs(Fraction(float(b.value)) - Fraction(float(a.value))) > Fraction(
            bound
        )
    assert converted_beyond_b > 0  # the pairs exercise the rounding the grid units avoid


def test_the_computed_matching_estimate_stays_within_its_rounding_bound():
    """``matching_ate_float_error`` bounds ``|fl(tau_hat) - tau_hat|``: the compiled pass's
    estimate against Algorithm 1 in exact rational arithmetic, on data built to round (outcomes
    with long binary expansions, strata of very unequal sizes, a non-dyadic ``B``)."""
    from dpate_core.mechanisms.matching import matching_ate_float_error
    from dpate_core.statistics import matching_statistics

    rng = np.random.default_rng(3)
    bound = 1 / 3
    for n in (7, 200, 3000):
        for _ in range(5):
            w = rng.integers(0, 2, n)
            x = rng.choice(4, n, p=[0.7, 0.2, 0.08, 0.02])
            y = rng.random(n) * bound
            got = matching_statistics(w, y, x, 4, bound=bound).tau
            exact_tau = Fraction(0)
            for s in range(4):
                t = [Fraction(v) for v in y[(x == s) & (w == 1)]]
                c = [Fraction(v) for v in y[(x == s) & (w == 0)]]
                if t and c:  # Algorithm 1 as matched: the j-th of an arm to the other's j mod size
                    exact_tau += sum(t[j] - c[j % len(c)] for j in range(len(t)))
                    exact_tau += sum(t[j % len(t)] - c[j] for j in range(len(c)))
            exact_tau /= n
            err = abs(Fraction(got) - exact_tau)
            assert err <= Fraction(matching_ate_float_error(n, bound)), (n, float(err))
    with pytest.raises(ValueError, match="at least 1"):
        matching_ate_float_error(0, 1.0)
    assert matching_ate_float_error(10**7, 1.0) < 1.2e-9  # about n 2^-53 B


def _exact_grid_variance(w, y, x, n_strata, bound, k):
    """The appendix's ``V_hat`` of the outcomes quantised on ``B 2^-k``, in exact rationals, from
    Algorithm 1 as matched (the literal definition, one record at a time)."""
    to_grid = 2.0**k / bound  # the pass's record-wise map: a = rint(Y fl(2^k / B))
    a = [Fraction(int(np.rint(v * to_grid))) * Fraction(bound) / 2**k for v in y]
    total = Fraction(0)
    for s in range(n_strata):
        t = [a[i] for i in np.flatnonzero((x == s) & (w == 1))]
        c = [a[i] for i in np.flatnonzero((x == s) & (w == 0))]
        if not (t and c):
            continue
        for own, other in ((t, c), (c, t)):
            q, rem = divmod(len(other), len(own))
            for j, v in enumerate(own):
                big_l = q + (1 if j < rem else 0)
                total += (1 + big_l) ** 2 * (v - other[j % len(other)]) ** 2
    return total / (2 * len(y) ** 2)


def test_the_computed_matching_variance_is_the_exact_grid_value_rounded_once():
    """``V_hat`` as released is the appendix variance of the grid-quantised outcomes, exact and
    rounded once to the nearest float (so within ``matching_variance_float_error`` of it, for any
    data), and within a grid step's effect of the unquantised value."""
    from dpate_core.mechanisms.matching import matching_variance_float_error
    from dpate_core.statistics import variance_bits

    rng = np.random.default_rng(5)
    bound = 1 / 3
    for n in (7, 200, 3000):
        for _ in range(3):
            w = rng.integers(0, 2, n)
            x = rng.choice(4, n, p=[0.7, 0.2, 0.08, 0.02])
            y = rng.random(n) * bound
            got = matching_statistics(w, y, x, 4, bound=bound).variance
            exact = _exact_grid_variance(w, y, x, 4, bound, variance_bits(n))
            assert got == float(exact)  # correctly rounded: Fraction -> float
            assert abs(Fraction(got) - exact) <= Fraction(matching_variance_float_error(bound))
    # one treated record against every control: (1 + L)^2 = N^2, the largest V_hat can be
    n = 1001
    w, x, y = np.zeros(n, int), np.zeros(n, int), np.zeros(n)
    w[0], y[0] = 1, bound
    v = matching_statistics(w, y, x, 1, bound=bound).variance
    assert v == float(_exact_grid_variance(w, y, x, 1, bound, variance_bits(n)))
    assert bound**2 / 2 < v <= 2 * bound**2  # the bound 2 B^2 of the error's proof
    with pytest.raises(ValueError, match="positive"):
        matching_variance_float_error(0.0)


def test_the_variance_noise_covers_its_rounding_at_little_cost():
    """Both matching estimators noise ``V_hat`` with ``S_V`` plus twice its rounding bound; the
    padding is under 2% of ``S_V`` at a million records with a typical imbalance."""
    from dpate_core.mechanisms.matching import (
        matching_variance_float_error,
        matching_variance_smooth_sensitivity,
    )

    rng = np.random.default_rng(8)
    n = 10**6
    w = (rng.random(n) < 0.3).astype(np.int8)
    x = rng.integers(0, 50, n)
    y = rng.random(n)
    st = matching_statistics(w, y, x, 50, bound=1.0)
    for estimator in ("smooth_matching", "global_matching"):
        plan = plan_matching(estimator, st, bound=1.0, epsilon=1, delta=1e-5, domain_size=50)
        var_spec = next(s for s in plan.noise if s.name == "variance")
        p_var = plan.shares.apply(plan.total)[1]
        e2 = float(p_var.epsilon)
        s_var = matching_variance_smooth_sensitivity(
            st.treated_counts, st.control_counts, n, 1.0, smooth_beta(e2, float(p_var.delta)), 50
        )
        padded = s_var + 2 * matching_variance_float_error(1.0)
        assert var_spec.scale == pytest.approx(2 * padded / e2, rel=1e-12)
        assert var_spec.scale > 2 * s_var / e2
        assert 2 * matching_variance_float_error(1.0) < 0.02 * s_var
