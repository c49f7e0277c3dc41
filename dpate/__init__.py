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
under this namespace (pyproject ``package-dir``): import them only by these names
(tests/test_namespace.py). A wheel holds them inside ``dpate/``; an editable install maps them
(setuptools' finder, or in its strict mode the link tree ``build/__editable__.dpate-*`` that mypy
and ruff read). When this package is a checkout's own ``dpate/`` folder (Python started in the
checkout, which puts it before the installed one), :data:`MAPPED` finds them in the checkout's
top-level folders, and nothing else: ``dpate.tests`` or ``dpate.bench`` stay unimportable."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

#: the repository's top-level folders installed as ``dpate.<name>``
MAPPED = ("schemas", "tasks", "flows", "deployments")


class _CheckoutFolders(MetaPathFinder):
    """Finds ``dpate.<name>`` for each :data:`MAPPED` name at ``<checkout>/<name>/``, only where
    this package is a checkout's folder (a ``pyproject.toml`` beside it) without a
    ``dpate/<name>/`` of its own; installed, the package holds them and this finder is never
    added."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _checkout_folders() -> dict[str, Path]:
    here = Path(__file__).parent
    root = here.parent
    if not (root / "pyproject.toml").is_file():
        return {}
    return {
        f"{__name__}.{name}": root / name
        for name in MAPPED
        if not (here / name).exists() and (root / name / "__init__.py").is_file()
    }


if not any(isinstance(f, _CheckoutFolders) for f in sys.meta_path) and (
    _folders := _checkout_folders()
):
    sys.meta_path.append(_CheckoutFolders(_folders))
