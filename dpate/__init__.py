"""The ``dpate`` distribution's own namespace: the command line and the experiments
(:mod:`dpate.experiments`, ``dpate experiments``)."""
