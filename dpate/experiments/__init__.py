"""Section 4 of the paper, reproduced: ``dpate experiments [--quick] [--out DIR]``.

A research harness, not a flow: it never imports Prefect and releases nothing (its noise comes
from a seeded :class:`numpy.random.Generator`). Kept light at import, so that the ``dpate``
command line, which registers :func:`dpate.experiments.cli.experiments`, starts quickly; the work
is in :mod:`dpate.experiments.harness`.
"""
