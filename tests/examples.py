"""How many examples the costliest Hypothesis searches draw under each profile
(tests/conftest.py): the ``dev`` profile draws fresh examples every run and takes the full count,
to explore; ``ci`` is derandomised, so it draws the same examples at every run, and a third of them
keeps it a regression check on those same cases at a third of the CPU."""

from __future__ import annotations

import os


def examples(full: int) -> int:
    """``full`` under the ``dev`` profile, a third of it (at least 100) under ``ci``."""
    if os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci":
        return max(100, full // 3)
    return full
