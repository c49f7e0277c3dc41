"""The private releases a site makes: an ATE estimate and an estimate of its variance.

This module holds what every mechanism shares: the :class:`MechanismPlan` (everything computed from
the data before noise, and how the noisy values assemble into the outputs), the draw machinery
(:func:`draw_once` for a release, :func:`draw_many` for simulations), the public
:class:`SiteEstimate` a release returns, and the checks every plan uses. Each mechanism lives in its
own package of :mod:`dpate_core.mechanisms` with its privacy cost stated next to it. A mechanism
spends exactly the ``(epsilon, delta)`` it is given (split by ``split`` among its parts, sequential
composition) and returns a :class:`SiteEstimate` holding public values only. ``rng=None`` draws
secure noise (OpenDP); a ``numpy.random.Generator`` is for simulations.

Neighbouring datasets replace one record; ``N`` is public. What else is assumed public is listed
per mechanism and in ``docs/explanation/privacy.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from dpate_core.intervals import normal_interval
from dpate_core.noise import Rng, gaussian, integer_laplace_vector, laplace, laplace_vector
from dpate_core.privacy import BudgetSplit, PrivacyParams

__all__ = [
    "NOT_BINARY",
    "DrawnRelease",
    "MechanismPlan",
    "NoiseSpec",
    "Outputs",
    "PublishedAssembly",
    "SiteEstimate",
    "Stage",
    "check_binary_outcomes",
    "check_bound",
    "check_outcomes",
    "draw_many",
    "draw_once",
    "noise_free",
    "release_once",
]


@dataclass(frozen=True)
class SiteEstimate:
    """One site's release. Every field is public: a DP output, a public design constant, or a
    post-processing of those.

    ``tau`` lies in the feasible range ``[-B, B]`` (clipped, post-processing:
    :class:`PublishedAssembly`). ``variance`` is the private estimate of ``V[tau_dp]`` after
    clamping its sampling part at 0; ``raw_variance`` is the same before clamping (it may be
    negative; kept for audit). ``n_treated`` / ``n_control`` are given only when the design
    treats arm sizes as public.

    ``resolved`` is False when the mechanism's noisy values do not determine an estimate at this
    budget (e.g. the adjusted estimator's fixed effects whose noisy denominator is not clearly
    above its noise): ``tau``, ``variance`` and ``raw_variance`` are then NaN (``null`` in
    :meth:`public_fields`), the variance parts are left out of ``diagnostics``, and
    ``unresolved_reason`` says in words why. The flag is a function of the noisy values and
    public constants only: post-processing, no privacy cost (``docs/explanation/privacy.md``).
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
    resolved: bool = True
    unresolved_reason: str | None = None

    @property
    def privacy(self) -> PrivacyParams:
        return PrivacyParams(self.epsilon, self.delta)

    @property
    def noise_variance(self) -> float:
        """The released variance of the DP noise (``diagnostics["noise_variance"]``; NaN when
        the release is not resolved)."""
        if not self.resolved:
            return math.nan
        return float(self.diagnostics["noise_variance"])

    @property
    def sampling_variance(self) -> float:
        """The released sampling part of the variance (``variance - noise_variance``, >= 0; NaN
        when the release is not resolved)."""
        if not self.resolved:
            return math.nan
        return max(self.variance - self.noise_variance, 0.0)

    def shares(self) -> tuple[PrivacyParams, ...]:
        """The budget of each part, as the release split it."""
        return BudgetSplit(self.budget_split).apply(self.privacy)

    def conf_int(self, level: float = 0.95) -> tuple[float, float]:
        """Normal interval ``tau +- z sqrt(variance)`` (post-processing)."""
        return normal_interval(self.tau, self.variance, level)

    def public_fields(self) -> dict[str, Any]:
        """JSON-ready dictionary; privacy parameters as exact strings. An unresolved release has
        ``tau``, ``variance`` and ``raw_variance`` None (JSON ``null``), never a number, and
        ``resolved`` False with its ``unresolved_reason``; a resolved one leaves those two keys
        out (a reader takes their absence as resolved)."""
        fields: dict[str, Any] = {
            "estimator": self.estimator,
            "tau": self.tau if self.resolved else None,
            "variance": self.variance if self.resolved else None,
            "raw_variance": self.raw_variance if self.resolved else None,
            "n": self.n,
            "n_treated": self.n_treated,
            "n_control": self.n_control,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "bound": self.bound,
            "budget_split": [str(s) for s in self.budget_split],
            "diagnostics": dict(self.diagnostics),
        }
        if not self.resolved:
            fields.update(resolved=False, unresolved_reason=self.unresolved_reason)
        return fields


