"""What a site does around a release, apart from its Prefect tasks (:mod:`dpate.tasks.site`); no
Prefect here:

- :mod:`dpate.site.feasibility`: whether the site's records can support the spec's release,
  checked before any budget is reserved (public wording: rules, never counts).
- :mod:`dpate.site.plans`: the site's data read for a release (once per run, shared with the
  study's check) and its mechanism plan (pre-noise values: private).
- :mod:`dpate.site.reports`: the release's public parts: the site's ledger opened, the lifetime
  spend published with a release, the report's bytes from the ledger's COMMIT row, the public
  summary of a published report.
- :mod:`dpate.site.approvals`: the specs the site's operator approved, the only ones its worker
  runs (a deployed run names its spec by hash).
- :mod:`dpate.site.operator_log`: the site's operator log (counts and row positions, never sent
  to Prefect) and the public form of a failed data check.

Import each name from its module (``from dpate.site.feasibility import feasibility_problems``):
this package imports nothing by itself, so a command that needs one module loads no other.
"""
