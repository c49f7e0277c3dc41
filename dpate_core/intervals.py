"""Normal confidence intervals ``estimate +- z sqrt(variance)`` (post-processing of DP outputs)."""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["normal_interval"]

_Z95 = NormalDist().inv_cdf(0.975)


def normal_interval(estimate: float, variance: float, level: float = 0.95) -> tuple[float, float]:
    """The two-sided normal interval at ``level`` (default 95%, ``z = 1.959964``)."""
    if level == 0.95:
        z = _Z95
    elif 0 < level < 1:
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
    else:
        raise ValueError(f"confidence level ({level}) must lie strictly between 0 and 1")
    half = z * math.sqrt(variance)
    return estimate - half, estimate + half
