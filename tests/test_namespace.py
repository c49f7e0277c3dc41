"""One import namespace: the repository's top-level folders ``schemas/``,
``tasks/``, ``flows/`` and ``deployments/`` are installed as ``dpate.schemas``, ``dpate.tasks``,
``dpate.flows`` and ``dpate.deployments`` (pyproject ``package-dir``), never as top-level packages
of those common names, which unrelated PyPI projects hold. Nothing imports them by the old names,
and pyproject's explicit package list holds every package. (The built wheel:
tests/topology/test_packaging.py.)"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAPPED = ("schemas", "tasks", "flows", "deployments")
#: the folders whose Python files this repository runs (not .venv, build/, caches); dpate/ is
#: walked without its symlinks (they are the MAPPED folders again)
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
            if top == "dpate" and rel.parts[1] in MAPPED:
                continue
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
    ``__init__.py``, so a new subpackage cannot silently drop out of the wheel; the MAPPED
    folders are mapped, and nothing maps to a top-level name."""
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
            if top == "dpate" and len(rel.parts) > 1 and rel.parts[1] in MAPPED:
                continue  # the symlinks: the same folders as MAPPED
            name = ".".join(rel.parts)
            on_disk.add(f"dpate.{name}" if top in MAPPED else name)
    assert set(tool["packages"]) == on_disk
    for package in tool["packages"]:
        assert (folder(package) / "__init__.py").is_file(), package
        assert package.split(".")[0] in ("dpate", "dpate_core"), package
    for package in tool["package-data"]:
        assert package in tool["packages"], package


def test_the_symlinks_are_the_mapped_folders():
    """``dpate/schemas`` & co. (what mypy and a checkout import) are the top-level folders."""
    for name in MAPPED:
        link = REPO / "dpate" / name
        assert link.is_symlink() and link.resolve() == (REPO / name).resolve(), name
