"""A copy of this checkout and a fresh virtual environment to install it into, for the tests of
installing (tests/test_namespace.py, tests/topology/test_packaging.py and test_quickstart.py).

The venv reuses the suite's installed dependencies (a ``.pth`` line naming this interpreter's
``site-packages``, which adds the folder without running its own ``.pth`` files, so this
checkout's editable install is not visible); the project itself is installed with ``--no-deps``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: what a copy of the checkout leaves out: git, venvs, builds (a strict editable install's link
#: tree too), caches and the demo's outputs
IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".hypothesis", "dpate-demo", "out", "experiment-results",
)  # fmt: skip


def copy_checkout(dest: Path) -> Path:
    """The checkout's files at ``dest`` (links copied as links: the repository holds none)."""
    shutil.copytree(REPO, dest, symlinks=True, ignore=IGNORE)
    return dest


def venv(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A venv under ``tmp`` that sees the suite's dependencies: its ``site-packages`` and the
    environment that runs its commands (its ``bin`` first on the ``PATH``, caches under
    ``tmp``)."""
    folder = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    py = folder / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "zz_suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{folder / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        XDG_CACHE_HOME=str(tmp / "cache"),
        PREFECT_HOME=str(tmp / "prefect"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return Path(site), env


def run(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """``cmd`` through bash; its output, or a failed assertion with its tail."""
    res = subprocess.run(
        ["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res.stdout
