"""No private name crosses a package boundary: a module of the distribution imports a private
module (``dpate_core.planning._site``) or a private name (``_recommend``) of dpate only from
within the package that owns it (the package holding the private module or the module that
defines the name, or one of its subpackages). Every other module imports the package's public
names, so a package can rearrange its private modules without breaking anyone."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_prefect_public_api import REPO, _sources

#: each top-level folder and its import name (the folders are mapped into ``dpate``)
IMPORT_NAME = {
    "dpate": "dpate",
    "dpate_core": "dpate_core",
    "schemas": "dpate.schemas",
    "tasks": "dpate.tasks",
    "flows": "dpate.flows",
    "deployments": "dpate.deployments",
}


def package_of(path: Path) -> str:
    """The package a source file belongs to (a package's ``__init__`` belongs to itself)."""
    rel = path.relative_to(REPO).with_suffix("").parts
    parts = [*IMPORT_NAME[rel[0]].split("."), *rel[1:]]
    return ".".join(parts[:-1])


def _is_package(dotted: str) -> bool:
    """Whether the dpate module ``dotted`` is a package (a folder of this checkout)."""
    for folder, name in sorted(IMPORT_NAME.items(), key=lambda kv: -len(kv[1])):
        if dotted == name or dotted.startswith(name + "."):
            rest = dotted[len(name) :].lstrip(".").split(".") if dotted != name else []
            return (REPO / folder).joinpath(*rest).is_dir()
    return False


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _inside(package: str, owner: str) -> bool:
    return package == owner or package.startswith(owner + ".")


def crossing_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each import in ``source`` (a module of ``package``) of a private
    dpate module or name owned by another package."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        parts = node.module.split(".")
        if parts[0] not in ("dpate", "dpate_core"):
            continue
        private_at = [i for i, p in enumerate(parts) if _private(p)]
        if private_at:  # a private module: owned by the package above it
            if not _inside(package, ".".join(parts[: private_at[0]])):
                found.append((node.lineno, node.module))
            continue
        # a private name of a module is owned by that module's package (a package's own name by
        # the package)
        owner = node.module if _is_package(node.module) else ".".join(parts[:-1])
        for alias in node.names:
            if _private(alias.name) and not _inside(package, owner):
                found.append((node.lineno, f"{node.module}.{alias.name}"))
    return found


def test_no_private_name_crosses_a_package_boundary():
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in _sources()
        for line, name in crossing_imports(path.read_text(), package_of(path))
    ]
    assert not found, "import the owning package's public name instead:\n" + "\n".join(found)


def test_the_check_finds_private_imports_from_other_packages():
    source = "\n".join(
        [
            "from dpate_core.planning._site import predict_site",
            "from dpate_core.planning import _helper",
            "from dpate.schemas.spec._fields import _Model",
            "from dpate_core.mechanisms._estimator import Estimator",
            # within dpate_core.mechanisms.matching: its own and its parents' private parts
            "from dpate_core.mechanisms.matching._release import x",
            "from dpate_core.mechanisms.matching import _y",
            # public
            "from dpate_core.planning import predict_site",
            "from dpate_core import __version__",
            "from prefect._internal import z",
        ]
    )
    found = crossing_imports(source, "dpate_core.mechanisms.matching")
    assert [line for line, _ in found] == [1, 2, 3]
    assert package_of(REPO / "schemas" / "spec" / "_model.py") == "dpate.schemas.spec"
    assert package_of(REPO / "schemas" / "spec" / "__init__.py") == "dpate.schemas.spec"
