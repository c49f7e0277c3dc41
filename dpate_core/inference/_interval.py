"""An interval for an ATE as reports publish it: clipped to the feasible range ``[-B, B]`` and
flagged by the "uninformative at this budget" and "mostly privacy noise" rules
(``docs/explanation/inference.md``). Post-processing of published values: no privacy cost."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INFORMATION_RULES",
    "NOISE_DOMINATED",
    "NOISE_RATIO",
    "UNINFORMATIVE",
    "UNINFORMATIVE_RULES",
    "Interval",
    "clip_interval",
    "uninformative_rules",
]

#: the wording reports use for an interval that says little at this budget; the note adds which
#: rule fired (:data:`UNINFORMATIVE_RULES`)
UNINFORMATIVE = "uninformative at this budget"
#: an interval is "mostly privacy noise" when its DP-noise variance is more than this many times
#: its sampling variance (the noise sd more than 3 times the sampling sd): it then reflects mostly
#: the noise added for privacy, not the patients, and more budget would narrow it
NOISE_RATIO = 9
#: the wording reports use for an interval that the noise rule flags but the information rules
#: do not: it may still be narrow enough to inform, so it is not called uninformative
NOISE_DOMINATED = "mostly privacy noise"
#: the rules that make an interval uninformative (it says little beyond the range of possible
#: effects); the ``"noise"`` rule flags an interval as :data:`NOISE_DOMINATED` instead
INFORMATION_RULES = ("beyond", "width")
#: the rules that flag an interval uninformative, in the order a note lists them, with the words
#: a report prints for each
UNINFORMATIVE_RULES: dict[str, str] = {
    "beyond": "the privacy noise carried the interval wholly outside the range of possible effects",
    "width": "the interval is wider than the whole range the outcome can take (B)",
    "noise": (
        f"the privacy noise is more than {NOISE_RATIO} times the patients' own variation in "
        f"this estimate (noise variance over sampling variance)"
    ),
}


@dataclass(frozen=True)
class Interval:
    """A confidence interval for an ATE, clipped to the feasible range ``[-B, B]``.

    ``estimate`` is the point estimate clipped to that range (post-processing). ``rules`` names
    every rule of :data:`UNINFORMATIVE_RULES` that fired (:func:`clip_interval`).
    ``uninformative`` is True when one of the :data:`INFORMATION_RULES` fired (the interval says
    little beyond the range of possible effects): reports say :data:`UNINFORMATIVE` and why
    (:attr:`note`). The noise rule alone flags the interval :attr:`noise_dominated`
    (:data:`NOISE_DOMINATED`): it mostly reflects the noise added for privacy, yet may be narrow
    enough to inform, so it is flagged without being called uninformative.
    """

    estimate: float
    lo: float
    hi: float
    level: float
    method: str
    uninformative: bool
    bound: float
    rules: tuple[str, ...] = ()

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def noise_dominated(self) -> bool:
        """The noise rule fired: the interval mostly reflects the privacy noise."""
        return "noise" in self.rules

    @property
    def note(self) -> str:
        """ "" when no rule fired; else "uninformative at this budget: <why>" or, when only the
        noise rule fired, "mostly privacy noise: <why>" (every rule that fired is said)."""
        if not self.rules:
            return ""
        head = UNINFORMATIVE if self.uninformative else NOISE_DOMINATED
        return f"{head}: " + "; ".join(UNINFORMATIVE_RULES[r] for r in self.rules)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields for a report."""
        return {
            "estimate": self.estimate,
            "lo": self.lo,
            "hi": self.hi,
            "level": self.level,
            "method": self.method,
            "uninformative": self.uninformative,
            "rules": list(self.rules),
            "note": self.note,
        }


def uninformative_rules(
    lo: float,
    hi: float,
    bound: float,
    noise_variance: float | None = None,
    sampling_variance: float | None = None,
) -> tuple[str, ...]:
    """The rules of :data:`UNINFORMATIVE_RULES` an interval ``[lo, hi]`` (before clipping to
    ``[-B, B]``) meets, in their order:

    - ``"beyond"``: it lies wholly beyond one end of the range (``lo >= B`` or ``hi <= -B``): the
      noise carried it past every possible ATE, and clipped it would read as the single point
      ``B`` (or ``-B``), a certainty the release does not have;
    - ``"width"``: clipped to ``[-B, B]`` it is still wider than the outcome's range, ``B``;
    - ``"noise"``: its noise variance is more than :data:`NOISE_RATIO` times its sampling
      variance (when both are given and finite).
    """
    b = float(bound)
    rules = []
    if lo >= b or hi <= -b:
        rules.append("beyond")
    if min(hi, b) - max(lo, -b) > b:
        rules.append("width")
    if (
        noise_variance is not None
        and sampling_variance is not None
        and math.isfinite(noise_variance)
        and math.isfinite(sampling_variance)
        and noise_variance > NOISE_RATIO * max(sampling_variance, 0.0)
    ):
        rules.append("noise")
    return tuple(rules)


def clip_interval(
    estimate: float,
    lo: float,
    hi: float,
    bound: float,
    level: float,
    method: str,
    noise_variance: float | None = None,
    sampling_variance: float | None = None,
) -> Interval:
    """Clip an estimate and its interval to ``[-B, B]`` and flag it by
    :func:`uninformative_rules` (``noise_variance`` and ``sampling_variance``: the parts of the
    estimate's variance, for the noise rule).

    Every ATE of outcomes in ``[0, B]`` lies in ``[-B, B]``, so clipping is post-processing that
    can only move an end towards the truth.
    """
    b = float(bound)
    if not (b > 0 and math.isfinite(b)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"interval ends ({lo}, {hi}) must be finite with lo <= hi")
    rules = uninformative_rules(lo, hi, b, noise_variance, sampling_variance)
    return Interval(
        estimate=min(max(float(estimate), -b), b),
        lo=min(max(float(lo), -b), b),
        hi=min(max(float(hi), -b), b),
        level=float(level),
        method=method,
        uninformative=any(r in INFORMATION_RULES for r in rules),
        bound=b,
        rules=rules,
    )
