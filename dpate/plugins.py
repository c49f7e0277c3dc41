"""Estimators and aggregators from other distributions: plug-ins.

A distribution declares a module in the entry-point group :data:`GROUP` (``dpate.plugins``), e.g.
in its ``pyproject.toml``::

    [project.entry-points."dpate.plugins"]
    my_estimator = "my_package.my_estimator"

Importing that module registers what it defines (``dpate_core.mechanisms.register(...)``,
``dpate_core.aggregation.register(...)``). :func:`load_plugins` imports every declared module,
once per process, before a study spec's estimator and aggregator are checked
(:mod:`dpate.schemas.spec`), so every command and every site's worker sees the same names as long
as the plug-in is installed beside dpate (``docs/how-to/extending.md``).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

__all__ = ["GROUP", "load_plugins"]

GROUP = "dpate.plugins"


@functools.cache
def load_plugins() -> tuple[str, ...]:
    """Import every module declared in :data:`GROUP` (once); returns their entry-point names."""
    loaded = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        ep.load()
        loaded.append(ep.name)
    return tuple(loaded)
