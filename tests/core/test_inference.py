"""Bootstrap intervals from published fields (dpate_core.inference, docs/explanation/inference.md).

Coverage is measured by simulation with fixed seeds on small designs where the DP noise dominates:
releases come from the project's own plans (``draw_many`` + ``assemble``), so they are the released
mechanism's outputs; every number below is deterministic.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from dpate_core.aggregation import NoUsableSiteError
from dpate_core.inference import (
    NOISE_DOMINATED,
    NOISE_RATIO,
    UNINFORMATIVE,
    UNINFORMATIVE_RULES,
    NoiseDraws,
    clip_interval,
    combined_bootstrap_interval,
    combined_normal_interval,
    public_site,
    site_bootstrap_interval,
    site_draws,
    site_normal_interval,
)
from dpate_core.mechanisms import estimator_of
from dpate_core.mechanisms.difference_in_means import plan_difference_in_means
from dpate_core.mechanisms.matching import plan_matching
from dpate_core.release import SiteEstimate, draw_many
from dpate_core.simulation import COMBINERS_MANY
from dpate_core.statistics import matching_statistics
from dpate_core.synth import split_proportions, synth


def releases(plan, rng: np.random.Generator, reps: int) -> list[SiteEstimate]:
    """``reps`` simulated releases of ``plan`` as the SiteEstimates a site would publish."""
    out = plan.assemble(draw_many(plan, rng, reps))
    return [plan.estimate_of(out, r) for r in range(reps)]


def _dim_data(rng, n=60, treated=None):
    t = n // 2 if treated is None else treated
    w = rng.permutation(np.repeat([0, 1], [n - t, t]))
    y = np.where(w == 1, 0.2 + 0.8 * rng.random(n), rng.random(n))  # true effect 0.1
    return w, y


def _coverage(pairs, truth):
    normal = np.mean([a.lo <= truth <= a.hi for a, _ in pairs])
    boot = np.mean([b.lo <= truth <= b.hi for _, b in pairs])
    width = np.mean([b.width for _, b in pairs]) / np.mean([a.width for a, _ in pairs])
    return normal, boot, width


def test_dim_site_bootstrap_covers_closer_to_nominal_when_noise_dominates():
    rng = np.random.default_rng(11)
    pairs = []
    for _ in range(300):  # fresh data draws x 10 noise draws; the small arm's Laplace dominates
        w, y = _dim_data(rng, 60, treated=10)
        plan = plan_difference_in_means(w, y, bound=1.0, epsilon="1/2", arm_sizes_public=True)
        for s in releases(plan, rng, 10):
            pairs.append((site_normal_interval(s), site_bootstrap_interval(s, draws=1000)))
    normal, boot, width = _coverage(pairs, 0.1)
    assert abs(boot - 0.95) < abs(normal - 0.95), (normal, boot)
    assert boot >= 0.94
    assert 1.0 < width < 1.15  # a little wider than the normal interval


def test_smooth_matching_site_intervals_cover_with_the_clipped_release():
    """SmoothDPMatching at N = 3,000, eps 1: its noise is large next to B, so a quarter of the
    releases pass the bound and are published clipped to B; a clipped estimate can only be closer
    to the truth, and both intervals (the bootstrap's re-runs clipped as the release is) cover at
    least nominally, the bootstrap more, at a width close to the normal interval's."""
    rng = np.random.default_rng(12)
    pairs, clipped = [], 0
    for _ in range(100):
        d = synth(3000, 20, a=0.0, seed=rng)
        stats = matching_statistics(d.w, d.y, d.x, 20, bound=1.0)
        plan = plan_matching(
            "smooth_matching", stats, bound=1.0, epsilon=1, delta="1e-5", domain_size=20
        )
        for s in releases(plan, rng, 15):
            assert -1.0 <= s.tau <= 1.0
            clipped += abs(s.tau) == 1.0
            pairs.append((site_normal_interval(s), site_bootstrap_interval(s, draws=2000)))
    normal, boot, width = _coverage(pairs, 0.5)
    assert clipped / len(pairs) > 0.15  # the clip is at work
    assert normal >= 0.95 and boot >= normal, (normal, boot)
    assert width < 1.1


def test_mvagg_under_selection_bootstrap_restores_coverage():
    """Little budget on the variance: MVAgg drops a site in most releases and its normal interval
    undercovers; the bootstrap re-does the selection per draw."""
    rng = np.random.default_rng(13)
    pairs, dropped = [], 0
    split = ("7/10", "1/20", "1/4")
    for _ in range(30):
        d = synth(6000, 20, a=0.0, seed=rng)
        plans = []
        for idx in split_proportions(6000, (1, 1, 1), rng):
            stats = matching_statistics(d.w[idx], d.y[idx], d.x[idx], 20, bound=1.0)
            plans.append(
                plan_matching(
                    "smooth_matching",
                    stats,
                    bound=1.0,
                    epsilon=1,
                    delta="1e-5",
                    domain_size=20,
                    split=split,
                )
            )
        per_site = [releases(p, rng, 20) for p in plans]
        for r in range(20):
            sites = [per_site[j][r] for j in range(3)]
            normal = combined_normal_interval(sites, "mvagg")
            pairs.append((normal, combined_bootstrap_interval(sites, "mvagg", draws=1000)))
            tau = np.array([[s.tau for s in sites]])
            var = np.array([[s.variance for s in sites]])
            dropped += int(COMBINERS_MANY["mvagg"](tau, [s.n for s in sites], var).used.sum() < 3)
    normal, boot, _ = _coverage(pairs, 0.5)
    assert dropped / len(pairs) > 0.5  # the selection is really at work
    assert normal < 0.91
    assert boot >= 0.92 and boot - normal >= 0.03, (normal, boot)


@pytest.mark.parametrize("estimator", ["dim", "global_matching", "smooth_matching", "adjusted"])
def test_noise_model_matches_the_mechanism_on_fixed_data(estimator):
    """With the data fixed, the model's noise draws have the spread of the release's tau."""
    rng = np.random.default_rng(14)
    d = synth(4000, 10, a=0.0, seed=rng)
    if estimator == "dim":
        plan = plan_difference_in_means(d.w, d.y, bound=1.0, epsilon="1/4", arm_sizes_public=True)
    elif estimator == "adjusted":
        from dpate_core.mechanisms.adjusted import plan_adjusted

        plan = plan_adjusted(d.w, d.y, d.x, bound=1.0, epsilon="1/4", domain_size=10)
    else:
        stats = matching_statistics(d.w, d.y, d.x, 10, bound=1.0)
        plan = plan_matching(estimator, stats, bound=1.0, epsilon=1, delta="1e-5", domain_size=10)
    # the mechanism's tau before the release clips it to [-B, B]: what a noise model describes
    taus = plan.assembly(draw_many(plan, rng, 40_000)).tau
    q_real = np.quantile(taus - np.mean(taus), [0.025, 0.975])
    ratios = []
    for site in releases(plan, rng, 15):  # the model's scale reads each release's public fields
        model = (
            estimator_of(estimator)
            .noise_model(public_site(site), np.random.default_rng(0), 20_000)
            .noise
        )
        q_model = np.quantile(model, [0.025, 0.975])
        ratios.append((q_model[1] - q_model[0]) / (q_real[1] - q_real[0]))
    # smooth: the model also carries the uncertainty of the released S, so it is a little wider
    # adjusted: its published noise variance is a delta-method value at the noisy point
    upper = {"smooth_matching": 1.5, "adjusted": 1.15}.get(estimator, 1.05)
    lower = 0.85 if estimator == "adjusted" else 0.95
    assert lower < np.median(ratios) < upper, ratios


def test_clipping_and_the_uninformative_flag():
    iv = clip_interval(0.9, 0.5, 1.4, 1.0, 0.95, "normal")
    assert (iv.estimate, iv.lo, iv.hi, iv.uninformative, iv.rules) == (0.9, 0.5, 1.0, False, ())
    assert iv.note == "" and iv.as_dict()["rules"] == []
    iv = clip_interval(1.3, -0.9, 1.2, 1.0, 0.95, "normal")  # 1.9 wide once clipped: wider than B
    assert (iv.estimate, iv.lo, iv.hi, iv.uninformative) == (1.0, -0.9, 1.0, True)
    assert iv.rules == ("width",)
    assert iv.note == f"{UNINFORMATIVE}: {UNINFORMATIVE_RULES['width']}"
    assert iv.as_dict()["uninformative"] is True and iv.as_dict()["rules"] == ["width"]
    # wholly beyond one end of the range: clipped, it collapses onto the bound, never read as
    # certainty; touching the bound from inside is not flagged
    for lo, hi, end in ((1.2, 1.5, 1.0), (-1.6, -1.0, -1.0)):
        iv = clip_interval((lo + hi) / 2, lo, hi, 1.0, 0.95, "normal")
        assert (iv.lo, iv.hi, iv.estimate, iv.uninformative) == (end, end, end, True)
        assert iv.rules == ("beyond",) and "outside the range" in iv.note
    assert not clip_interval(1.0, 0.99, 1.5, 1.0, 0.95, "normal").uninformative
    with pytest.raises(ValueError, match="bound"):
        clip_interval(0.0, -1.0, 1.0, 0.0, 0.95, "normal")
    with pytest.raises(ValueError, match="lo <= hi"):
        clip_interval(0.0, 1.0, -1.0, 1.0, 0.95, "normal")


def test_wider_than_the_outcome_range_is_uninformative():
    # the rule reads the outcome's range B, not the ATE's 2B: 1.2 B wide is flagged, 0.9 B not
    assert clip_interval(0.0, -0.6, 0.6, 1.0, 0.95, "normal").rules == ("width",)
    assert clip_interval(0.0, -0.45, 0.45, 1.0, 0.95, "normal").rules == ()
    # as published: clipped to [-B, B] first ([0.2, 1] says the effect is at least 0.2)
    assert clip_interval(0.8, 0.2, 1.4, 1.0, 0.95, "normal").rules == ()


def test_noise_nine_times_the_sampling_variance_is_flagged_mostly_noise():
    assert NOISE_RATIO == 9
    narrow = (0.3, 0.25, 0.35, 1.0, 0.95, "normal")
    noisy = clip_interval(*narrow, noise_variance=9.5e-4, sampling_variance=1e-4)
    assert noisy.rules == ("noise",) and noisy.noise_dominated
    # flagged, but a 0.1-wide interval still informs: not called uninformative
    assert not noisy.uninformative and noisy.note.startswith(f"{NOISE_DOMINATED}: ")
    assert clip_interval(*narrow, noise_variance=8e-4, sampling_variance=1e-4).rules == ()
    assert clip_interval(*narrow, noise_variance=1e-4, sampling_variance=0.0).rules == ("noise",)
    iv = clip_interval(0.3, -0.5, 1.1, 1.0, 0.95, "normal", 0.1, 0.001)
    assert iv.rules == ("width", "noise") and "9 times" in iv.note and "wider" in iv.note
    assert iv.uninformative and iv.note.startswith(f"{UNINFORMATIVE}: ")
    assert clip_interval(*narrow).rules == ()  # no parts given: the rule does not apply


def _dim_site(tau: float, noise_variance: float, sampling_variance: float, n: int = 1000):
    """A published difference-in-means release (public arms, even split) with these parts."""
    return SiteEstimate(
        estimator="dim", tau=tau, variance=noise_variance + sampling_variance,
        raw_variance=noise_variance + sampling_variance, n=n, n_treated=n // 2,
        n_control=n - n // 2, epsilon=Fraction(1), delta=Fraction(0), bound=1.0,
        budget_split=(Fraction(1, 2), Fraction(1, 2)),
        diagnostics={"noise_variance": noise_variance, "sampling_variance_dp": sampling_variance},
    )  # fmt: skip


def test_site_and_combined_intervals_read_the_noise_rule():
    noisy = _dim_site(0.3, 1e-3, 1e-5)  # noise 100 x sampling, yet only 0.13 wide
    for iv in (site_normal_interval(noisy), site_bootstrap_interval(noisy, draws=2000)):
        assert iv.rules == ("noise",) and iv.width < 0.2
    quiet = _dim_site(0.3, 1e-4, 1e-3)
    assert site_normal_interval(quiet).rules == ()
    bare = dataclasses.replace(noisy, diagnostics={})  # no published noise part: rule not applied
    assert site_normal_interval(bare).rules == ()
    assert combined_normal_interval([bare, bare], "all").rules == ()
    # a combination's parts: sum w_j^2 noise_j with the combiner's weights, and the rest of its
    # variance: AggAll's equal weights give noise 1.1e-3/4 against sampling 1.01e-3/4
    assert combined_normal_interval([noisy, quiet], "all").rules == ()
    two_noisy = combined_normal_interval([noisy, _dim_site(0.31, 1e-3, 1e-5)], "all")
    assert two_noisy.rules == ("noise",)
    assert combined_bootstrap_interval([noisy, noisy], "all", draws=1000).rules == ("noise",)


def test_a_clipped_release_is_rerun_clipped_in_the_bootstrap():
    # AggAll of a precise large site and a tiny site whose noise sd is 30 B: the tiny site's
    # release (and each re-run of it) lies in [-B, B], so it moves the combination by at most its
    # weight times B; a bootstrap of unclipped re-runs would spread it by weight x 30 B
    precise = _dim_site(0.3, 1e-6, 1e-6, n=9000)
    tiny = _dim_site(1.0, 900.0, 1e-6, n=1000)  # published clipped to B
    iv = combined_bootstrap_interval([precise, tiny], "all", draws=4000)
    assert iv.estimate == pytest.approx(0.9 * 0.3 + 0.1 * 1.0)
    assert iv.width < 0.5  # at most about 2 x 0.1 x B, never the whole range
    # a site at the bound is not shrunk onto it: its re-runs spread below the bound
    site = site_bootstrap_interval(_dim_site(1.0, 0.04, 1e-4), draws=4000)
    assert site.hi == 1.0 and site.lo < 0.7 and "beyond" not in site.rules


def test_unresolved_sites_have_no_interval_and_are_never_combined():
    resolved = _dim_site(0.3, 1e-4, 1e-4)
    unresolved = dataclasses.replace(
        resolved, estimator="adjusted", tau=math.nan, variance=math.nan, raw_variance=math.nan,
        resolved=False, unresolved_reason="no usable stratum", diagnostics={},
        n_treated=None, n_control=None,
    )  # fmt: skip
    with pytest.raises(ValueError, match="not resolved"):
        site_normal_interval(unresolved)
    with pytest.raises(ValueError, match="not resolved"):
        site_bootstrap_interval(unresolved.public_fields())
    for method in sorted(COMBINERS_MANY):
        alone = combined_normal_interval([resolved], method)
        assert combined_normal_interval([unresolved, resolved], method) == alone
        boot = combined_bootstrap_interval([unresolved, resolved], method, draws=500)
        assert boot.estimate == resolved.tau
        with pytest.raises(NoUsableSiteError, match="unresolved at this budget"):
            combined_bootstrap_interval([unresolved, unresolved.public_fields()], method)


def test_a_tiny_site_at_a_tiny_budget_is_flagged_uninformative():
    rng = np.random.default_rng(15)
    d = synth(200, 10, seed=rng)
    stats = matching_statistics(d.w, d.y, d.x, 10, bound=1.0)
    plan = plan_matching(
        "smooth_matching", stats, bound=1.0, epsilon="1/10", delta="1e-5", domain_size=10
    )
    s = releases(plan, rng, 1)[0]
    for iv in (site_bootstrap_interval(s), site_normal_interval(s)):
        assert iv.uninformative
        assert (iv.lo, iv.hi) == (-1.0, 1.0)
        assert -1.0 <= iv.estimate <= 1.0


def test_deterministic_given_the_public_fields():
    rng = np.random.default_rng(16)
    w, y = _dim_data(rng, 400)
    plan = plan_difference_in_means(w, y, bound=1.0, epsilon=1, arm_sizes_public=True)
    a, b = releases(plan, rng, 2)
    one = site_bootstrap_interval(a)
    assert one == site_bootstrap_interval(a)
    assert one == site_bootstrap_interval(a.public_fields())  # the published form gives the same
    assert one != site_bootstrap_interval(a, seed=1)
    assert one != site_bootstrap_interval(b)
    both = combined_bootstrap_interval([a, b], "mvagg")
    assert both == combined_bootstrap_interval([a.public_fields(), b.public_fields()], "mvagg")
    assert both.lo <= both.estimate <= both.hi


@pytest.mark.parametrize("method", sorted(COMBINERS_MANY))
def test_every_combiner_gets_a_bootstrap_interval(method):
    rng = np.random.default_rng(17)
    sites = []
    for n in (300, 600, 900):
        w, y = _dim_data(rng, n)
        plan = plan_difference_in_means(w, y, bound=1.0, epsilon=1, arm_sizes_public=True)
        sites += releases(plan, rng, 1)
    boot = combined_bootstrap_interval(sites, method, draws=2000)
    normal = combined_normal_interval(sites, method)
    assert boot.method == "bootstrap" and normal.method == "normal"
    assert boot.estimate == pytest.approx(normal.estimate)
    assert boot.lo < boot.estimate < boot.hi
    assert 0.7 < boot.width / normal.width < 1.5


def test_an_unusable_site_stays_out_of_every_draw():
    rng = np.random.default_rng(18)
    w, y = _dim_data(rng, 400)
    plan = plan_difference_in_means(w, y, bound=1.0, epsilon=1, arm_sizes_public=True)
    good, other = releases(plan, rng, 2)
    bad = dict(other.public_fields(), variance=float("nan"))
    with_bad = combined_bootstrap_interval([good, bad], "all")
    alone = combined_bootstrap_interval([good], "all")
    assert with_bad.estimate == alone.estimate
    assert with_bad.width == pytest.approx(alone.width, rel=0.05)


def test_private_arm_sizes_have_a_model():
    rng = np.random.default_rng(19)
    w, y = _dim_data(rng, 400)
    plan = plan_difference_in_means(w, y, bound=1.0, epsilon=1, arm_sizes_public=False)
    s = releases(plan, rng, 1)[0]
    iv = site_bootstrap_interval(s)
    assert iv.lo < iv.estimate < iv.hi


def test_a_new_estimator_brings_its_noise_model():
    from dpate_core.mechanisms import Estimator, register, unregister

    fields = {
        "estimator": "test_gaussian",
        "tau": 0.2,
        "variance": 0.01,
        "n": 100,
        "epsilon": "1",
        "delta": "0",
        "bound": 1.0,
        "budget_split": ["1"],
        "diagnostics": {"noise_variance": 0.0064},
    }
    with pytest.raises(ValueError, match=r"estimator \('test_gaussian'\) is not one of"):
        site_bootstrap_interval(fields)

    def model(site, rng, reps):
        return NoiseDraws(
            np.sqrt(site.noise_variance) * rng.standard_normal(reps), np.full(reps, site.variance)
        )

    def not_here(*args):
        raise NotImplementedError

    register(
        Estimator(
            name="test_gaussian",
            label="Gaussian toy",
            estimand="a toy's",
            parts=("all",),
            pure=True,
            designs=("randomized",),
            plan=not_here,
            noise_model=model,
            predict=not_here,
        )
    )
    try:
        iv = site_bootstrap_interval(fields, draws=20_000)
        assert iv.width == pytest.approx(2 * 1.96 * 0.1, rel=0.03)  # all normal: the z interval
        assert site_draws(fields, np.random.default_rng(0), 10).noise.shape == (10,)
    finally:
        unregister("test_gaussian")


def test_a_shared_part_widens_the_combined_intervals_alike():
    """Sites publishing ``diagnostics["shared_sd"]`` (a part of their error common to all, in
    their variance already): the combined normal interval's variance adds its cross terms, and
    the bootstrap draws that part once per re-run for every site, so both widen alike; the
    site's own interval is unchanged (the part is in its variance)."""
    from dpate_core.inference import combined_result, shared_sd

    base = [_dim_site(0.30 + 0.01 * j, 4e-4, 2e-4) for j in range(3)]
    b = 0.01  # its square within the sampling part, as a release's is
    shared = [dataclasses.replace(s, diagnostics={**s.diagnostics, "shared_sd": b}) for s in base]
    assert [shared_sd(s) for s in shared] == [b] * 3 and shared_sd(base[0]) == 0.0
    assert site_normal_interval(shared[0]).width == site_normal_interval(base[0]).width
    plain, common = combined_result(base, "all"), combined_result(shared, "all")
    assert common.variance == pytest.approx(plain.variance + 6 / 9 * b * b)
    normal = combined_normal_interval(shared, "all")
    boot = combined_bootstrap_interval(shared, "all", draws=4000)
    assert normal.width / combined_normal_interval(base, "all").width > 1.1
    assert boot.width == pytest.approx(normal.width, rel=0.08)
    assert combined_bootstrap_interval(base, "all", draws=4000).width < 0.93 * boot.width
