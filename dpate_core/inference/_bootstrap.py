"""Intervals from published fields only: a parametric bootstrap for sites and combiners, and the
normal interval, each clipped and flagged by the rules of ``_interval.py``
(``docs/explanation/inference.md``).

Everything here is **post-processing** of DP releases and public design constants (``N``, ``B``,
``epsilon``, ``delta``, the budget split, the mechanisms' noise distributions): it costs no
privacy, and may therefore use ``numpy.random`` (invariant 5 is about noise that *protects* data;
the bootstrap's draws protect nothing). Every draw comes from a :class:`numpy.random.Generator`
seeded by a hash of the public inputs, so publishing the same reports again gives identical bytes.

Model (per site). A release is ``tau = theta + e_sampling + e_noise``. ``e_sampling`` is taken as
normal with the released sampling variance (``variance - noise_variance``, clamped at 0 by the
release); ``e_noise`` has the mechanism's public distribution, whose scale follows from published
fields: each estimator's ``noise_model`` (:class:`dpate_core.mechanisms.Estimator`). The model
also draws the *released variance* a re-run would
publish, so a combiner's selection (MVAgg dropping a site) is re-done in every bootstrap draw.

Interval: the basic (pivot) bootstrap ``[est - q_hi, est - q_lo]`` with ``q`` the quantiles of the
bootstrap error ``est* - est``; the bootstrap world's true effect is the published estimate
(common to all sites; DerSimonian-Laird adds its ``tau^2`` between sites). A re-run is published
as the release is, its ``tau`` clipped to ``[-B, B]``; where that clip touched a re-run the
interval also spans the percentile interval of the re-runs (:func:`_pivot`).

A site whose release is not resolved (``SiteEstimate.resolved``) has no interval, and no
combiner uses it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpate_core.aggregation import AggregateResult, aggregate
from dpate_core.intervals import normal_interval
from dpate_core.mechanisms import estimator_of
from dpate_core.release import SiteEstimate
from dpate_core.simulation import aggregate_many

from ._interval import Interval, clip_interval

__all__ = [
    "DEFAULT_DRAWS",
    "NoiseDraws",
    "PublicSite",
    "bootstrap_seed",
    "combined_bootstrap_interval",
    "combined_normal_interval",
    "combined_result",
    "public_site",
    "shared_sd",
    "site_bootstrap_interval",
    "site_draws",
    "site_normal_interval",
]


@dataclass(frozen=True)
class NoiseDraws:
    """``reps`` draws of a re-run of a mechanism in the bootstrap world: ``noise`` the error its DP
    noise adds to ``tau``; ``variance`` the variance the re-run would publish (an estimator's
    ``noise_model`` gives these, from published fields only)."""

    noise: np.ndarray
    variance: np.ndarray


#: bootstrap draws per interval: the 2.5% quantile then has a Monte Carlo error of ~0.3% of the
#: interval's width
DEFAULT_DRAWS = 20_000


# ---------------------------------------------------------------------------------------------
# A site's public fields


#: the published fields of one site's release that the noise models read (all public): a
#: :class:`~dpate_core.release.SiteEstimate` with its diagnostics as floats (:func:`public_site`)
PublicSite = SiteEstimate


def _number(value: Any) -> float:
    """A published number; ``None`` (an unresolved release's ``tau`` and variances) as NaN."""
    return math.nan if value is None else float(value)


def public_site(site: Any) -> SiteEstimate:
    """A :class:`~dpate_core.release.SiteEstimate` as published (diagnostics as floats, a missing
    ``raw_variance`` read as ``variance``, an unresolved release's ``null`` numbers as NaN) from a
    ``SiteEstimate``, its ``public_fields()`` dictionary, or a pydantic model of it
    (``dpate.schemas.reports.PublicEstimate``)."""
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
        resolved = bool(d.get("resolved", True))
        return SiteEstimate(
            estimator=str(d["estimator"]),
            tau=_number(d["tau"]),
            variance=_number(d["variance"]),
            raw_variance=_number(d.get("raw_variance", d["variance"])),
            n=int(d["n"]),
            n_treated=None if d.get("n_treated") is None else int(d["n_treated"]),
            n_control=None if d.get("n_control") is None else int(d["n_control"]),
            epsilon=Fraction(str(d["epsilon"])),
            delta=Fraction(str(d.get("delta", 0))),
            bound=float(d["bound"]),
            budget_split=tuple(Fraction(str(s)) for s in d["budget_split"]),
            diagnostics={k: float(v) for k, v in dict(d.get("diagnostics", {})).items()},
            resolved=resolved,
            unresolved_reason=None if resolved else str(d.get("unresolved_reason") or ""),
        )
    except KeyError as exc:
        raise ValueError(
            f"a site release lacks the public field {exc.args[0]!r}: pass "
            f"SiteEstimate.public_fields() as published"
        ) from None


# ---------------------------------------------------------------------------------------------
# A site's bootstrap draws (each estimator's noise model)


def site_draws(site: Any, rng: np.random.Generator, reps: int, own: bool = False) -> NoiseDraws:
    """The bootstrap world's ``reps`` re-runs of ``site``: total error of ``tau`` (sampling normal
    plus the estimator's noise model) and the variance each re-run would publish. ``own``: the
    error without the part the site shares with every other site (:func:`shared_sd`), which a
    combination draws once for all of them."""
    s = _resolved(public_site(site))
    d = estimator_of(s.estimator).noise_model(s, rng, reps)
    rest = s.sampling_variance - (shared_sd(s) ** 2 if own else 0.0)
    err = d.noise + math.sqrt(max(rest, 0.0)) * rng.standard_normal(reps)
    return NoiseDraws(err, d.variance)


def shared_sd(site: SiteEstimate) -> float:
    """The sd of the part of a site's error that is common to every site of the study (its
    published ``diagnostics["shared_sd"]``, in its variance already; 0 when it publishes none or
    is not resolved): the combiners add its cross terms (``dpate_core.aggregation.shared_term``)."""
    b = site.diagnostics.get("shared_sd", 0.0) if site.resolved else 0.0
    return float(b) if math.isfinite(b) else 0.0


# ---------------------------------------------------------------------------------------------
# Seeds


def bootstrap_seed(*parts: Any) -> int:
    """A 128-bit seed from the SHA-256 of the canonical JSON of public inputs."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:16], "big")


def _rng(seed: int | None, *parts: Any) -> np.random.Generator:
    return np.random.default_rng(bootstrap_seed(*parts) if seed is None else seed)


def _resolved(site: SiteEstimate) -> SiteEstimate:
    if not site.resolved:
        raise ValueError(
            f"the {site.estimator} release is not resolved ({site.unresolved_reason}): it has no "
            f"estimate, so no interval"
        )
    return site


def _pivot(
    estimate: float, errors: np.ndarray, level: float, clipped: np.ndarray | None = None
) -> tuple[float, float]:
    """The basic (pivot) interval ``[est - q_hi, est - q_lo]`` of the re-runs' errors
    ``est* - est``; when the clip to ``[-B, B]`` touched a re-run (``clipped``: the re-runs as
    published, else None), the hull of that and the percentile interval of the re-runs.

    The pivot reflects the re-runs' error about the estimate, which undoes the pull towards the
    middle that clipping gives a noisy release; at an end of the range the reflection is one-sided
    (a re-run cannot pass the end) and would shrink the interval onto the end point, where the
    percentile interval (the values a re-run publishes) still spans the spread. Without a clip the
    two agree for the symmetric noise every model draws, and the pivot alone is used.
    """
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        raise ValueError("no finite bootstrap draw: the releases cannot be combined")
    a = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(errors, [a, 1.0 - a])
    lo, hi = estimate - float(q_hi), estimate + -float(q_lo)
    if clipped is not None:
        p_lo, p_hi = np.quantile(clipped[np.isfinite(clipped)], [a, 1.0 - a])
        lo, hi = min(lo, float(p_lo)), max(hi, float(p_hi))
    return lo, hi


def _clip_reruns(tau: np.ndarray, bound: float) -> tuple[np.ndarray, bool]:
    """Re-runs published as the release is (``tau`` clipped to ``[-B, B]``), and whether the clip
    touched any."""
    clipped = np.clip(tau, -bound, bound)
    return clipped, bool(np.any(clipped != tau))


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")


def _check_draws(draws: int) -> None:
    if draws < 100:
        raise ValueError(f"draws ({draws}) must be at least 100 for a stable quantile")


# ---------------------------------------------------------------------------------------------
# Site intervals


def _site_parts(s: SiteEstimate) -> tuple[float | None, float | None]:
    """``(noise variance, sampling variance)`` of a site's release, for the noise rule (None,
    None: the release publishes no ``noise_variance``, and the rule does not apply)."""
    if "noise_variance" not in s.diagnostics:
        return None, None
    return s.noise_variance, s.sampling_variance


def site_normal_interval(site: Any, level: float = 0.95) -> Interval:
    """``tau +- z sqrt(variance)`` (:func:`dpate_core.intervals.normal_interval`), clipped and
    flagged (:func:`clip_interval`). A release that is not resolved has none (ValueError)."""
    s = _resolved(public_site(site))
    lo, hi = normal_interval(s.tau, s.variance, level)
    return clip_interval(s.tau, lo, hi, s.bound, level, "normal", *_site_parts(s))


def site_bootstrap_interval(
    site: Any, level: float = 0.95, draws: int = DEFAULT_DRAWS, seed: int | None = None
) -> Interval:
    """Parametric (pivot) bootstrap interval for one site's ATE from its published fields.

    Deterministic: ``seed=None`` derives the seed from the site's public fields, ``level`` and
    ``draws``. Each re-run is clipped to ``[-B, B]`` as the release is (:func:`_pivot`). A
    release that is not resolved has no interval (ValueError)."""
    _check_level(level)
    _check_draws(draws)
    s = _resolved(public_site(site))
    rng = _rng(seed, "site", s.public_fields(), level, draws)
    err = site_draws(s, rng, draws).noise
    reruns, clipped = _clip_reruns(s.tau + err, s.bound)
    if clipped:
        lo, hi = _pivot(s.tau, reruns - s.tau, level, reruns)
    else:
        lo, hi = _pivot(s.tau, err, level)
    return clip_interval(s.tau, lo, hi, s.bound, level, "bootstrap", *_site_parts(s))


# ---------------------------------------------------------------------------------------------
# Combined intervals


def _sites(sites: Sequence[Any]) -> list[SiteEstimate]:
    out = [public_site(s) for s in sites]
    if not out:
        raise ValueError("no site releases to combine")
    return out


def _combine(ps: list[SiteEstimate], method: str) -> AggregateResult:
    """The combiner on the published fields; unresolved sites are left out (``resolved``)."""
    return aggregate(
        method,
        [s.tau for s in ps],
        [s.n for s in ps],
        [s.variance for s in ps],
        [s.resolved for s in ps],
        [shared_sd(s) for s in ps],
    )


def combined_result(sites: Sequence[Any], method: str) -> AggregateResult:
    """The combiner on the sites' published fields (as reports carry them): unresolved sites
    left out, the parts the sites share (:func:`shared_sd`) added to the variance;
    :class:`~dpate_core.aggregation.NoUsableSiteError` when no site can be combined."""
    return _combine(_sites(sites), method)


def _combined_parts(
    ps: list[SiteEstimate], res: AggregateResult
) -> tuple[float | None, float | None]:
    """``(noise variance, sampling variance)`` of a combination: ``sum w_j^2 noise_j`` over the
    sites used, with the combiner's normalised weights, and the rest of its reported variance
    (the sites' sampling parts, and for random effects ``tau^2``); (None, None) when a site used
    publishes no ``noise_variance``."""
    used = list(zip(res.used, res.weights, strict=True))
    if any("noise_variance" not in ps[j].diagnostics for j, _ in used):
        return None, None
    noise = sum(w * w * ps[j].noise_variance for j, w in used)
    return noise, res.variance - noise


def combined_normal_interval(sites: Sequence[Any], method: str, level: float = 0.95) -> Interval:
    """The combiner's own normal interval (:func:`dpate_core.aggregation.aggregate`), clipped
    and flagged (:func:`clip_interval`); :class:`~dpate_core.aggregation.NoUsableSiteError` when
    no site can be combined (none resolved, say)."""
    ps = _sites(sites)
    res = _combine(ps, method)
    lo, hi = res.conf_int(level)
    bound = max(s.bound for s in ps)
    return clip_interval(res.estimate, lo, hi, bound, level, "normal", *_combined_parts(ps, res))


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
    ``tau^2``). Each draw re-runs every site from its noise model (a new ``tau``, clipped to
    ``[-B, B]`` as a release is, and a new released variance), then the vectorised combiner
    (:func:`dpate_core.simulation.aggregate_many`), so MVAgg's choice of sites is made again per
    draw. Sites the combiner cannot use (unresolved, or a non-finite or non-positive variance)
    stay out of every draw, as they are out of the estimate;
    :class:`~dpate_core.aggregation.NoUsableSiteError` when no site can be combined.
    """
    _check_level(level)
    _check_draws(draws)
    ps = _sites(sites)
    n = np.array([float(s.n) for s in ps])
    res = _combine(ps, method)
    bound = max(s.bound for s in ps)
    rng = _rng(seed, "combined", method, [s.public_fields() for s in ps], level, draws)
    usable = [j not in res.excluded for j in range(len(ps))]
    truth = np.full((draws, len(ps)), res.estimate)
    if method == "random_effects" and res.extra.get("tau2", 0.0) > 0:
        truth = truth + math.sqrt(res.extra["tau2"]) * rng.standard_normal((draws, len(ps)))
    tau_b = np.full((draws, len(ps)), np.nan)
    var_b = np.full((draws, len(ps)), np.nan)
    clipped = False
    # the part every site shares (a common bias), drawn once per re-run for all of them; none
    # published: no draw (the re-runs keep their bytes)
    shared = [shared_sd(s) if usable[j] else 0.0 for j, s in enumerate(ps)]
    common = rng.standard_normal(draws) if any(b > 0 for b in shared) else None
    for j, s in enumerate(ps):
        if not usable[j]:
            continue
        d = site_draws(s, rng, draws, own=common is not None)
        noise = d.noise if common is None else d.noise + shared[j] * common
        tau_b[:, j], touched = _clip_reruns(truth[:, j] + noise, s.bound)
        clipped = clipped or touched
        var_b[:, j] = d.variance
    est_b = aggregate_many(method, tau_b, n, var_b).estimate
    lo, hi = _pivot(res.estimate, est_b - res.estimate, level, est_b if clipped else None)
    parts = _combined_parts(ps, res)
    return clip_interval(res.estimate, lo, hi, bound, level, "bootstrap", *parts)
