"""The checks a published estimate must pass to be an output of its mechanism, shared by the
estimators' ``plausible`` rules (:class:`~dpate_core.mechanisms.Estimator`).

A report is a DP output, so the server cannot check the estimate itself; it can check that the
numbers are ones the mechanism *can* produce from the public values (``B``, the budget and its
split, ``N`` and, when public, the arm sizes). Float comparisons allow a relative :data:`RTOL`
(the site and the server compute the same formula from the same public values). Each message
names the rule and the value that breaks it (published values, never a record's)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpate_core.release import SiteEstimate

__all__ = [
    "RTOL",
    "at_least",
    "clipped_tau_problems",
    "no_arm_sizes_problems",
    "noise_variance_problems",
    "noise_variance_range_problems",
    "released_variance_problems",
    "tau_range_problems",
]

RTOL = 1e-9


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0)


def at_least(value: float, floor: float) -> bool:
    """``value >= floor``, allowing :data:`RTOL` below it."""
    return value >= floor * (1.0 - RTOL)


def tau_range_problems(tau: float, reach: float, rule: str) -> list[str]:
    """``|tau| <= reach``, the range the mechanism can produce (``rule`` says why)."""
    if abs(tau) <= reach:
        return []
    return [
        f"tau ({tau}) is outside the range the mechanism can produce, |tau| <= {rule} = {reach:.6g}"
    ]


def clipped_tau_problems(e: SiteEstimate) -> list[str]:
    """Every release clips ``tau`` to ``[-B, B]`` (:class:`dpate_core.release.PublishedAssembly`)."""
    return tau_range_problems(e.tau, float(e.bound), "B (every release clips tau to [-B, B])")


def released_variance_problems(e: SiteEstimate, *, clamps_sampling: bool = True) -> list[str]:
    """A released variance is a sampling part clamped up at 0 (``clamps_sampling``: so at least
    ``raw_variance``) plus the noise variance, which is positive."""
    out: list[str] = []
    nv = e.diagnostics["noise_variance"]
    if not nv > 0:
        out.append(f"diagnostics.noise_variance ({nv}) must be positive (DP noise)")
    if not at_least(e.variance, nv):
        out.append(
            f"variance ({e.variance}) is below the report's own noise variance ({nv}): "
            f"a released variance is max(sampling, 0) + noise variance"
        )
    if clamps_sampling and not at_least(e.variance, e.raw_variance):
        out.append(
            f"variance ({e.variance}) is below raw_variance ({e.raw_variance}): the released "
            f"variance only clamps the sampling part up at 0"
        )
    return out


def noise_variance_problems(expected: float, e: SiteEstimate, rule: str) -> list[str]:
    """The published noise variance is the one the public values imply (``rule`` names it)."""
    out = []
    reported = e.diagnostics["noise_variance"]
    if not _close(reported, expected):
        out.append(
            f"diagnostics.noise_variance ({reported}) is not the mechanism's noise variance "
            f"{rule} = {expected} from the public values"
        )
    if not at_least(e.variance, expected):
        out.append(
            f"variance ({e.variance}) is below the mechanism's noise variance {rule} = {expected}"
        )
    return out


def noise_variance_range_problems(
    least: float, greatest: float, e: SiteEstimate, rule: str
) -> list[str]:
    """The published noise variance lies where ``rule`` puts it over the values the public
    fields leave open (``[least, greatest]``), and the variance is at least it."""
    out = []
    reported = e.diagnostics["noise_variance"]
    if not (at_least(reported, least) and reported <= greatest * (1.0 + RTOL)):
        out.append(
            f"diagnostics.noise_variance ({reported}) is not a noise variance the mechanism can "
            f"report: {rule} lies in [{least}, {greatest}] from the public values"
        )
    if not at_least(e.variance, reported):
        out.append(f"variance ({e.variance}) is below its noise variance ({reported})")
    return out


def no_arm_sizes_problems(e: SiteEstimate, why: str) -> list[str]:
    """A mechanism that publishes no arm sizes: ``why`` says so in the message."""
    return [] if e.n_treated is None else [f"n_treated/n_control must be null: {why}"]
