"""The records a compiled pass over them takes (:func:`record_arrays`) and the errors a pass
reports by status, since compiled code cannot raise (:func:`check_status`): shared by Algorithm 1's
pass (``_algorithm1.py``) and the per-cell grid sums (``_grid_sums.py``). Errors name the rule,
never a value."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["check_status", "record_arrays"]

#: what a compiled pass over the records reports (it cannot raise): :func:`check_status` raises
_OK, _BAD_X, _BAD_W, _BAD_Y = 0, 1, 2, 3


def record_arrays(
    w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike, empty: str | None = None
) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64], npt.NDArray[Any]]:
    """``w``, ``y`` (float64) and ``x`` as a compiled pass takes them: 1-d arrays of one length,
    ``w`` integers (booleans viewed as int8), ``x`` integer stratum ids. ``empty``: the error
    for no records (``None``: allowed). The values themselves are checked in the pass
    (:func:`check_status`); errors name the rule, never a value."""
    w = np.asarray(w)
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x)
    if w.ndim != 1 or y.shape != w.shape or x.shape != w.shape:
        raise ValueError(
            f"w, y and x must be 1-d arrays of one length (got {w.shape}, {y.shape}, {x.shape})"
        )
    if empty is not None and w.size == 0:
        raise ValueError(empty)
    if w.dtype == np.bool_:
        w = w.view(np.int8)
    elif not np.issubdtype(w.dtype, np.integer):
        raise ValueError(f"w must be 0/1 integers or booleans (dtype {w.dtype})")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x must be integer stratum ids (dtype {x.dtype})")
    return w, y, x


def check_status(status: int, size: int, bound: float | None) -> None:
    """Raise the error a compiled pass's ``status`` stands for (``size``: the public ``|X|``;
    ``bound``: the outcome bound B, or None for "finite and not negative")."""
    if status == _BAD_X:
        raise ValueError(
            f"stratum ids in x must lie in [0, {size}), the public covariate domain: discretise "
            f"with the study's covariate spec"
        )
    if status == _BAD_W:
        raise ValueError("w must hold only 0 and 1")
    if status == _BAD_Y:
        rule = "be finite and not negative" if bound is None else f"lie in [0, B] with B = {bound}"
        raise ValueError(
            f"outcomes must {rule}: clip or reject them with the study's public bound first"
        )
