"""Where numba keeps the compiled kernels of ``dpate_core`` (``@numba.njit(cache=True)``).

``$NUMBA_CACHE_DIR`` when it is set (a deployment sets it, ``deployments/systemd/*.env.example``),
else ``$XDG_CACHE_HOME/dpate/numba`` (by default ``~/.cache/dpate/numba``). Never inside the
installed package, numba's own default: the cache files it writes there are not pip's, so a later
``pip install`` of another build (the README's second command after its first) leaves them behind
as a stale ``site-packages/dpate_core`` folder that shadows the new install.

Imported first by :mod:`dpate_core` (every submodule import runs it), before any kernel compiles;
numba reads the variable again at each compilation, so a numba imported earlier follows it too.
Where the folder cannot be created, numba falls back to its own default.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/dpate/numba``, or ``~/.cache/dpate/numba``; None when the process has
    no home folder (numba then uses its own default)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "dpate" / "numba"


if "NUMBA_CACHE_DIR" not in os.environ and (_default := default_cache_dir()) is not None:
    os.environ["NUMBA_CACHE_DIR"] = str(_default)