def check_bound(bound: float) -> float:
    """``B`` as a float, or an error when it is not positive and finite."""
    bound = float(bound)
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    return bound


def check_outcomes(y: npt.NDArray[np.float64], bound: float) -> None:
    """Refuse outcomes outside ``[0, B]`` (the privacy proofs need them there)."""
    # The privacy proof needs 0 <= Y <= B. Clipping is the data layer's job (schemas), done with the
    # public B before anything reaches here; the message carries the rule, never a value.
    if y.size and not (np.isfinite(y).all() and y.min() >= 0.0 and y.max() <= bound):
        raise ValueError(
            "outcomes must be finite and lie in [0, B]: clip or reject them with the study's "
            "public bound before the release"
        )


#: the rule a binary outcome breaks (named, never a value)
NOT_BINARY = (
    "a binary outcome must be exactly 0 or B in every record: map the outcome's two labels to 0 "
    "and B, or remove outcome.binary from the spec"
)


def check_binary_outcomes(y: npt.NDArray[np.float64], bound: float) -> None:
    """Refuse a binary outcome with a value other than 0 or ``B`` (:data:`NOT_BINARY`): a
    binary-outcome release derives the squares or variances from the sums, which holds only
    then."""
    if y.size and not np.all((y == 0.0) | (y == bound)):
        raise ValueError(NOT_BINARY)


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

    ``unit``: ``loc`` and ``scale`` are in units of ``unit`` (a power-of-two multiple of ``B``
    or ``B^2``, e.g. the grids ``B 2^-k`` and ``B^2 2^-m`` of :mod:`dpate_core.statistics`). The
    noise is drawn in those units, on the exact integer ``loc`` with the sensitivity stated in the
    same units, and the noisy value is multiplied by ``unit`` afterwards (post-processing, in
    :func:`draw_once` and :func:`draw_many`), so a statistic whose neighbours differ by exactly
    ``B`` on the grid is never noised after a rounded conversion to outcome units (which could
    move it by one more ulp than the sensitivity allows). This is the one convention for grid
    units: every assembly receives outcome units (the difference in means' arm sums, the adjusted
    estimator's and the stratified variance's cell vectors,
    :func:`dpate_core.statistics.cell_noise`), and whatever reads a noise site in those units
    reads :attr:`value` and :attr:`value_scale`, not ``loc`` and ``scale``.
    """

    name: str
    loc: float | npt.NDArray[np.float64]
    scale: float
    kind: str  # "laplace" | "gaussian" | "integer_laplace" (integer values: exact DLap)
    unit: float = 1.0

    @property
    def value(self) -> float | npt.NDArray[np.float64]:
        """The statistic in the units the assembly reads (``loc * unit``; private)."""
        return self.loc * self.unit

    @property
    def value_scale(self) -> float:
        """The noise scale in the units the assembly reads (``scale * unit``)."""
        return self.scale * self.unit


@dataclass(frozen=True)
class Stage:
    """Noise sites whose private values depend on the noisy values drawn before them (adaptive
    sequential composition: a later query is chosen by post-processing earlier DP outputs, and
    the costs add, ``docs/explanation/privacy.md``).

    ``sites``: the stage's noise sites; their ``scale`` and ``unit`` are public and fixed in
    advance, their ``loc`` only gives the shape (its values are not read). ``locs``: the noisy
    values drawn so far (by name, in assembly units) to the private values of ``sites`` (by name,
    1-d, in the units they are noised in); in simulations (:func:`draw_many`) it receives
    ``(reps, ...)`` arrays and returns ``(reps, k)`` ones. Private: never leaves the site."""

    sites: tuple[NoiseSpec, ...]
    locs: Callable[[Mapping[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Outputs:
    """Assembled outputs; floats for a release, arrays (one entry per repetition) in simulations.

    A mechanism that can fail to resolve its estimate (:attr:`SiteEstimate.resolved`) gives the
    diagnostic ``"resolved"`` (1.0 or 0.0 per repetition) and NaN for ``tau`` and its variances
    where it is 0, so every combiner's ``many`` leaves such a row's site out; its public reason,
    one text for the plan, is ``unresolved_reason``."""

    tau: Any
    variance: Any
    raw_variance: Any
    diagnostics: dict[str, Any]
    unresolved_reason: str = ""


@dataclass(frozen=True)
class PublishedAssembly:
    """A mechanism's assembly followed by the step every release shares: ``tau`` clipped to the
    feasible range ``[-B, B]`` (every ATE of outcomes in ``[0, B]`` lies there, so the clip can
    only move an estimate towards the truth: post-processing, no privacy cost), and NaN for
    ``tau`` and its variances where the diagnostic ``"resolved"`` is 0. On one release and on
    ``(reps, ...)`` arrays alike, so simulations measure what is published."""

    assembly: Callable[[Mapping[str, Any]], Outputs]
    bound: float

    def __call__(self, noisy: Mapping[str, Any]) -> Outputs:
        out = self.assembly(noisy)
        tau = np.clip(out.tau, -self.bound, self.bound)
        variance, raw = out.variance, out.raw_variance
        if "resolved" in out.diagnostics:
            unresolved = np.asarray(out.diagnostics["resolved"]) == 0.0
            tau, variance, raw = (np.where(unresolved, np.nan, x) for x in (tau, variance, raw))
        return Outputs(tau, variance, raw, out.diagnostics, out.unresolved_reason)


@dataclass(frozen=True)
class MechanismPlan:
    """A mechanism ready to draw. Holds private values (``noise[i].loc``): never leaves the site.

    ``assemble`` is given as the mechanism's own assembly and held as a
    :class:`PublishedAssembly` of it (``__post_init__``), so every plan, a new estimator's too,
    publishes a clipped ``tau`` and NaN where it does not resolve."""

    estimator: str
    n: int
    n_treated: int | None
    n_control: int | None
    total: PrivacyParams
    bound: float
    shares: BudgetSplit
    noise: tuple[NoiseSpec, ...]
    assemble: Callable[[Mapping[str, Any]], Outputs]
    #: later noise sites, each stage's values chosen from the noisy values before it
    stages: tuple[Stage, ...] = ()
    #: the noise sites whose noisy values a release keeps (:class:`DrawnRelease`)
    kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.assemble, PublishedAssembly):
            object.__setattr__(self, "assemble", PublishedAssembly(self.assemble, self.bound))

    @property
    def assembly(self) -> Callable[[Mapping[str, Any]], Outputs]:
        """The mechanism's own assembly, before the publication step (what the privacy tests
        judge, and the paper's estimators, which do not clip)."""
        return cast(PublishedAssembly, self.assemble).assembly

    def estimate(self, noisy: Mapping[str, float]) -> SiteEstimate:
        """The release of one draw ``noisy``: public values only."""
        return self.estimate_of(self.assemble(noisy))

    def drawn(self, noisy: Mapping[str, Any]) -> DrawnRelease:
        """The release of one draw as the site records it: its estimate and the noisy values
        of :attr:`kept` (DP outputs themselves)."""
        kept = {k: tuple(float(v) for v in np.atleast_1d(noisy[k])) for k in self.kept}
        return DrawnRelease(self.estimate(noisy), kept)

    def estimate_of(self, out: Outputs, row: int | None = None) -> SiteEstimate:
        """The release ``out`` holds (its repetition ``row`` when it holds arrays, as simulations
        do): public values only; an unresolved release keeps only its finite diagnostics (the
        variance parts are NaN)."""

        def pick(v: Any) -> float:
            a = np.asarray(v, dtype=np.float64)
            return float(a if row is None or a.ndim == 0 else a[row])

        diagnostics = {k: pick(v) for k, v in out.diagnostics.items()}
        resolved = diagnostics.pop("resolved", 1.0) != 0.0
        if not resolved:
            diagnostics = {k: v for k, v in diagnostics.items() if math.isfinite(v)}
        return SiteEstimate(
            estimator=self.estimator,
            tau=pick(out.tau),
            variance=pick(out.variance),
            raw_variance=pick(out.raw_variance),
            n=self.n,
            n_treated=self.n_treated,
            n_control=self.n_control,
            epsilon=self.total.epsilon,
            delta=self.total.delta,
            bound=self.bound,
            budget_split=self.shares.shares,
            diagnostics=diagnostics,
            resolved=resolved,
            unresolved_reason=None if resolved else out.unresolved_reason,
        )


