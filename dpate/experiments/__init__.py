"""Section 4 of the paper, reproduced: ``dpate experiments [--quick] [--out DIR]``.

A research harness, not a flow: it never imports Prefect and releases nothing. Simulation noise
comes from a seeded :class:`numpy.random.Generator` (``--seed``); it is **not** private. Every
point runs the mechanisms that are released, through their plans (``draw_many`` and
``assemble``), so the experiments measure exactly what a site publishes.

Modules, by what they hold:

- :mod:`~dpate.experiments.settings`: what one run does, the grid, labels and seeding;
- :mod:`~dpate.experiments.data`: data sets, sites and the random splits of every configuration;
- :mod:`~dpate.experiments.sweep`: one panel, every alpha and combiner (``experiments.csv``);
- :mod:`~dpate.experiments.sensitivity`: the smooth-sensitivity curves and the paper's literal
  formula (comparison only);
- :mod:`~dpate.experiments.coverage`: coverage of the 95% intervals;
- :mod:`~dpate.experiments.variance_ratio`: reported over true sampling variance;
- :mod:`~dpate.experiments.split_search`: the search behind SmoothDPMatching's default split;
- :mod:`~dpate.experiments.paper_claims` and :mod:`~dpate.experiments.adjusted_claims`: each of
  the paper's claims and of the adjusted estimator's goals as one function, checked with
  numbers (:mod:`~dpate.experiments.claim`: what a checked claim is; ``claims.md``);
- :mod:`~dpate.experiments.comparison`: the meta-analysis combiners against MVAgg;
- :mod:`~dpate.experiments.figures`: the PNG figures;
- :mod:`~dpate.experiments.tables`: writing the tidy tables;
- :mod:`~dpate.experiments.run`: the whole run (:func:`~dpate.experiments.run.run_experiments`);
- :mod:`~dpate.experiments.cli`: the ``dpate experiments`` sub-command.

Kept empty at import, so that the ``dpate`` command line, which registers
:func:`dpate.experiments.cli.experiments`, starts without loading numpy.
"""
