"""dpate uses Prefect through its public API only: no module of the distribution (``dpate``,
``dpate_core``, ``schemas``, ``tasks``, ``flows``, ``deployments``) imports a Prefect module with
a private path component (``prefect._internal``, ``prefect.runner._process_manager``, ...) or a
private name from a Prefect module, by an import statement or by ``importlib.import_module`` /
``__import__`` with a literal name. That is what lets pyproject allow a range of Prefect releases
instead of one."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the distribution's folders
PACKAGES = ("dpate", "dpate_core", "schemas", "tasks", "flows", "deployments")


def _private(dotted: str) -> bool:
    """Whether ``dotted`` is a Prefect module path or name with a component starting with ``_``
    (dunder names such as ``__version__`` are public)."""
    parts = dotted.split(".")
    return parts[0] == "prefect" and any(
        p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:]
    )


def private_prefect_imports(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each import in ``source`` of a private Prefect module or name
    (the first such name of the statement)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant):
                names = [str(first.value)]
        private = [n for n in names if _private(n)]
        if private:
            found.append((node.lineno, private[0]))
    return found


def _sources() -> list[Path]:
    out: list[Path] = []
    for top in PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO)
            if "__pycache__" not in rel.parts:
                out.append(path)
    return out


def test_no_module_imports_a_private_prefect_module():
    sources = _sources()
    assert REPO / "deployments" / "site_worker.py" in sources
    assert REPO / "deployments" / "site_runner.py" in sources
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in sources
        for line, name in private_prefect_imports(path.read_text())
    ]
    assert not found, "use Prefect's public API:\n" + "\n".join(found)


def test_the_check_finds_every_form_of_private_import():
    source = "\n".join(
        [
            "import prefect._internal.metrics",
            "from prefect.runner._process_manager import ProcessHandle",
            "from prefect._internal import control_listener",
            "from prefect.runner import _flow_run_executor",
            "import importlib; importlib.import_module('prefect.runner._starter_engine')",
            "__import__('prefect._internal')",
            # public: kept
            "import prefect.workers.base",
            "from prefect.workers.process import ProcessWorkerResult",
            "from prefect import __version__",
            "from prefect.runner import Runner",
            "from . import _private_sibling",
            "from dpate._x import y",
        ]
    )
    assert [line for line, _ in private_prefect_imports(source)] == [1, 2, 3, 4, 5, 6]
