"""What the light commands import: ``import dpate.cli.main`` (every command's ``--help``) and
``dpate ledger show`` on a SQLite-file ledger import neither numba nor Prefect nor SQLAlchemy
(each checked in a fresh interpreter's ``sys.modules``), and the ledger read without SQLAlchemy
gives the spend the SQLAlchemy reader gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dpate.ledger import PrivacyLedger
from dpate.ledger_file import read_site_spend
from dpate_core.privacy import PrivacyParams

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "prefect", "sqlalchemy")

_REPORT = (
    "import json, sys\n"
    f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
)


def _heavy_modules(code: str, env: dict[str, str]) -> list[str]:
    p = subprocess.run(
        [sys.executable, "-c", code + _REPORT],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    found: list[str] = json.loads(p.stdout.strip().splitlines()[-1])
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
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
