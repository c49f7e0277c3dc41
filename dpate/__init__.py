"""The ``dpate`` distribution's own namespace: the command line (:mod:`dpate.cli`, ``dpate``)
and the experiments (:mod:`dpate.experiments`, ``dpate experiments``)."""
