"""The README's two quick-start commands in ONE virtual environment, as a new user runs them
(``pip install . && dpate demo``, then ``pip install -e ".[test]"``), and in the reverse order
before them: afterwards ``dpate --help`` works from outside the checkout, no stale
``dpate``/``dpate_core`` folder is left in ``site-packages`` (numba's compiled kernels are cached
in the user's cache folder, ``dpate_core.compile_cache``, never inside the installed package),
and the tests run from outside the checkout. One venv walks both orders (editable, then regular,
then editable again): a venv, a copy of the checkout and an install fewer than a test per order.

The venv and the copy of the checkout: tests/checkouts.py; the project is installed with
``--no-deps`` (the venv already sees the dependencies). The editable install is the README's,
setuptools' strict mode: the checkout holds no link, and the install writes the tree of file
links that mypy and ruff read (tests/test_checkout_tools.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkouts import copy_checkout, run, venv

pytestmark = pytest.mark.slow

# the README's commands, with --no-deps (the venv already sees the dependencies)
INSTALL = "pip install -q --no-deps ."
INSTALL_EDITABLE = 'pip install -q --no-deps -e ".[test]" --config-settings editable_mode=strict'


#: one adjusted release on a seeded generator: compiles (and caches) the core's kernels
_COMPILE = (
    "import numpy as np; from dpate_core.mechanisms.adjusted import dp_adjusted; "
    "g = np.random.default_rng(0); "
    "dp_adjusted(g.integers(0, 2, 50), g.random(50), g.integers(0, 4, 50), bound=1.0, "
    "epsilon='1', domain_size=4, rng=g)"
)


def _cached_kernels(tmp: Path) -> set[Path]:
    """The index files of the kernels numba cached in the user's cache folder (one folder per
    installed source file: an editable and a regular install cache apart)."""
    return set((tmp / "cache" / "dpate" / "numba").rglob("*.nbi"))


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
    assert "Usage" in run("dpate --help", elsewhere, env)
    # tests of the installed package, run from outside the checkout (test_namespace checks that
    # the editable install maps the checkout's folders)
    tests = "test_namespace.py" if editable else "core/test_budget.py"
    run(
        f"python -m pytest -q -p no:cacheprovider -n 0 {checkout / 'tests' / tests}", elsewhere, env
    )


def test_readme_commands_in_both_orders_in_one_venv(tmp_path):
    checkout = copy_checkout(tmp_path / "dpate")
    site, env = venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the reverse order first: the second command, kernels compiled from the editable install
    run(INSTALL_EDITABLE, checkout, env)
    run(f"python -c {_COMPILE!r}", elsewhere, env)
    from_editable = _cached_kernels(tmp_path)
    assert from_editable, "numba cached no kernel in the user's cache folder"
    # then the first command over it, and the demo from a working folder of the user's (its
    # kernels read from, or compiled into, the user's cache folder)
    run(INSTALL, checkout, env)
    demo = run("dpate demo", elsewhere, env, timeout=900)
    assert "MVAgg" in demo or "mvagg" in demo.lower()
    assert _cached_kernels(tmp_path) - from_editable, (
        "numba cached no kernel of the regular install in the user's cache folder"
    )
    _check_installed(site, checkout, elsewhere, env, editable=False)
    # and the second command again, over the regular install
    run(INSTALL_EDITABLE, checkout, env)
    _check_installed(site, checkout, elsewhere, env, editable=True)
