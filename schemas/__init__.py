"""schemas: validated boundaries of dpate.

- :mod:`dpate.schemas.spec`: the study spec (TOML -> :class:`~dpate.schemas.spec.StudySpec`,
  canonical hash) with its columns, sites and rules across fields, one package.
- :mod:`dpate.schemas.site_data`: a site's data read, validated and reduced where it lives (DuckDB
  for files, PostgreSQL, Spark or another Ibis backend): the statistics a release reads, errors
  that never hold values, and the validated records for tests and simulations.
- :mod:`dpate.schemas.reports`: what is published (the site report, the study result: versioned
  canonical JSON, validated on read) and its checks (plausibility, bounded JSON).

Import the submodules directly (``from dpate.schemas.spec import load_spec``); this package imports
nothing heavy by itself.
"""
