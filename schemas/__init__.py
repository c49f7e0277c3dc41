"""schemas: validated boundaries of dpate.

- :mod:`schemas.spec`: the study spec (TOML -> :class:`~schemas.spec.StudySpec`, canonical hash).
- :mod:`schemas.site_preparation`: a site's records -> ``(w, y, x, |X|)`` (pandera), from
  :mod:`schemas.site_reading` (files, tables), :mod:`schemas.site_schema` (the pandera schema),
  :mod:`schemas.site_errors` (errors that never hold values) and :mod:`schemas.strata`
  (discretisation).
- :mod:`schemas.report`: the published site report (versioned canonical JSON, validated on read).
- :mod:`schemas.datasets`: the paper's data sets (IST, STAR, IHDP, Lalonde) and Synth.

Import the submodules directly (``from schemas.spec import load_spec``); this package imports
nothing heavy by itself.
"""
