"""Each public name has one import path: the module that defines it, or the package whose private
modules define it (``dpate.ledger``, ``dpate.schemas.spec``). No module lists in its ``__all__`` a
name it imports from another public module of dpate, so a public name is never importable from a
second place that callers would then use."""

from __future__ import annotations

import ast

from tests.test_prefect_public_api import REPO, _sources
from tests.test_private_names import _private


def reexports(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each name that ``source``'s ``__all__`` lists and that it imports
    from a public dpate module (a module path without a private part)."""
    tree = ast.parse(source)
    listed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            listed |= set(ast.literal_eval(node.value))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        parts = node.module.split(".")
        if parts[0] not in ("dpate", "dpate_core") or any(_private(p) for p in parts):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) in listed:
                found.append((node.lineno, f"{node.module}.{alias.name}"))
    return found


def test_no_module_lists_a_name_imported_from_another_public_module():
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in _sources()
        for line, name in reexports(path.read_text())
    ]
    assert not found, (
        "import the name from the module that defines it and leave it out of __all__:\n"
        + "\n".join(found)
    )


def test_the_check_finds_each_form_of_reexport():
    source = "\n".join(
        [
            "from typing import TYPE_CHECKING",
            "from dpate.errors import ExitCode",
            "from dpate_core.aggregation import aggregate as combine",
            "if TYPE_CHECKING:",
            "    from dpate_core.release import SiteEstimate",
            "from dpate.ledger._chain import LedgerError",  # the package's own private module
            "from dpate.errors import DpateError",  # used, not listed
            "from numpy import ndarray",
            "__all__ = ['ExitCode', 'combine', 'SiteEstimate', 'LedgerError', 'ndarray', 'f']",
            "def f(): ...",
        ]
    )
    assert reexports(source) == [
        (2, "dpate.errors.ExitCode"),
        (3, "dpate_core.aggregation.aggregate"),
        (5, "dpate_core.release.SiteEstimate"),
    ]
