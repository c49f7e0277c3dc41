"""The non-private difference in means and its sampling variance (section 3.1.1 of the paper),
from float sums of each arm's outcomes (the DP release sums grid-rounded outcomes exactly instead:
:func:`dpate_core.mechanisms.difference_in_means.arm_statistics`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DifferenceInMeans", "arm_sums", "difference_in_means"]


@dataclass(frozen=True)
class DifferenceInMeans:
    """``tau = mean(Y | W=1) - mean(Y | W=0)`` and ``variance = s_t^2 / N_t + s_c^2 / N_c``."""

    tau: float
    variance: float
    n_treated: int
    n_control: int


def _as_inputs(
    w: npt.ArrayLike, y: npt.ArrayLike
) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
    w = np.asarray(w)
    y = np.asarray(y, dtype=np.float64)
    if w.ndim != 1 or y.shape != w.shape:
        raise ValueError(f"w and y must be 1-d arrays of one length (got {w.shape} and {y.shape})")
    if w.dtype != np.bool_:
        if not np.issubdtype(w.dtype, np.integer):
            raise ValueError(f"w must be 0/1 integers or booleans (dtype {w.dtype})")
        if w.size and (w.min() < 0 or w.max() > 1):
            raise ValueError("w must hold only 0 and 1")
    return w.astype(np.int8, copy=False), y


def arm_sums(w: npt.ArrayLike, y: npt.ArrayLike) -> tuple[int, int, float, float, float, float]:
    """``(N_t, N_c, sum_t Y, sum_c Y, sum_t Y^2, sum_c Y^2)`` as float sums (the non-private
    estimate; the DP release sums grid-rounded outcomes exactly instead,
    :func:`dpate_core.mechanisms.difference_in_means.arm_statistics`)."""
    w, y = _as_inputs(w, y)
    t = w.astype(bool)
    yt, yc = y[t], y[~t]
    return (
        int(yt.size),
        int(yc.size),
        float(yt.sum()),
        float(yc.sum()),
        float(yt @ yt),
        float(yc @ yc),
    )


def difference_in_means(w: npt.ArrayLike, y: npt.ArrayLike) -> DifferenceInMeans:
    """Difference in means and its sampling variance ``s_t^2/N_t + s_c^2/N_c``.

    ``s^2 = sum Y^2 / n - (sum Y / n)^2`` as in section 3.1.1 of the paper (the divisor is ``n``,
    matching the private version, which estimates exactly these sums).
    """
    n_t, n_c, s_t, s_c, q_t, q_c = arm_sums(w, y)
    if n_t == 0 or n_c == 0:
        raise ValueError(
            f"difference in means needs both arms (treated {n_t}, control {n_c} records)"
        )
    var_t = q_t / n_t - (s_t / n_t) ** 2
    var_c = q_c / n_c - (s_c / n_c) ** 2
    return DifferenceInMeans(
        tau=s_t / n_t - s_c / n_c,
        variance=max(var_t, 0.0) / n_t + max(var_c, 0.0) / n_c,
        n_treated=n_t,
        n_control=n_c,
    )
