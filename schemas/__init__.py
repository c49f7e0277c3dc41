"""schemas: validated boundaries of dpate.

- :mod:`dpate.schemas.spec`: the study spec (TOML -> :class:`~dpate.schemas.spec.StudySpec`, canonical hash),
  with its columns (:mod:`dpate.schemas.spec_columns`), sites (:mod:`dpate.schemas.spec_sites`), cross-field
  rules (:mod:`dpate.schemas.spec_checks`) and shared pieces (:mod:`dpate.schemas.spec_fields`).
- :mod:`dpate.schemas.sources`: where a site's records come from (:mod:`dpate.schemas.source_csv`,
  :mod:`dpate.schemas.source_parquet`, :mod:`dpate.schemas.source_sql`; messages redacted by
  :mod:`dpate.schemas.source_redaction`), validated in batches (:mod:`dpate.schemas.site_batches`) and
  streamed as per-cell statistics for a release (:mod:`dpate.schemas.site_statistics`).
- :mod:`dpate.schemas.site_preparation`: a site's records -> ``(w, y, x, |X|)`` (pandera), from
  :mod:`dpate.schemas.site_reading` (files, tables), :mod:`dpate.schemas.site_schema` (the pandera schema),
  :mod:`dpate.schemas.site_errors` (errors that never hold values) and :mod:`dpate.schemas.strata`
  (discretisation).
- :mod:`dpate.schemas.report`: the published site report (versioned canonical JSON, validated on read).
- :mod:`dpate.schemas.datasets`: the paper's data sets (IST, STAR, IHDP, Lalonde) and Synth.

Import the submodules directly (``from dpate.schemas.spec import load_spec``); this package imports
nothing heavy by itself.
"""
