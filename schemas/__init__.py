"""schemas: validated boundaries of dpate.

- :mod:`schemas.spec`: the study spec (TOML -> :class:`~schemas.spec.StudySpec`, canonical hash),
  with its columns (:mod:`schemas.spec_columns`), sites (:mod:`schemas.spec_sites`), cross-field
  rules (:mod:`schemas.spec_checks`) and shared pieces (:mod:`schemas.spec_fields`).
- :mod:`schemas.sources`: where a site's records come from (:mod:`schemas.source_csv`,
  :mod:`schemas.source_parquet`, :mod:`schemas.source_sql`; messages redacted by
  :mod:`schemas.source_redaction`), validated in batches (:mod:`schemas.site_batches`) and
  streamed as per-cell statistics for a release (:mod:`schemas.site_statistics`).
- :mod:`schemas.site_preparation`: a site's records -> ``(w, y, x, |X|)`` (pandera), from
  :mod:`schemas.site_reading` (files, tables), :mod:`schemas.site_schema` (the pandera schema),
  :mod:`schemas.site_errors` (errors that never hold values) and :mod:`schemas.strata`
  (discretisation).
- :mod:`schemas.report`: the published site report (versioned canonical JSON, validated on read).
- :mod:`schemas.datasets`: the paper's data sets (IST, STAR, IHDP, Lalonde) and Synth.

Import the submodules directly (``from schemas.spec import load_spec``); this package imports
nothing heavy by itself.
"""
