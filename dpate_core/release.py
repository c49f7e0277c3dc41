"""The private releases a site makes: an ATE estimate and an estimate of its variance.

Each function is one mechanism with its privacy cost stated next to it: it spends exactly the
``(epsilon, delta)`` it is given (split by ``split`` among its parts, sequential composition) and
returns a :class:`SiteEstimate` holding public values only. ``rng=None`` draws secure noise
(OpenDP); a ``numpy.random.Generator`` is for simulations.

Neighbouring datasets replace one record; ``N`` is public. What else is assumed public is listed
per mechanism and in ``docs/privacy.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.estimators import MatchingStatistics, arm_sums, matching_statistics
from dpate_core.intervals import normal_interval
from dpate_core.noise import Rng, analytic_gaussian_sigma, gaussian, laplace, laplace_vector
from dpate_core.privacy import BudgetSplit, Number, PrivacyParams, exact, to_float
from dpate_core.sensitivity import (
    matching_global_sensitivity,
    matching_smooth_sensitivity,
    matching_variance_smooth_sensitivity,
    smooth_beta,
)

__all__ = [
    "ESTIMATORS",
    "MechanismPlan",
    "NoiseSpec",
    "Outputs",
    "SiteEstimate",
    "dp_difference_in_means",
    "draw_many",
    "draw_once",
    "global_dp_matching",
    "plan_difference_in_means",
    "plan_matching",
    "smooth_dp_matching",
]

ESTIMATORS = ("dim", "smooth_matching", "global_matching", "adjusted")  # dpate_core.registry


@dataclass(frozen=True)
class SiteEstimate:
    """One site's release. Every field is public: a DP output, a public design constant, or a
    post-processing of those.

    ``variance`` is the private estimate of ``V[tau_dp]`` after clamping its sampling part at 0;
    ``raw_variance`` is the same before clamping (it may be negative; kept for audit).
    ``n_treated`` / ``n_control`` are given only when the design treats arm sizes as public.
    """

    estimator: str
    tau: float
    variance: float
    raw_variance: float
    n: int
    n_treated: int | None
    n_control: int | None
    epsilon: Fraction
    delta: Fraction
    bound: float
    budget_split: tuple[Fraction, ...]
    diagnostics: dict[str, float] = field(default_factory=dict)

    @property
    def privacy(self) -> PrivacyParams:
        return PrivacyParams(self.epsilon, self.delta)

    def conf_int(self, level: float = 0.95) -> tuple[float, float]:
        """Normal interval ``tau +- z sqrt(variance)`` (post-processing)."""
        return normal_interval(self.tau, self.variance, level)

    def public_fields(self) -> dict[str, Any]:
        """JSON-ready dictionary; privacy parameters as exact strings."""
        return {
            "estimator": self.estimator,
            "tau": self.tau,
            "variance": self.variance,
            "raw_variance": self.raw_variance,
            "n": self.n,
            "n_treated": self.n_treated,
            "n_control": self.n_control,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "bound": self.bound,
            "budget_split": [str(s) for s in self.budget_split],
            "diagnostics": dict(self.diagnostics),
        }


def _check_bound(bound: float) -> float:
    bound = float(bound)
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    return bound


def _check_outcomes(y: np.ndarray, bound: float) -> None:
    # The privacy proof needs 0 <= Y <= B. Clipping is the data layer's job (schemas), done with the
    # public B before anything reaches here; the message carries the rule, never a value.
    if y.size and not (np.isfinite(y).all() and y.min() >= 0.0 and y.max() <= bound):
        raise ValueError(
            "outcomes must be finite and lie in [0, B]: clip or reject them with the study's "
            "public bound before the release"
        )


def _eps(p: PrivacyParams) -> float:
    """Epsilon as the float that scales noise: rounded down, so noise is never too small."""
    return to_float(p.epsilon, round_up=False)


def _delta(p: PrivacyParams) -> float:
    return to_float(p.delta, round_up=False)


def _scale(sensitivity: Number, p: PrivacyParams) -> float:
    """The Laplace scale ``sensitivity / epsilon`` computed exactly and rounded *up*, so the noise
    is never smaller than the exact ratio asks for (a float ``B / eps`` is rounded to nearest and
    can land one ulp below it). ``sensitivity`` is read exactly (a float as its binary value)."""
    sens = Fraction(sensitivity) if isinstance(sensitivity, float) else exact(sensitivity)
    return to_float(sens / p.epsilon, round_up=True)


# ---------------------------------------------------------------------------------------------
# Mechanism plans: everything computed from the data before noise, and how the noisy values
# assemble into the outputs. A release draws one secure value per noise site (``draw_once``); a
# simulation draws arrays of repetitions from a seeded generator (``draw_many``). Both go through
# the same ``assemble``, so the experiments measure exactly the mechanism that is released.


@dataclass(frozen=True)
class NoiseSpec:
    """One noise draw: ``loc + Lap(scale)`` or ``loc + N(0, scale^2)``.

    ``loc`` may be a 1-d float array (Laplace only): one independent draw per entry, released as
    one vector query (its privacy follows from the vector's L1 sensitivity).
    """

    name: str
    loc: float | np.ndarray
    scale: float
    kind: str  # "laplace" | "gaussian"


@dataclass(frozen=True)
class Outputs:
    """Assembled outputs; floats for a release, arrays (one entry per repetition) in simulations."""

    tau: Any
    variance: Any
    raw_variance: Any
    diagnostics: dict[str, Any]


@dataclass(frozen=True)
class MechanismPlan:
    """A mechanism ready to draw. Holds private values (``noise[i].loc``): never leaves the site."""

    estimator: str
    n: int
    n_treated: int | None
    n_control: int | None
    total: PrivacyParams
    bound: float
    shares: BudgetSplit
    noise: tuple[NoiseSpec, ...]
    assemble: Callable[[Mapping[str, Any]], Outputs]

    def estimate(self, noisy: Mapping[str, float]) -> SiteEstimate:
        out = self.assemble(noisy)
        return SiteEstimate(
            estimator=self.estimator,
            tau=float(out.tau),
            variance=float(out.variance),
            raw_variance=float(out.raw_variance),
            n=self.n,
            n_treated=self.n_treated,
            n_control=self.n_control,
            epsilon=self.total.epsilon,
            delta=self.total.delta,
            bound=self.bound,
            budget_split=self.shares.shares,
            diagnostics={k: float(v) for k, v in out.diagnostics.items()},
        )


def draw_once(plan: MechanismPlan, rng: Rng = None) -> dict[str, float]:
    """One draw per noise site: secure OpenDP noise when ``rng`` is None. A vector ``loc`` is
    drawn through one vector measurement (:func:`dpate_core.noise.laplace_vector`)."""
    sample = {"laplace": laplace, "gaussian": gaussian}
    out: dict[str, Any] = {}
    for spec in plan.noise:
        if _is_vector(spec):
            out[spec.name] = laplace_vector(spec.loc, spec.scale, rng)
        else:
            out[spec.name] = sample[spec.kind](spec.loc, spec.scale, rng)
    return out


def _is_vector(spec: NoiseSpec) -> bool:
    if not isinstance(spec.loc, np.ndarray):
        return False
    if spec.kind != "laplace" or spec.loc.ndim != 1:
        raise ValueError(
            f"noise site {spec.name!r}: a vector value must be 1-d and use Laplace noise"
        )
    return True


def draw_many(plan: MechanismPlan, rng: np.random.Generator, reps: int) -> dict[str, np.ndarray]:
    """``reps`` simulated draws per noise site (simulations only: numpy, not secure); a vector
    ``loc`` of ``k`` entries gives an array of shape ``(reps, k)``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError("draw_many is for simulations: pass a seeded numpy.random.Generator")
    out = {}
    for spec in plan.noise:
        if _is_vector(spec):
            z = rng.laplace(0.0, 1.0, (reps, spec.loc.size))
        elif spec.kind == "laplace":
            z = rng.laplace(0.0, 1.0, reps)
        else:
            z = rng.normal(0.0, 1.0, reps)
        out[spec.name] = spec.loc + spec.scale * z
    return out


def _release(plan: MechanismPlan, rng: Rng) -> SiteEstimate:
    return plan.estimate(draw_once(plan, rng))


# ---------------------------------------------------------------------------------------------
# Randomized trials: section 3.1.1


def plan_difference_in_means(
    w,
    y,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    arm_sizes_public: bool = True,
    binary: bool = False,
) -> MechanismPlan:
    """The plan of :func:`dp_difference_in_means` (see there for the privacy statement).

    ``binary=True``: every outcome is 0 or ``B`` (checked: an error names the rule). Then
    ``Y^2 = B Y``, so the arm sums give the variance too (``s^2 = B^2 p (1 - p)`` with
    ``p = mean / B``): no sums of squares are released and their budget part is dropped (parts:
    the arm sums, plus the treated count when arm sizes are private)."""
    if binary:
        return _plan_binary_dim(w, y, bound, epsilon, delta, split, arm_sizes_public)
    w_arr = np.asarray(w)
    y_arr = np.asarray(y, dtype=np.float64)
    bound = _check_bound(bound)
    _check_outcomes(y_arr, bound)
    given = PrivacyParams.of(epsilon, delta)  # validates delta; the mechanism spends none of it
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    n_t, n_c, s_t, s_c, q_t, q_c = arm_sums(w_arr, y_arr)
    n = n_t + n_c
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")

    noise: list[NoiseSpec] = []
    if arm_sizes_public:
        if n_t == 0 or n_c == 0:
            raise ValueError(f"both arms must be non-empty (treated {n_t}, control {n_c})")
        shares = BudgetSplit.of(split, 2)
        p_sum, p_sq = shares.apply(total)
        sum_scale, sq_scale = _scale(bound, p_sum), _scale(Fraction(bound) ** 2, p_sq)
    else:
        shares = BudgetSplit.of(split, 3)
        p_sum, p_sq, p_cnt = shares.apply(total)
        sum_scale = _scale(2 * Fraction(bound), p_sum)
        sq_scale = _scale(2 * Fraction(bound) ** 2, p_sq)
        noise.append(NoiseSpec("n_treated", float(n_t), _scale(1, p_cnt), "laplace"))
    noise += [
        NoiseSpec("sum_treated", s_t, sum_scale, "laplace"),
        NoiseSpec("sum_control", s_c, sum_scale, "laplace"),
        NoiseSpec("sumsq_treated", q_t, sq_scale, "laplace"),
        NoiseSpec("sumsq_control", q_c, sq_scale, "laplace"),
    ]

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {}
        if arm_sizes_public:
            nt_hat, nc_hat = float(n_t), float(n_c)
        else:
            nt_hat = np.clip(v["n_treated"], 1.0, n - 1.0)  # post-processing: both arms >= 1
            nc_hat = n - nt_hat
            diagnostics["n_treated_dp"] = nt_hat
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        var_t_raw = v["sumsq_treated"] / nt_hat - (st / nt_hat) ** 2
        var_c_raw = v["sumsq_control"] / nc_hat - (sc / nc_hat) ** 2
        noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        sampling_raw = var_t_raw / nt_hat + var_c_raw / nc_hat
        sampling = np.maximum(var_t_raw, 0.0) / nt_hat + np.maximum(var_c_raw, 0.0) / nc_hat
        diagnostics.update(sampling_variance_dp=sampling_raw, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling_raw + noise_var, diagnostics)

    return MechanismPlan(
        estimator="dim",
        n=n,
        n_treated=n_t if arm_sizes_public else None,
        n_control=n_c if arm_sizes_public else None,
        total=total,
        bound=bound,
        shares=shares,
        noise=tuple(noise),
        assemble=assemble,
    )


def _plan_binary_dim(w, y, bound, epsilon, delta, split, arm_sizes_public) -> MechanismPlan:
    """Difference in means of a binary outcome (0 or ``B``): same sums and noise as the general
    plan, the variance from ``p (1 - p)`` (post-processing of the noisy sums)."""
    w_arr = np.asarray(w)
    y_arr = np.asarray(y, dtype=np.float64)
    bound = _check_bound(bound)
    _check_outcomes(y_arr, bound)
    if y_arr.size and not np.all((y_arr == 0.0) | (y_arr == bound)):
        raise ValueError(
            "a binary outcome must be exactly 0 or B in every record: map the outcome's two "
            "labels to 0 and B, or remove outcome.binary from the spec"
        )
    given = PrivacyParams.of(epsilon, delta)
    total = PrivacyParams(given.epsilon, Fraction(0))
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    n_t, n_c, s_t, s_c, _, _ = arm_sums(w_arr, y_arr)
    n = n_t + n_c
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    noise: list[NoiseSpec] = []
    if arm_sizes_public:
        if n_t == 0 or n_c == 0:
            raise ValueError(f"both arms must be non-empty (treated {n_t}, control {n_c})")
        shares = BudgetSplit.of(split, 1)
        (p_sum,) = shares.apply(total)
        sum_scale = _scale(bound, p_sum)
    else:
        shares = BudgetSplit.of(split, 2)
        p_sum, p_cnt = shares.apply(total)
        sum_scale = _scale(2 * Fraction(bound), p_sum)
        noise.append(NoiseSpec("n_treated", float(n_t), _scale(1, p_cnt), "laplace"))
    noise += [
        NoiseSpec("sum_treated", s_t, sum_scale, "laplace"),
        NoiseSpec("sum_control", s_c, sum_scale, "laplace"),
    ]

    def assemble(v: Mapping[str, Any]) -> Outputs:
        diagnostics: dict[str, Any] = {"binary_outcome": 1.0}
        if arm_sizes_public:
            nt_hat, nc_hat = float(n_t), float(n_c)
        else:
            nt_hat = np.clip(v["n_treated"], 1.0, n - 1.0)
            nc_hat = n - nt_hat
            diagnostics["n_treated_dp"] = nt_hat
        st, sc = v["sum_treated"], v["sum_control"]
        tau = st / nt_hat - sc / nc_hat
        p_t = np.clip(st / (nt_hat * bound), 0.0, 1.0)
        p_c = np.clip(sc / (nc_hat * bound), 0.0, 1.0)
        sampling = bound * bound * (p_t * (1.0 - p_t) / nt_hat + p_c * (1.0 - p_c) / nc_hat)
        noise_var = 2.0 * sum_scale**2 * (1.0 / nt_hat**2 + 1.0 / nc_hat**2)
        diagnostics.update(sampling_variance_dp=sampling, noise_variance=noise_var)
        return Outputs(tau, sampling + noise_var, sampling + noise_var, diagnostics)

    return MechanismPlan(
        estimator="dim",
        n=n,
        n_treated=n_t if arm_sizes_public else None,
        n_control=n_c if arm_sizes_public else None,
        total=total,
        bound=bound,
        shares=shares,
        noise=tuple(noise),
        assemble=assemble,
    )


def dp_difference_in_means(
    w,
    y,
    *,
    bound: float,
    epsilon: Number,
    delta: Number = 0,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
    arm_sizes_public: bool = True,
) -> SiteEstimate:
    """DP difference in means and its private variance (section 3.1.1).

    Privacy: ``(epsilon, 0)``-DP. With ``arm_sizes_public=True`` (the paper's setting: ``W`` is
    design information, so ``N_t``, ``N_c`` are public and a neighbour changes one record's outcome
    within its arm), the budget splits in two: ``eps_1`` for the arm sums (``Lap(B/eps_1)`` each,
    parallel composition) and ``eps_2`` for the arm sums of squares (``Lap(B^2/eps_2)`` each).

    With ``arm_sizes_public=False`` a neighbour may also move a record between arms (ERRATA
    section 5); the budget splits in three: the pair of arm sums (L1 sensitivity ``2B``), the pair
    of sums of squares (``2B^2``), and the treated count (sensitivity 1; ``N_c = N - N_t``).

    ``delta`` is accepted for a uniform interface; it is not spent. Negative ``s^2`` from noisy
    sums are clamped at 0 after the release (post-processing); ``raw_variance`` keeps the value.
    """
    plan = plan_difference_in_means(
        w,
        y,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        split=split,
        arm_sizes_public=arm_sizes_public,
    )
    return _release(plan, rng)


# ---------------------------------------------------------------------------------------------
# Observational studies: Algorithm 2 and the appendix


def _require_delta(total: PrivacyParams, name: str) -> None:
    if total.epsilon <= 0:
        raise ValueError(f"epsilon ({total.epsilon}) must be positive for a release")
    if total.delta <= 0:
        raise ValueError(
            f"delta ({total.delta}) must be positive: {name} uses smooth sensitivity, which is "
            f"(epsilon, delta)-DP; give a small delta such as 1e-5"
        )


def _variance_noise(
    stats: MatchingStatistics, bound, p_var: PrivacyParams, domain_size
) -> NoiseSpec:
    """``V_hat + (2 S_V / eps_2) Lap(1)``: smooth-sensitivity Laplace on the variance estimate."""
    e2 = _eps(p_var)
    beta2 = smooth_beta(e2, _delta(p_var))
    s_var = matching_variance_smooth_sensitivity(
        stats.treated_counts, stats.control_counts, stats.n, bound, beta2, domain_size
    )
    return NoiseSpec("variance", stats.variance, 2.0 * s_var / e2, "laplace")


def _read_appendix(v: Mapping[str, Any]) -> Any:
    return v["variance"]


def _variance_part(variance, stats, cells, bound, p_var: PrivacyParams, domain_size):
    """The variance part of a matching plan: its noise sites and how to read ``V_dp`` back.

    ``"appendix"``: one smooth-sensitivity Laplace draw on ``V_hat`` (the paper's). ``"stratified"``:
    the three per-cell Laplace vectors of :func:`dpate_core.stratified_variance.stratified_noise`,
    the part's epsilon split by its ``SUBSPLIT`` (sensitivities of
    :func:`dpate_core.adjusted.sensitivities`); its delta is not spent."""
    if variance == "appendix":
        return (_variance_noise(stats, bound, p_var, domain_size),), _read_appendix
    from dpate_core.adjusted import THRESHOLD_FACTOR, CellStatistics, sensitivities
    from dpate_core.stratified_variance import SUBSPLIT, stratified_noise

    if not isinstance(cells, CellStatistics):
        raise ValueError(
            "variance = 'stratified' needs the per-cell statistics of the same records: pass "
            "cells=dpate_core.adjusted.cell_statistics(w, y, x, domain_size=..., bound=B)"
        )
    if (
        cells.n != stats.n
        or cells.bound > bound
        or cells.counts.size != 2 * stats.treated_counts.size
    ):
        raise ValueError(
            "the per-cell statistics do not match this release (N, the bound B and 2 |X| cells "
            "must agree): compute them from the same records with the study's domain size"
        )
    sens = sensitivities(cells.bound, cells.k, cells.m)
    p_n, p_s, p_q = BudgetSplit(SUBSPLIT).apply(PrivacyParams(p_var.epsilon, Fraction(0)))
    scales = (_scale(sens["counts"], p_n), _scale(sens["sums"], p_s), _scale(sens["squares"], p_q))
    noise, estimate = stratified_noise(cells, scales, max(2.0, THRESHOLD_FACTOR * scales[0]))
    return noise, estimate


def plan_matching(
    estimator: str,
    stats: MatchingStatistics,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    variance: str = "appendix",
    cells: Any = None,
) -> MechanismPlan:
    """The plan of :func:`smooth_dp_matching` or :func:`global_dp_matching` from the one-pass
    statistics of :func:`dpate_core.estimators.matching_statistics` (see those for the privacy
    statements). Experiments compute ``stats`` once per data split and reuse it.

    ``variance``: ``"appendix"`` (default, the paper's ``V_hat`` with its smooth sensitivity) or
    ``"stratified"``: the within-cell sampling variance of :mod:`dpate_core.stratified_variance`,
    released from noisy per-cell statistics (``cells``, from
    :func:`dpate_core.adjusted.cell_statistics` on the same records) with the variance part of
    the budget, pure ``(eps_2, 0)``-DP (``docs/privacy.md``, Stratified variance)."""
    if variance not in ("appendix", "stratified"):
        raise ValueError(
            f"variance ({variance!r}) must be 'appendix' (the paper's) or 'stratified'"
        )
    bound = _check_bound(bound)
    if stats.bound is None or stats.bound > bound:
        raise ValueError(
            "the matching statistics were not checked against this release's outcome bound B: "
            "compute them with matching_statistics(..., bound=B)"
        )
    total = PrivacyParams.of(epsilon, delta)
    n = stats.n
    if n < 2:
        raise ValueError(f"a release needs at least 2 records (got {n})")
    if estimator == "smooth_matching":
        _require_delta(total, "SmoothDPMatching")
        shares = BudgetSplit.of(split, 3)
        p_ate, p_var, p_sens = shares.apply(total)
        var_noise, var_read = _variance_part(variance, stats, cells, bound, p_var, domain_size)
        e1 = _eps(p_ate)
        beta1 = smooth_beta(e1, _delta(p_ate))
        s_ate = matching_smooth_sensitivity(
            stats.treated_counts, stats.control_counts, n, bound, beta1, domain_size
        )
        # ln S has global sensitivity beta_1 (S is beta_1-smooth); analytic Gaussian calibration
        sigma = analytic_gaussian_sigma(beta1 + 1e-12, _eps(p_sens), _delta(p_sens))
        noise = (
            NoiseSpec("tau", stats.tau, 2.0 * s_ate / e1, "laplace"),
            *var_noise,
            NoiseSpec("log_smooth_sensitivity", math.log(s_ate), sigma, "gaussian"),
        )

        def assemble(v: Mapping[str, Any]) -> Outputs:
            log_s = v["log_smooth_sensitivity"]
            s_dp = np.exp(log_s - sigma**2 / 2.0)  # unbiased for S (the Lemma)
            s2_dp = np.exp(2.0 * log_s - 2.0 * sigma**2)  # unbiased for S^2 (ERRATA 4)
            noise_var = 8.0 * s2_dp / e1**2
            v_dp = var_read(v)
            return Outputs(
                v["tau"],
                np.maximum(v_dp, 0.0) + noise_var,
                v_dp + noise_var,
                {
                    "smooth_sensitivity_dp": s_dp,
                    "sampling_variance_dp": v_dp,
                    "noise_variance": noise_var,
                },
            )

    elif estimator == "global_matching":
        _require_delta(total, "GlobalDPMatching's variance")
        shares = BudgetSplit.of(split, 2)
        p_ate, p_var = shares.apply(total)
        var_noise, var_read = _variance_part(variance, stats, cells, bound, p_var, domain_size)
        scale = _scale(matching_global_sensitivity(n, bound), p_ate)
        noise_var = 2.0 * scale * scale  # public
        noise = (NoiseSpec("tau", stats.tau, scale, "laplace"), *var_noise)

        def assemble(v: Mapping[str, Any]) -> Outputs:
            v_dp = var_read(v)
            return Outputs(
                v["tau"],
                np.maximum(v_dp, 0.0) + noise_var,
                v_dp + noise_var,
                {"sampling_variance_dp": v_dp, "noise_variance": noise_var},
            )

    else:
        raise ValueError(
            f"estimator ({estimator!r}) is not a matching estimator: use 'smooth_matching' or "
            f"'global_matching'"
        )
    return MechanismPlan(
        estimator=estimator,
        n=n,
        n_treated=None,
        n_control=None,
        total=total,
        bound=bound,
        shares=shares,
        noise=noise,
        assemble=assemble,
    )


def _matching_release(estimator, w, y, x, bound, epsilon, delta, domain_size, split, rng):
    # the outcome range [0, B] is checked inside the one compiled pass
    stats = matching_statistics(w, y, x, domain_size, bound=_check_bound(bound))
    plan = plan_matching(
        estimator,
        stats,
        bound=bound,
        epsilon=epsilon,
        delta=delta,
        domain_size=domain_size,
        split=split,
    )
    return _release(plan, rng)


def smooth_dp_matching(
    w,
    y,
    x,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
) -> SiteEstimate:
    """SmoothDPMatching (Algorithm 2) with its private variance (appendix), as corrected.

    Privacy: ``(epsilon, delta)``-DP by sequential composition of three parts (even split by
    default, the paper's ``eps/3, delta/3``):

    1. ``tau_dp = tau_hat + (2 S / eps_1) eta``, ``eta ~ Lap(1)``, ``S`` the beta_1-smooth bound of
       ERRATA section 1, ``beta_1 = eps_1 / (2 ln(2/delta_1))``: ``(eps_1, delta_1)``-DP.
    2. ``V_dp = V_hat + (2 S_V / eps_2) eta'`` with the variance's beta_2-smooth bound
       (ERRATA section 3): ``(eps_2, delta_2)``-DP.
    3. ``ln S_dp = ln S + z``, ``z ~ N(0, sigma^2)``; ``ln S`` has global sensitivity ``beta_1``
       because ``S`` is beta_1-smooth, and ``sigma`` is calibrated by the analytic Gaussian
       mechanism (ERRATA section 4): ``(eps_3, delta_3)``-DP.

    The reported variance is ``max(V_dp, 0) + 8 S2_dp / eps_1^2`` with
    ``S2_dp = exp(2 ln S + 2z - 2 sigma^2)``, unbiased for ``S^2`` (ERRATA section 4).
    Public: ``N``, ``B``, ``|X|`` (``domain_size``) and the covariate discretisation.
    Arm sizes are **not** released.
    """
    return _matching_release(
        "smooth_matching", w, y, x, bound, epsilon, delta, domain_size, split, rng
    )


def global_dp_matching(
    w,
    y,
    x,
    *,
    bound: float,
    epsilon: Number,
    delta: Number,
    domain_size: int | None = None,
    split: Sequence[Number] | None = None,
    rng: Rng = None,
) -> SiteEstimate:
    """GlobalDPMatching, the baseline: ``tau_hat + Lap(2B / eps_1)`` (ERRATA section 2: the global
    sensitivity is ``2B``, not the paper's ``B``), with the private variance of step 2 of
    :func:`smooth_dp_matching`.

    Privacy: ``(epsilon, delta)``-DP; even split in two by default. The Laplace step is pure
    ``eps_1``-DP; the ``delta_1`` share it receives is counted but not used. The noise variance
    ``2 (2B/eps_1)^2`` is public.
    """
    return _matching_release(
        "global_matching", w, y, x, bound, epsilon, delta, domain_size, split, rng
    )
