"""A checkout with no link in it (the repository holds none), installed as the README installs it
(``pip install -e ".[test]" --config-settings editable_mode=strict``): Python imports, mypy
checks and ruff resolves the same modules under the same names, ``dpate.schemas`` & co. being
the top-level folders. mypy and ruff cannot follow setuptools' ``package-dir`` or an import hook;
they read the strict install's tree of file links (``build/__editable__.dpate-*``, pyproject's
``[tool.mypy] files`` and ``[tool.ruff] src``), which setuptools writes from the same mapping.
No Prefect server: one venv (tests/checkouts.py), one install, module lists."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.checkouts import copy_checkout, run, venv
from tests.test_namespace import MAPPED

#: a venv and an install (tens of seconds), no server
pytestmark = pytest.mark.slow

INSTALL_EDITABLE = "pip install -q --no-deps -e . --config-settings editable_mode=strict"

#: every module of the distribution as Python finds it (``pkgutil`` walks the packages' folders;
#: a ``__main__`` is listed, not run)
_IMPORTED = """
import json, pkgutil
import dpate, dpate_core
names = {}
for pkg in (dpate, dpate_core):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        main = info.name.endswith(".__main__")
        names[info.name] = None if main else __import__(info.name, fromlist=["_"]).__file__
names.update(dpate=dpate.__file__, dpate_core=dpate_core.__file__)
print(json.dumps(names))
"""

#: the same modules imported by name from wherever Python starts (argv[1]: a JSON list)
_BY_NAME = """
import importlib, json, sys
names = [n for n in json.loads(sys.argv[1]) if not n.endswith(".__main__")]
print(json.dumps({n: importlib.import_module(n).__file__ for n in names}))
"""

#: the modules ``python -m mypy`` checks (pyproject's ``files``, named as mypy names them), or
#: with argv[1] (a JSON list of names) the file mypy's import resolution finds for each
_MYPY = """
import json, sys
from mypy.build import default_data_dir
from mypy.config_parser import parse_config_file
from mypy.find_sources import create_source_list
from mypy.modulefinder import FindModuleCache, compute_search_paths
from mypy.options import Options
options = Options()
parse_config_file(options, lambda: None, "pyproject.toml", sys.stdout, sys.stderr)
sources = create_source_list(options.files or [], options)
if len(sys.argv) == 1:
    print(json.dumps({s.module: s.path for s in sources}))
else:
    paths = compute_search_paths(sources, options, default_data_dir())
    finder = FindModuleCache(paths, None, options)
    print(json.dumps({n: finder.find_module(n) for n in json.loads(sys.argv[1])}))
"""


def _files(out: str, root: Path) -> dict[str, str]:
    """Module name -> its file in the checkout, relative (links resolved); a ``__main__`` module
    is named only."""
    found = json.loads(out.strip().splitlines()[-1])
    return {
        name: str(Path(root, file).resolve().relative_to(root)) if file else ""
        for name, file in found.items()
    }


def test_python_mypy_and_ruff_see_one_namespace_in_a_checkout_without_links(tmp_path):
    checkout = copy_checkout(tmp_path / "dpate")
    links = [str(p.relative_to(checkout)) for p in checkout.rglob("*") if p.is_symlink()]
    assert not links, links
    _site, env = venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(INSTALL_EDITABLE, checkout, env)

    imported = _files(run(f"python -c {shlex.quote(_IMPORTED)}", elsewhere, env), checkout)
    for name in MAPPED:
        assert imported[f"dpate.{name}"] == f"{name}/__init__.py", imported[f"dpate.{name}"]
    assert "dpate.schemas.spec" in imported and "dpate.deployments.storage.config" in imported
    assert not [n for n in imported if n.split(".")[0] not in ("dpate", "dpate_core")]

    # started in the checkout: its own dpate/ first, the same modules from the same files
    names = shlex.quote(json.dumps(sorted(imported)))
    in_checkout = _files(run(f"python -c {shlex.quote(_BY_NAME)} {names}", checkout, env), checkout)
    assert in_checkout == {n: f for n, f in imported.items() if f}

    # mypy: the same modules from the same files, checked and found where imported
    mypy = f"python -c {shlex.quote(_MYPY)}"
    checked = _files(run(mypy, checkout, env), checkout)
    assert checked.keys() == imported.keys()
    assert {n: f for n, f in checked.items() if imported[n]} == in_checkout
    assert _files(run(f"{mypy} {names}", checkout, env), checkout) == checked

    # ruff's import graph: first-party names resolve to the mapped folders' files
    graph = json.loads(
        run(f"python -m ruff analyze graph --python {tmp_path / 'venv'} flows tasks", checkout, env)
    )
    deps = {
        Path(checkout, dep).resolve().relative_to(checkout).as_posix()
        for dep in graph["flows/aggregate.py"]
        if Path(checkout, dep).resolve().is_relative_to(checkout)
    }
    assert "tasks/aggregate.py" in deps, graph["flows/aggregate.py"]
