"""Intervals from published fields only: a parametric bootstrap for sites and combiners, the
normal interval, and the clipping / "uninformative at this budget" rule (``docs/inference.md``).

Everything here is **post-processing** of DP releases and public design constants (``N``, ``B``,
``epsilon``, ``delta``, the budget split, the mechanisms' noise distributions): it costs no
privacy, and may therefore use ``numpy.random`` (invariant 5 is about noise that *protects* data;
the bootstrap's draws protect nothing). Every draw comes from a :class:`numpy.random.Generator`
seeded by a hash of the public inputs, so publishing the same reports again gives identical bytes.

Model (per site). A release is ``tau = theta + e_sampling + e_noise``. ``e_sampling`` is taken as
normal with the released sampling variance (``variance - noise_variance``, clamped at 0 by the
release); ``e_noise`` has the mechanism's public distribution, whose scale follows from published
fields: one small function per estimator in :data:`NOISE_MODELS` (add an estimator with
:func:`register_noise_model`). The model also draws the *released variance* a re-run would
publish, so a combiner's selection (MVAgg dropping a site) is re-done in every bootstrap draw.

Interval: the basic (pivot) bootstrap ``[est - q_hi, est - q_lo]`` with ``q`` the quantiles of the
bootstrap error ``est* - est``; the bootstrap world's true effect is the published estimate
(common to all sites; DerSimonian-Laird adds its ``tau^2`` between sites).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.aggregation import aggregate
from dpate_core.intervals import normal_interval
from dpate_core.noise import analytic_gaussian_sigma
from dpate_core.privacy import PrivacyParams, to_float
from dpate_core.release import SiteEstimate
from dpate_core.sensitivity import smooth_beta
from dpate_core.simulation import aggregate_many

__all__ = [
    "DEFAULT_DRAWS",
    "NOISE_MODELS",
    "UNINFORMATIVE",
    "Interval",
    "NoiseDraws",
    "PublicSite",
    "bootstrap_seed",
    "clip_interval",
    "combined_bootstrap_interval",
    "combined_normal_interval",
    "public_site",
    "register_noise_model",
    "site_bootstrap_interval",
    "site_draws",
    "site_normal_interval",
]

#: bootstrap draws per interval: the 2.5% quantile then has a Monte Carlo error of ~0.3% of the
#: interval's width
DEFAULT_DRAWS = 20_000

#: the wording reports use for an interval at least as wide as the outcome's feasible range
UNINFORMATIVE = "uninformative at this budget"


# ---------------------------------------------------------------------------------------------
# Intervals, clipping and the uninformative flag


@dataclass(frozen=True)
class Interval:
    """A confidence interval for an ATE, clipped to the feasible range ``[-B, B]``.

    ``estimate`` is the point estimate clipped to that range (post-processing). ``uninformative``
    is True when the interval *before* clipping was at least ``2B`` wide: at this budget the data
    cannot say more than the range already does (reports say :data:`UNINFORMATIVE`).
    """

    estimate: float
    lo: float
    hi: float
    level: float
    method: str
    uninformative: bool
    bound: float

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def note(self) -> str:
        return UNINFORMATIVE if self.uninformative else ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields for a report."""
        return {
            "estimate": self.estimate,
            "lo": self.lo,
            "hi": self.hi,
            "level": self.level,
            "method": self.method,
            "uninformative": self.uninformative,
            "note": self.note,
        }


def clip_interval(
    estimate: float, lo: float, hi: float, bound: float, level: float, method: str
) -> Interval:
    """Clip an estimate and its interval to ``[-B, B]`` and flag an interval ``>= 2B`` wide.

    Every ATE of outcomes in ``[0, B]`` lies in ``[-B, B]``, so clipping is post-processing that
    can only move an end towards the truth; the flag reads the width before clipping.
    """
    b = float(bound)
    if not (b > 0 and math.isfinite(b)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"interval ends ({lo}, {hi}) must be finite with lo <= hi")
    return Interval(
        estimate=min(max(float(estimate), -b), b),
        lo=min(max(float(lo), -b), b),
        hi=min(max(float(hi), -b), b),
        level=float(level),
        method=method,
        uninformative=(hi - lo) >= 2.0 * b,
        bound=b,
    )


# ---------------------------------------------------------------------------------------------
# A site's public fields


#: the published fields of one site's release that the noise models read (all public): a
#: :class:`~dpate_core.release.SiteEstimate` with its diagnostics as floats (:func:`public_site`)
PublicSite = SiteEstimate