@dataclass(frozen=True)
class DrawnRelease:
    """One release as a site records it (:meth:`MechanismPlan.drawn`): its estimate, every field
    published, and the noisy values its plan keeps (:attr:`MechanismPlan.kept`: DP outputs a
    later release at the site post-processes, e.g. the propensity model a balance table bands
    by; recorded in the site's ledger with the estimate, not published in its report)."""

    estimate: SiteEstimate
    kept: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def draw_once(plan: MechanismPlan, rng: Rng = None) -> dict[str, float]:
    """One draw per noise site: secure noise when ``rng`` is None; a plan's :class:`Stage` s
    after its first sites, each from the values drawn before it. A vector ``loc`` is drawn
    through one vector measurement (:func:`dpate_core.noise.laplace_vector`); kind
    ``"integer_laplace"`` (integer values, scalar or vector) through the exact discrete sampler
    (:func:`dpate_core.noise.integer_laplace_vector`)."""
    out: dict[str, Any] = {}
    for spec in plan.noise:
        _draw_site(spec, out, rng)
    for stage in plan.stages:
        locs = stage.locs(dict(out))
        for spec in stage.sites:
            loc = np.asarray(locs[spec.name], dtype=np.float64)
            _draw_site(NoiseSpec(spec.name, loc, spec.scale, spec.kind, spec.unit), out, rng)
    return out


