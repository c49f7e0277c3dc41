"""Normal confidence intervals ``estimate +- z sqrt(variance)`` (post-processing of DP outputs)."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["normal_cdf", "normal_interval"]

_Z95 = NormalDist().inv_cdf(0.975)
_ERF = np.frompyfunc(math.erf, 1, 1)


def normal_cdf(t: Any) -> npt.NDArray[np.float64]:
    """The standard normal cdf, element by element (``math.erf``; post-processing and
    predictions, no draw)."""
    erf = np.asarray(_ERF(np.asarray(t, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)
    return np.asarray(0.5 * (1.0 + erf), dtype=np.float64)


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