def public_site(site: Any) -> SiteEstimate:
    """A :class:`~dpate_core.release.SiteEstimate` as published (diagnostics as floats, a missing
    ``raw_variance`` read as ``variance``) from a ``SiteEstimate``, its ``public_fields()``
    dictionary, or a pydantic model of it (``dpate.schemas.report.PublicEstimate``)."""
    if hasattr(site, "public_fields"):
        d = site.public_fields()
    elif hasattr(site, "model_dump"):
        d = site.model_dump(mode="json")
    elif isinstance(site, Mapping):
        d = site
    else:
        raise TypeError(
            f"a site release must be a SiteEstimate or its public fields, not {type(site).__name__}"
        )
    try:
        return SiteEstimate(
            estimator=str(d["estimator"]),
            tau=float(d["tau"]),
            variance=float(d["variance"]),
            raw_variance=float(d.get("raw_variance", d["variance"])),
            n=int(d["n"]),
            n_treated=None if d.get("n_treated") is None else int(d["n_treated"]),
            n_control=None if d.get("n_control") is None else int(d["n_control"]),
            epsilon=Fraction(str(d["epsilon"])),
            delta=Fraction(str(d.get("delta", 0))),
            bound=float(d["bound"]),
            budget_split=tuple(Fraction(str(s)) for s in d["budget_split"]),
            diagnostics={k: float(v) for k, v in dict(d.get("diagnostics", {})).items()},
        )
    except KeyError as exc:
        raise ValueError(
            f"a site release lacks the public field {exc.args[0]!r}: pass "
            f"SiteEstimate.public_fields() as published"
        ) from None


# ---------------------------------------------------------------------------------------------
# Noise models from public fields: one function per estimator


@dataclass(frozen=True)
class NoiseDraws:
    """``reps`` draws of a re-run of the mechanism in the bootstrap world: ``noise`` the error the
    DP noise adds to ``tau``; ``variance`` the variance the re-run would publish."""

    noise: np.ndarray
    variance: np.ndarray


NoiseModel = Callable[[SiteEstimate, np.random.Generator, int], NoiseDraws]

#: estimator name -> its noise model from public fields
NOISE_MODELS: dict[str, NoiseModel] = {}


def register_noise_model(estimator: str) -> Callable[[NoiseModel], NoiseModel]:
    """Decorator: register ``fn(site, rng, reps) -> NoiseDraws`` as ``estimator``'s model.

    A new estimator needs one such function: the error its noise adds to ``tau`` (from the public
    scales) and the released variance a re-run would publish (``site.variance`` if it is not
    random given the public fields)."""

    def wrap(fn: NoiseModel) -> NoiseModel:
        NOISE_MODELS[estimator] = fn
        return fn

    return wrap


def _eps(p: PrivacyParams) -> float:
    return to_float(p.epsilon, round_up=False)


def _held(site: SiteEstimate, reps: int) -> np.ndarray:
    return np.full(reps, site.variance)


@register_noise_model("dim")
def _dim_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """Difference in means (section 3.1.1): ``Lap(s)/N_t - Lap(s)/N_c`` with ``s`` the public
    sum scale, read back from ``noise_variance = 2 s^2 (1/N_t^2 + 1/N_c^2)``; the re-run's
    sampling variance moves by the sums of squares' ``Lap(q)`` (``q = B^2/eps_2``, or ``2B^2``
    with private arm sizes) over ``N_t^2`` and ``N_c^2``. With private arm sizes the treated count's
    ``Lap(1/eps_3)`` moves ``tau`` by about ``-(B/2)(1/N_t + 1/N_c)`` per unit (the arm means are
    not published: ``B/2`` is their midpoint)."""
    public_arms = site.n_treated is not None and site.n_control is not None
    if public_arms:
        nt, nc = float(site.n_treated), float(site.n_control)  # type: ignore[arg-type]
    else:
        nt = float(site.diagnostics["n_treated_dp"])
        nc = site.n - nt
    s = math.sqrt(site.noise_variance / (2.0 * (1.0 / nt**2 + 1.0 / nc**2)))
    noise = s * (rng.laplace(0.0, 1.0, reps) / nt - rng.laplace(0.0, 1.0, reps) / nc)
    parts = site.shares()
    if site.diagnostics.get("binary_outcome"):  # binary outcome: no sums of squares released
        if not public_arms:
            slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
            noise = noise - slope * rng.laplace(0.0, 1.0, reps) / _eps(parts[1])
        return NoiseDraws(noise, _held(site, reps))
    b2 = site.bound**2 if public_arms else 2.0 * site.bound**2
    q = b2 / _eps(parts[1])
    if not public_arms:
        count_scale = 1.0 / _eps(parts[2])
        slope = 0.5 * site.bound * (1.0 / nt + 1.0 / nc)
        noise = noise - slope * count_scale * rng.laplace(0.0, 1.0, reps)
    sampling = np.maximum(
        site.sampling_variance
        + q * (rng.laplace(0.0, 1.0, reps) / nt**2 + rng.laplace(0.0, 1.0, reps) / nc**2),
        0.0,
    )
    return NoiseDraws(noise, sampling + site.noise_variance)


