"""The README's two quick-start commands in ONE virtual environment, as a new user runs them
(``pip install . && dpate demo``, then ``pip install -e ".[test]"``), and in the reverse order:
afterwards ``dpate --help`` works from outside the checkout, no stale ``dpate``/``dpate_core``
folder is left in ``site-packages`` (numba's compiled kernels are cached in the user's cache
folder, ``dpate_core.compile_cache``, never inside the installed package), and the tests run from
outside the checkout.

The venv reuses the suite's installed dependencies (a ``.pth`` line naming this interpreter's
``site-packages``, which adds the folder without running its own ``.pth`` files, so this
checkout's editable install is not visible) and installs the project itself with ``--no-deps``:
the commands are the README's, without downloading the dependencies again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".hypothesis", "dpate-demo", "out", "experiment-results",
)  # fmt: skip


def _venv(tmp: Path) -> tuple[Path, dict[str, str]]:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "zz_suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        XDG_CACHE_HOME=str(tmp / "cache"),
        PREFECT_HOME=str(tmp / "prefect"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return Path(site), env


def _run(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    res = subprocess.run(
        ["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res.stdout


# the README's commands, with --no-deps (the venv already sees the dependencies)
INSTALL = "pip install -q --no-deps ."
INSTALL_EDITABLE = 'pip install -q --no-deps -e ".[test]"'


#: one adjusted release on a seeded generator: compiles (and caches) the core's kernels
_COMPILE = (
    "import numpy as np; from dpate_core.mechanisms.adjusted import dp_adjusted; "
    "g = np.random.default_rng(0); "
    "dp_adjusted(g.integers(0, 2, 50), g.random(50), g.integers(0, 4, 50), bound=1.0, "
    "epsilon='1', domain_size=4, rng=g)"
)


def _check_installed(
    site: Path, checkout: Path, elsewhere: Path, env: dict[str, str], *, editable: bool
) -> None:
    """``site``: the venv's site-packages, whose ``dpate``/``dpate_core`` folders must be absent
    after an editable install (a stale one shadows the checkout) and hold no numba cache file."""
    installed = [p.name for p in site.iterdir() if p.name in ("dpate", "dpate_core")]
    if editable:
        assert not installed, f"left in site-packages: {installed}"
    cached = [str(p.relative_to(site)) for p in site.glob("dpate*/**/*.nb[ic]")]
    assert not cached, f"numba cache files in the installed package: {cached[:5]}"
    assert "Usage" in _run("dpate --help", elsewhere, env)
    # tests of the installed package, run from outside the checkout (test_namespace checks that
    # the editable install maps the checkout's folders)
    tests = "test_namespace.py" if editable else "core/test_budget.py"
    _run(
        f"python -m pytest -q -p no:cacheprovider -n 0 {checkout / 'tests' / tests}", elsewhere, env
    )


def test_readme_commands_in_one_venv(tmp_path):
    checkout = tmp_path / "dpate"
    shutil.copytree(REPO, checkout, symlinks=True, ignore=_IGNORE)
    site, env = _venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the first command, then the demo from a working folder of the user's
    _run(INSTALL, checkout, env)
    demo = _run("dpate demo", elsewhere, env, timeout=900)
    assert "MVAgg" in demo or "mvagg" in demo.lower()
    assert any((tmp_path / "cache" / "dpate" / "numba").rglob("*.nbi")), (
        "numba cached no kernel in the user's cache folder"
    )
    # the second command in the same venv
    _run(INSTALL_EDITABLE, checkout, env)
    _check_installed(site, checkout, elsewhere, env, editable=True)


def test_readme_commands_in_reverse_order(tmp_path):
    checkout = tmp_path / "dpate"
    shutil.copytree(REPO, checkout, symlinks=True, ignore=_IGNORE)
    site, env = _venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _run(INSTALL_EDITABLE, checkout, env)
    # kernels compiled from the editable install, then the regular install over it
    _run(f"python -c {_COMPILE!r}", elsewhere, env)
    _run(INSTALL, checkout, env)
    _run(f"python -c {_COMPILE!r}", elsewhere, env)
    _check_installed(site, checkout, elsewhere, env, editable=False)
