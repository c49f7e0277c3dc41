"""One import namespace: the repository's top-level folders ``schemas/``,
``tasks/``, ``flows/`` and ``deployments/`` are installed as ``dpate.schemas``, ``dpate.tasks``,
``dpate.flows`` and ``dpate.deployments`` (pyproject ``package-dir``), never as top-level packages
of those common names, which unrelated PyPI projects hold. Nothing imports them by the old names,
and pyproject's explicit package list holds every package. The checkout holds no link; Python
started in it finds the four folders (dpate/__init__.py) and nothing else. (The built wheel:
tests/topology/test_packaging.py; mypy and ruff on a checkout: tests/test_checkout_tools.py.)"""

from __future__ import annotations

import ast
import doctest
import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAPPED = ("schemas", "tasks", "flows", "deployments")
#: the folders whose Python files this repository runs (not .venv, build/, caches)
SOURCE_DIRS = ("dpate", "dpate_core", *MAPPED, "tests", "bench", "tools")

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import dpate, dpate_core
names = []
for pkg in (dpate, dpate_core):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            importlib.import_module(info.name)
            names.append(info.name)
try:
    import schemas  # noqa: F401
    top_schemas = True
except ModuleNotFoundError:
    top_schemas = False
mods = sys.modules
print(json.dumps({
    "imported": names,
    "top_level": sorted(m for m in mods if m.split(".")[0] in __MAPPED__),
    "top_schemas": top_schemas,
    "files": {n: mods["dpate." + n].__file__ for n in __MAPPED__},
}))
""".replace("__MAPPED__", repr(MAPPED))


def test_the_whole_distribution_imports_under_dpate_only(tmp_path):
    """Every module of the installed distribution, imported from a folder that is not the
    checkout: ``sys.modules`` then holds no top-level ``schemas``/``tasks``/``flows``/
    ``deployments``, and none is installed; ``dpate.schemas`` & co. are the repository's folders."""
    res = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for name in ("dpate.schemas.spec", "dpate.tasks.site", "dpate.flows.study"):
        assert name in out["imported"], name
    assert "dpate.deployments.files" in out["imported"]
    assert "dpate.deployments.storage.config" in out["imported"]
    assert out["top_level"] == []
    assert out["top_schemas"] is False
    for name, file in out["files"].items():
        assert Path(file).resolve() == (REPO / name / "__init__.py").resolve(), (name, file)


def _python_files() -> list[Path]:
    out: list[Path] = []
    for top in SOURCE_DIRS:
        for path in (REPO / top).rglob("*.py"):
            rel = path.relative_to(REPO)
            if "__pycache__" not in rel.parts:
                out.append(path)
    return out


_OLD_PATH = re.compile(rf"^(?:{'|'.join(MAPPED)})(?:\.\w+)+(?::\w+)?$")


def test_no_module_imports_or_names_the_old_top_level_packages():
    """No ``import schemas...``/``from tasks... import`` statement anywhere, and no string that is
    an old dotted module path (monkeypatch targets, ``python -m`` arguments, entrypoints)."""
    found = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if _OLD_PATH.match(node.value) else []
                names = [n for n in names if n.split(".")[1].split(":")[0] in _modules(n)]
            for name in names:
                if name.split(".")[0] in MAPPED:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not found, "use the dpate.* names:\n" + "\n".join(found)


def _modules(dotted: str) -> set[str]:
    """The modules and subpackages of the MAPPED folder ``dotted`` starts with."""
    root = REPO / dotted.split(".")[0]
    return {p.stem for p in root.glob("*.py")} | {
        p.name for p in root.iterdir() if (p / "__init__.py").is_file()
    }


def test_pyproject_lists_every_package_under_its_installed_name():
    """The explicit ``packages`` list (needed by ``package-dir``) holds every folder with an
    ``__init__.py``, so a new subpackage cannot silently drop out of the wheel, and besides them
    only folders of shipped files (no code, each with its package data: setuptools warns on every
    build about a data folder left out); the MAPPED folders are mapped, and nothing maps to a
    top-level name."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = tool["package-dir"]
    assert mapping == {f"dpate.{name}": name for name in MAPPED}

    def folder(package: str) -> Path:
        for prefix, where in mapping.items():
            if package == prefix or package.startswith(prefix + "."):
                return REPO / where / package[len(prefix) + 1 :].replace(".", "/")
        return REPO / package.replace(".", "/")

    on_disk = set()
    for top in ("dpate", "dpate_core", *MAPPED):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            name = ".".join(rel.parts)
            on_disk.add(f"dpate.{name}" if top in MAPPED else name)
    data = {p for p in tool["packages"] if not (folder(p) / "__init__.py").is_file()}
    assert set(tool["packages"]) - data == on_disk
    for package in data:  # a folder of shipped files: its package data, and no module
        assert package in tool["package-data"], package
        assert folder(package).is_dir() and not list(folder(package).rglob("*.py")), package
    for package in tool["packages"]:
        assert package.split(".")[0] in ("dpate", "dpate_core"), package
    for package in tool["package-data"]:
        assert package in tool["packages"], package


def test_the_checkout_holds_no_link():
    """No file or folder of the checkout is a symbolic link, so a git that makes none (a
    ``core.symlinks=false`` clone) checks out the same tree."""
    links = [
        str(Path(folder, name).relative_to(REPO))
        for top in (*SOURCE_DIRS, "docs")
        if (REPO / top).is_dir()
        for folder, dirs, files in os.walk(REPO / top)
        for name in (*dirs, *files)
        if Path(folder, name).is_symlink()
    ]
    assert not links, links


_IN_CHECKOUT = """
import importlib, json
import dpate, dpate_core
found = {n: importlib.import_module("dpate." + n).__file__ for n in __MAPPED__}
refused = []
for name in ("tests", "bench", "docs", "dpate_core", "numpy"):
    try:
        importlib.import_module("dpate." + name)
    except ModuleNotFoundError:
        refused.append(name)
print(json.dumps({"dpate": dpate.__file__, "found": found, "refused": refused}))
""".replace("__MAPPED__", repr(MAPPED))


def test_python_started_in_the_checkout_finds_the_mapped_folders_and_nothing_else():
    """Started in the checkout (its ``dpate/`` before any installed one, as ``python -m pytest``
    there), ``dpate.schemas`` & co. are the checkout's top-level folders (dpate/__init__.py), and
    no other folder of the checkout becomes a ``dpate`` subpackage."""
    res = subprocess.run(
        [sys.executable, "-c", _IN_CHECKOUT], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert Path(out["dpate"]).resolve() == REPO / "dpate" / "__init__.py"
    for name, file in out["found"].items():
        assert Path(file).resolve() == REPO / name / "__init__.py", name
    assert out["refused"] == ["tests", "bench", "docs", "dpate_core", "numpy"]


def test_the_doctests_of_the_mapped_folders_run_under_their_installed_names():
    """pytest's ``--doctest-modules`` would import ``schemas/...`` as a top-level ``schemas``
    (pyproject's ``testpaths`` leaves the four folders out): their examples run here, imported
    as ``dpate.schemas...``."""
    attempted = 0
    for name in MAPPED:
        for path in sorted((REPO / name).rglob("*.py")):
            if ">>> " not in path.read_text():
                continue
            rel = path.relative_to(REPO).with_suffix("").parts
            dotted = ".".join(("dpate", *(rel[:-1] if rel[-1] == "__init__" else rel)))
            result = doctest.testmod(importlib.import_module(dotted), optionflags=doctest.ELLIPSIS)
            assert result.failed == 0, dotted
            attempted += result.attempted
    assert attempted > 0
