"""What the light commands import: ``import dpate.cli.main`` (every command's ``--help``) and
``dpate ledger show`` on a SQLite-file ledger import neither numba nor Prefect nor SQLAlchemy;
``dpate plan`` (every estimator) imports none of them nor pandas; ``dpate check`` of CSV sites
imports neither numba, Prefect, SQLAlchemy nor pandas (each checked in a fresh interpreter's
``sys.modules``). The ledger read without SQLAlchemy gives the spend the SQLAlchemy reader gives,
and the kernels run as Python (``compile_cache.interpreted``, the planner's) give the compiled
kernels' values to the bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpate.ledger import PrivacyLedger, read_site_spend
from dpate_core.privacy import PrivacyParams
from tests.cli.test_check import write_study

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "pandas", "prefect", "sqlalchemy")

_REPORT = (
    "import json, sys\n"
    f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
)


def _child(code: str, env: dict[str, str] | None = None) -> str:
    """``code`` run in a fresh interpreter (it must succeed); its standard output."""
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ),
        cwd=REPO,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def _heavy_modules(code: str, env: dict[str, str] | None = None) -> list[str]:
    found: list[str] = json.loads(_child(code + _REPORT, env).strip().splitlines()[-1])
    return found


def _ledger(home: Path) -> str:
    url = f"sqlite:///{home / 'ledgers' / 'north.sqlite'}"
    cap = PrivacyParams.of("5", "1e-4")
    with PrivacyLedger.init(url, "north", cap, reason="test") as led:
        for rid, study in (("r1", "s1"), ("r2", "s1"), ("r3", "s2")):
            led.reserve(
                release_id=rid,
                study_id=study,
                site_id="north",
                spec_hash="h",
                round=rid,
                privacy=PrivacyParams.of("1/3", "1e-6"),
                cap=cap,
            )
        led.commit("r1", {"estimate": 0.5})
    return url


def test_importing_the_command_line_imports_no_heavy_library():
    assert _heavy_modules("import dpate.cli.main\n", dict(os.environ)) == []


def test_ledger_show_on_a_sqlite_file_imports_no_heavy_library(tmp_path):
    home = tmp_path / "home"
    _ledger(home)
    env = {**os.environ, "DPATE_HOME": str(home)}
    env.pop("DPATE_LEDGER_URL", None)
    env.pop("DPATE_SITE_CONFIG", None)
    code = (
        "import json\nfrom typer.testing import CliRunner\nfrom dpate.cli.main import app\n"
        "r = CliRunner().invoke(app, ['ledger', 'show', 'north', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert json.loads(r.stdout)['spent']['epsilon'] == '1', r.output\n"
    )
    assert _heavy_modules(code, env) == []


def test_the_sqlite_file_read_gives_the_ledger_readers_spend(tmp_path):
    url = _ledger(tmp_path)
    with PrivacyLedger(url) as led:
        expected = led.spend("north")
    got = read_site_spend(url, "north", site="north")
    assert got == expected
    assert got.releases == {"s1": (2, 1), "s2": (1, 0)}
    with PrivacyLedger(url) as led:
        assert read_site_spend(url, "south") == led.spend("south")


def test_the_estimators_import_numba_at_their_first_kernel_call():
    """Importing the estimators and the planner defines their kernels without numba; the first
    kernel call compiles (or loads from numba's cache) and returns the kernel's result."""
    code = (
        "import sys\n"
        "import dpate_core.mechanisms, dpate_core.planning, dpate_core.noise\n"
        "import dpate_core.statistics, dpate_core.mechanisms.propensity._kernels\n"
        "assert 'numba' not in sys.modules, 'numba imported with the estimators'\n"
        "from dpate_core.statistics import exact_matching\n"
        "r = exact_matching([0, 1, 0, 1], [0.1, 0.5, 0.2, 0.9], [0, 0, 1, 1])\n"
        "assert 'numba' in sys.modules and abs(r.tau - 0.55) < 1e-12, r\n"
    )
    _child(code)


def _invoke(args: list[str], code: int = 0) -> str:
    """A command run in the child interpreter (its exit code checked) before the report."""
    return (
        "from typer.testing import CliRunner\nfrom dpate.cli.main import app\n"
        f"r = CliRunner().invoke(app, {args!r})\n"
        f"assert r.exit_code == {code}, (r.exit_code, r.output)\n"
    )


@pytest.mark.parametrize(
    "estimator", ["smooth_matching", "global_matching", "adjusted", "propensity", "dim"]
)
def test_plan_imports_no_heavy_library(tmp_path, estimator):
    """The matching estimators' predicted smooth sensitivities run the release's kernels as
    Python: numba is not imported (nor pandas, Prefect, SQLAlchemy)."""
    top = {"design": '"randomized"', "arm_sizes_public": "true"} if estimator == "dim" else {}
    spec = write_study(tmp_path, {"a": {}, "b": {}}, estimator=f'"{estimator}"', **top)
    args = ["plan", str(spec), "--n", "a=400", "--n", "b=3000", "--json"]
    assert _heavy_modules(_invoke(args)) == []


def test_check_of_csv_sites_imports_no_heavy_library(tmp_path, home):
    """``dpate check`` validates CSV sites on DuckDB without pandas (nor numba, Prefect,
    SQLAlchemy), the ledger read as ``ledger show`` reads it."""
    spec = write_study(tmp_path, {"a": {}, "b": {"n": 300}})  # the sites' keys under ``home``
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPATE_")}
    env["DPATE_HOME"] = str(home)
    for site in ("a", "b"):
        url = f"sqlite:///{home / 'ledgers' / f'{site}.sqlite'}"
        with PrivacyLedger.init(url, site, PrivacyParams.of("2", "1e-4"), reason="test"):
            pass
    code = _invoke(["check", str(spec)]) + "assert 'validated against the spec' in r.output\n"
    assert _heavy_modules(code, env) == []


def test_interpreted_kernels_give_the_compiled_values_to_the_bit():
    """The matching sensitivities' kernels run as Python under ``interpreted()`` without
    importing numba, and equal the compiled kernels' values exactly on varied counts."""
    code = (
        "import sys\nimport numpy as np\n"
        "from dpate_core.compile_cache import interpreted\n"
        "from dpate_core.mechanisms.matching._sensitivity import (\n"
        "    matching_smooth_sensitivity as s, matching_variance_smooth_sensitivity as v,\n"
        "    smooth_beta)\n"
        "rng = np.random.default_rng(3)\ncases = []\n"
        "for _ in range(40):\n"
        "    k = int(rng.integers(1, 12))\n"
        "    t, c = rng.integers(0, 40, k), rng.integers(0, 40, k)\n"
        "    t[0] += 2\n"
        "    beta = smooth_beta(float(rng.choice([0.1, 1.0, 3.0])), 1e-6)\n"
        "    cases.append((t, c, int(t.sum() + c.sum()), float(rng.choice([1.0, 600.0])), "
        "beta, k + int(rng.integers(0, 3))))\n"
        "with interpreted():\n"
        "    py = [(s(*a), v(*a)) for a in cases]\n"
        "assert 'numba' not in sys.modules, 'numba imported while interpreted'\n"
        "compiled = [(s(*a), v(*a)) for a in cases]\n"
        "assert 'numba' in sys.modules\n"
        "assert py == compiled, [(p, q) for p, q in zip(py, compiled) if p != q][:3]\n"
    )
    _child(code)