@register_noise_model("global_matching")
def _global_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """GlobalDPMatching: ``Lap(2B/eps_1)``, scale ``sqrt(noise_variance / 2)`` (public). The
    variance's noise scale ``2 S_V/eps_2`` is data-dependent and not published: the released
    variance is held."""
    scale = math.sqrt(site.noise_variance / 2.0)
    return NoiseDraws(scale * rng.laplace(0.0, 1.0, reps), _held(site, reps))


@register_noise_model("smooth_matching")
def _smooth_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """SmoothDPMatching (Algorithm 2): ``Lap(2 S_dp / eps_1)`` with ``S_dp`` the released smooth
    sensitivity (diagnostic ``smooth_sensitivity_dp``). A re-run releases
    ``ln S + z``, ``z ~ N(0, sigma^2)`` with the public ``sigma`` of the analytic Gaussian
    mechanism (``beta_1``-sensitive, budget part 3), so its noise variance
    ``8 exp(2 ln S + 2z - 2 sigma^2) / eps_1^2`` is redrawn; ``V_dp``'s noise scale is not
    published, so the sampling part is held."""
    p_ate, _, p_sens = site.shares()
    e1 = _eps(p_ate)
    s_dp = float(site.diagnostics["smooth_sensitivity_dp"])
    beta1 = smooth_beta(e1, to_float(p_ate.delta, round_up=False))
    sigma = analytic_gaussian_sigma(
        beta1 + 1e-12, _eps(p_sens), to_float(p_sens.delta, round_up=False)
    )
    # ln S_dp = ln S + z0 - sigma^2/2 with z0 ~ N(0, sigma^2) public in law: the bootstrap world's
    # S is drawn as S_dp exp(sigma^2/2 - z1), so the interval carries the uncertainty of S_dp
    s_true = s_dp * np.exp(sigma**2 / 2.0 - rng.normal(0.0, sigma, reps))
    noise = (2.0 * s_true / e1) * rng.laplace(0.0, 1.0, reps)
    # a re-run releases S2_dp = S^2 exp(2z - 2 sigma^2), mean S^2
    z = rng.normal(0.0, sigma, reps)
    noise_var = 8.0 * s_true**2 * np.exp(2.0 * z - 2.0 * sigma**2) / e1**2
    return NoiseDraws(noise, site.sampling_variance + noise_var)