def _draw_site(spec: NoiseSpec, out: dict[str, Any], rng: Rng) -> None:
    sample = {"laplace": laplace, "gaussian": gaussian}
    if spec.kind == "integer_laplace":
        drawn = integer_laplace_vector(np.atleast_1d(spec.loc), spec.scale, rng)
        out[spec.name] = drawn if _is_vector(spec) else float(drawn[0])
    elif _is_vector(spec):
        out[spec.name] = laplace_vector(spec.loc, spec.scale, rng)
    else:
        out[spec.name] = sample[spec.kind](cast(float, spec.loc), spec.scale, rng)
    if spec.unit != 1.0:
        out[spec.name] = out[spec.name] * spec.unit  # post-processing (NoiseSpec.unit)


def _is_vector(spec: NoiseSpec) -> bool:
    if not isinstance(spec.loc, np.ndarray):
        return False
    if spec.kind not in ("laplace", "integer_laplace") or spec.loc.ndim != 1:
        raise ValueError(
            f"noise site {spec.name!r}: a vector value must be 1-d and use Laplace noise"
        )
    return True


def draw_many(
    plan: MechanismPlan, rng: np.random.Generator, reps: int
) -> dict[str, npt.NDArray[np.float64]]:
    """``reps`` simulated draws per noise site (simulations only: numpy, not secure); a vector
    ``loc`` of ``k`` entries gives an array of shape ``(reps, k)``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError("draw_many is for simulations: pass a seeded numpy.random.Generator")
    out: dict[str, npt.NDArray[np.float64]] = {}
    for spec in plan.noise:
        out[spec.name] = _simulated(spec, spec.loc, rng, reps)
    for stage in plan.stages:
        locs = stage.locs(dict(out))
        for spec in stage.sites:
            out[spec.name] = _simulated(spec, np.asarray(locs[spec.name], np.float64), rng, reps)
    return out


def noise_free(plan: MechanismPlan) -> dict[str, Any]:
    """Every noise site's value without its noise, in the units the assembly reads, each
    stage's chosen from the values before it as :func:`draw_once` chooses them from noisy ones:
    the release at an unlimited budget. Private values: for tests and simulations, never
    published."""
    out: dict[str, Any] = {spec.name: spec.value for spec in plan.noise}
    for stage in plan.stages:
        locs = stage.locs(dict(out))
        for spec in stage.sites:
            out[spec.name] = np.asarray(locs[spec.name], np.float64) * spec.unit
    return out


def _simulated(
    spec: NoiseSpec, loc: Any, rng: np.random.Generator, reps: int
) -> npt.NDArray[np.float64]:
    if _is_vector(spec):
        z = rng.laplace(0.0, 1.0, (reps, cast(npt.NDArray[np.float64], spec.loc).size))
    elif spec.kind in ("laplace", "integer_laplace"):  # simulations: continuous Lap
        z = rng.laplace(0.0, 1.0, reps)
    else:
        z = rng.normal(0.0, 1.0, reps)
    return cast(npt.NDArray[np.float64], (loc + spec.scale * z) * spec.unit)


def release_once(plan: MechanismPlan, rng: Rng = None) -> SiteEstimate:
    """``plan``'s release of one draw (:func:`draw_once`): secure noise when ``rng`` is None."""
    return plan.estimate(draw_once(plan, rng))
