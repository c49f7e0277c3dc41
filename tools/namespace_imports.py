"""Rewrite module paths for the ``dpate`` namespace (issue 10, item 5): ``schemas``, ``tasks``,
``flows`` and ``deployments`` are installed as ``dpate.schemas``, ``dpate.tasks``, ... while their
folders stay at the repository's top level (pyproject ``package-dir``).

    python tools/namespace_imports.py          # rewrite tracked files in place, list them
    python tools/namespace_imports.py --check  # exit 1 if anything is left to rewrite

Idempotent. What it rewrites, and only that:
- ``from X import``, ``from X.sub import``, ``import X``, ``import X.sub`` statements;
- dotted module paths ``X.sub`` where ``sub`` is one of X's own modules or subpackages (read
  from the folder), not preceded by a word character, ``.`` or ``/`` (``tests.tasks.helpers``,
  ``dpate.tasks.site`` and file paths such as ``schemas/report.py`` stay as they are).
A variable named ``tasks`` or ``flows`` is never followed by one of those module names in this
repository; review the diff anyway.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "tasks", "flows", "deployments")
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".service", ".timer", ".example", ".cfg"}
SKIP = {"pyproject.toml", "tools/namespace_imports.py"}


def _submodules(pkg: str) -> list[str]:
    root = REPO / pkg
    names = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    return sorted(names, key=len, reverse=True)


def _patterns() -> list[tuple[re.Pattern[str], str]]:
    out = []
    pkgs = "|".join(PACKAGES)
    # import statements (also indented, also in docs' code blocks)
    out.append(
        (
            re.compile(rf"^(\s*(?:>>> |\.\.\. )?(?:from|import) )({pkgs})\b(?=[\s.])", re.M),
            r"\1dpate.\2",
        )
    )
    for pkg in PACKAGES:
        subs = "|".join(map(re.escape, _submodules(pkg)))
        out.append((re.compile(rf"(?<![\w./-])({pkg})\.({subs})\b"), r"dpate.\1.\2"))
    return out


def rewrite(text: str) -> str:
    for pattern, repl in _patterns():
        text = pattern.sub(repl, text)
    return text


def tracked() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / n for n in names if Path(n).suffix in SUFFIXES and n not in SKIP]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = []
    for path in tracked():
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            changed.append(path.relative_to(REPO))
            if not check:
                path.write_text(new)
    for rel in changed:
        print(rel)
    return 1 if (check and changed) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