@register_noise_model("adjusted")
def _adjusted_model(site: SiteEstimate, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """DP subclassification (``dpate_core.adjusted``, ``docs/adjusted.md``): the error is a sum of
    Laplace terms over the usable strata's cells (sums and counts, delta method), whose total
    variance is the published ``noise_variance``. Per-cell counts are not published, so the
    model spreads that variance evenly over ``2 k`` Laplace terms, ``k`` the published
    ``usable_strata`` (capped at 32 terms, where the sum is already close to normal): one stratum
    gives the shape of a difference of two Laplaces, many give a normal. The sampling part's noise
    scale depends on unpublished cell counts: the released variance is held."""
    k = int(min(max(site.diagnostics.get("usable_strata", 1.0), 1.0), 16.0))
    terms = rng.laplace(0.0, 1.0, (reps, 2 * k)).sum(axis=1)
    noise = math.sqrt(site.noise_variance / (2.0 * 2 * k)) * terms
    return NoiseDraws(noise, _held(site, reps))


def site_draws(site: Any, rng: np.random.Generator, reps: int) -> NoiseDraws:
    """The bootstrap world's ``reps`` re-runs of ``site``: total error of ``tau`` (sampling normal
    plus the estimator's noise model) and the variance each re-run would publish."""
    s = public_site(site)
    try:
        model = NOISE_MODELS[s.estimator]
    except KeyError:
        raise ValueError(
            f"no noise model for estimator {s.estimator!r} (known: {sorted(NOISE_MODELS)}): "
            f"register one with dpate_core.inference.register_noise_model"
        ) from None
    d = model(s, rng, reps)
    err = d.noise + math.sqrt(s.sampling_variance) * rng.standard_normal(reps)
    return NoiseDraws(err, d.variance)


# ---------------------------------------------------------------------------------------------
# Seeds


def bootstrap_seed(*parts: Any) -> int:
    """A 128-bit seed from the SHA-256 of the canonical JSON of public inputs."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "big")


def _rng(seed: int | None, *parts: Any) -> np.random.Generator:
    return np.random.default_rng(bootstrap_seed(*parts) if seed is None else seed)


def _pivot(estimate: float, errors: np.ndarray, level: float) -> tuple[float, float]:
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        raise ValueError("no finite bootstrap draw: the releases cannot be combined")
    a = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(errors, [a, 1.0 - a])
    return estimate - float(q_hi), estimate + -float(q_lo)


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")


def _check_draws(draws: int) -> None:
    if draws < 100:
        raise ValueError(f"draws ({draws}) must be at least 100 for a stable quantile")


# ---------------------------------------------------------------------------------------------
# Site intervals


def site_normal_interval(site: Any, level: float = 0.95) -> Interval:
    """``tau +- z sqrt(variance)`` (:func:`dpate_core.intervals.normal_interval`), clipped."""
    s = public_site(site)
    lo, hi = normal_interval(s.tau, s.variance, level)
    return clip_interval(s.tau, lo, hi, s.bound, level, "normal")


def site_bootstrap_interval(
    site: Any, level: float = 0.95, draws: int = DEFAULT_DRAWS, seed: int | None = None
) -> Interval:
    """Parametric (pivot) bootstrap interval for one site's ATE from its published fields.

    Deterministic: ``seed=None`` derives the seed from the site's public fields, ``level`` and
    ``draws``."""
    _check_level(level)
    _check_draws(draws)
    s = public_site(site)
    rng = _rng(seed, "site", s.public_fields(), level, draws)
    err = site_draws(s, rng, draws).noise
    lo, hi = _pivot(s.tau, err, level)
    return clip_interval(s.tau, lo, hi, s.bound, level, "bootstrap")


# ---------------------------------------------------------------------------------------------
# Combined intervals


def _sites(sites: Sequence[Any]) -> list[SiteEstimate]:
    out = [public_site(s) for s in sites]
    if not out:
        raise ValueError("no site releases to combine")
    return out


def combined_normal_interval(sites: Sequence[Any], method: str, level: float = 0.95) -> Interval:
    """The combiner's own normal interval (:func:`dpate_core.aggregation.aggregate`), clipped."""
    ps = _sites(sites)
    res = aggregate(method, [s.tau for s in ps], [s.n for s in ps], [s.variance for s in ps])
    lo, hi = res.conf_int(level)
    return clip_interval(res.estimate, lo, hi, max(s.bound for s in ps), level, "normal")


def combined_bootstrap_interval(
    sites: Sequence[Any],
    method: str,
    level: float = 0.95,
    draws: int = DEFAULT_DRAWS,
    seed: int | None = None,
) -> Interval:
    """Parametric (pivot) bootstrap interval for a combined estimate, selection included.

    The bootstrap world's sites share the true effect ``est`` (the published combined estimate;
    for ``random_effects`` each site's effect is ``est + N(0, tau^2)`` with DerSimonian-Laird's
    ``tau^2``). Each draw re-runs every site from its noise model (a new ``tau`` and a new released
    variance), then the vectorised combiner (:func:`dpate_core.simulation.aggregate_many`), so
    MVAgg's choice of sites is made again per draw. Sites the combiner cannot use (non-finite or
    non-positive variance) stay out of every draw, as they are out of the estimate.
    """
    _check_level(level)
    _check_draws(draws)
    ps = _sites(sites)
    tau = np.array([s.tau for s in ps])
    n = np.array([float(s.n) for s in ps])
    var = np.array([s.variance for s in ps])
    res = aggregate(method, tau, n, var)
    rng = _rng(seed, "combined", method, [s.public_fields() for s in ps], level, draws)
    usable = [j not in res.excluded for j in range(len(ps))]
    truth = np.full((draws, len(ps)), res.estimate)
    if method == "random_effects" and res.extra.get("tau2", 0.0) > 0:
        truth = truth + math.sqrt(res.extra["tau2"]) * rng.standard_normal((draws, len(ps)))
    tau_b = np.full((draws, len(ps)), np.nan)
    var_b = np.full((draws, len(ps)), np.nan)
    for j, s in enumerate(ps):
        if not usable[j]:
            continue
        d = site_draws(s, rng, draws)
        tau_b[:, j] = truth[:, j] + d.noise
        var_b[:, j] = d.variance
    est_b = aggregate_many(method, tau_b, n, var_b).estimate
    lo, hi = _pivot(res.estimate, est_b - res.estimate, level)
    return clip_interval(res.estimate, lo, hi, max(s.bound for s in ps), level, "bootstrap")
