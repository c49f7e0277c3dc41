"""The ``dpate`` distribution's own namespace: the command line (:mod:`dpate.cli`, ``dpate``), the
experiments (:mod:`dpate.experiments`, ``dpate experiments``) and the plain libraries that the
Prefect tasks (:mod:`dpate.tasks`) and the command line share, none of which imports Prefect:
:mod:`dpate.ledger` (a site's privacy ledger, its heads checked against the published reports),
:mod:`dpate.site` (what a site does around a release), :mod:`dpate.storage` (write-once
publication), :mod:`dpate.signing` (the sites' report-signing keys and signatures),
:mod:`dpate.settings` (a site's own configuration) and :mod:`dpate.html_report` (the study's HTML
page).

:mod:`dpate.schemas`, :mod:`dpate.tasks`, :mod:`dpate.flows` and :mod:`dpate.deployments` are the
repository's top-level folders ``schemas/``, ``tasks/``, ``flows/`` and ``deployments/``, installed
under this namespace (pyproject ``package-dir``; here, symlinks to them): import them only by these
names (tests/test_namespace.py)."""
