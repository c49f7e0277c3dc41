"""`dpate` errors: one short message per failing site, the real cause, exit codes by cause.

Runs the real command in a subprocess (its own PREFECT_HOME and DPATE_HOME in a temporary
folder, the session's Prefect server as PREFECT_API_URL rather than an embedded server started by
each command) and checks the WHOLE stderr: Prefect's console logs and tracebacks must not bury
the cause.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpate.cli.errors import classify, summary_code
from dpate.errors import ExitCode
from tests.cli.conftest import public_key_line

MARKER = "n/a-7391"  # a raw value put in the outcome column: must never be echoed


def write_study(
    root: Path, bad_sites: set[str], home: Path, sites: tuple[str, ...] = ("a", "b", "c")
) -> Path:
    """Three CSV sites (matching on one 4-level covariate); bad sites hold text in the outcome.
    Each site's key is under ``home`` (the commands' DPATE_HOME), its public half in the spec."""
    rng = np.random.default_rng(3)
    blocks = []
    for site in sites:
        n = 120
        level = rng.integers(0, 4, n)
        w = (rng.random(n) < 0.5).astype(int)
        y = [f"{v:.6f}" for v in np.clip(0.2 + 0.1 * level + 0.3 * w, 0, 1)]
        if site in bad_sites:
            y[5] = y[40] = MARKER
        folder = root / "sites" / site
        folder.mkdir(parents=True, exist_ok=True)
        lines = ["treated,outcome,stratum"] + [f"{w[i]},{y[i]},{level[i]}" for i in range(n)]
        (folder / "records.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        blocks.append(
            f'\n[[sites]]\nid = "{site}"\ndata = "sites/{site}/records.csv"\nepsilon = "1"\n'
            f'delta = "1e-5"\nlifetime_cap = {{ epsilon = "3", delta = "1e-4" }}\n'
            + public_key_line(site, home)
        )
    spec = root / "study.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "errors-study"\ndesign = "observational"\n'
        'estimator = "smooth_matching"\nmissing = "reject"\nreports = "published"\n'
        'require_all_sites = false\n\n[treatment]\ncolumn = "treated"\n\n'
        '[outcome]\ncolumn = "outcome"\nbound = 1.0\n\n'
        '[[covariates]]\nkind = "categorical"\ncolumn = "stratum"\nlevels = [0, 1, 2, 3]\n'
        + "".join(blocks),
        encoding="utf-8",
    )
    return spec


@pytest.fixture(scope="module")
def env(tmp_path_factory, prefect_test_server) -> dict[str, str]:
    home = tmp_path_factory.mktemp("cli-errors")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPATE_"))}
    e.update(PREFECT_HOME=str(home / "prefect"), DPATE_HOME=str(home / "dpate"), COLUMNS="200")
    e.update(prefect_test_server.env)
    return e


def dpate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpate.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )


def in_process(*args: str):
    """The command run by Typer's test runner in this process (its stderr kept apart)."""
    from typer.testing import CliRunner

    from dpate.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_all_sites_fail_validation_short_stderr_with_each_cause(tmp_path, env):
    spec = write_study(tmp_path, {"a", "b", "c"}, Path(env["DPATE_HOME"]))
    r = dpate(env, "run", str(spec), "--init-ledgers")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == ExitCode.SITE_DATA, r.stderr
    assert len(lines) < 25, r.stderr
    assert "Traceback" not in r.stderr and "ERROR" not in r.stderr
    for site in ("a", "b", "c"):  # each site's block names the column and the rule
        [i] = [k for k, x in enumerate(lines) if x.startswith(f"error: site {site}: ")]
        block = " ".join(lines[i : i + 3])
        assert "column 'outcome'" in block and "not a number" in block, block
    assert MARKER not in r.stderr + r.stdout and "7391" not in r.stderr + r.stdout


def test_partial_result_and_spec_error_have_their_own_exit_codes(tmp_path, env):
    spec = write_study(tmp_path, {"b"}, Path(env["DPATE_HOME"]))
    r = dpate(env, "run", str(spec), "--init-ledgers")
    assert r.returncode == ExitCode.PARTIAL, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) < 10
    assert "error: site b: " in r.stderr and "partial result" in r.stderr
    assert "mvagg estimate" in r.stdout.lower()

    bad = tmp_path / "bad.toml"
    bad.write_text(spec.read_text().replace("smooth_matching", "ols"), encoding="utf-8")
    r = dpate(env, "run", str(bad))
    assert r.returncode == ExitCode.SPEC, r.stderr
    assert r.stderr.startswith("error: invalid study spec") and "estimator" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) < 5
    # the other commands read the spec the same way, before Prefect starts: in this process
    for command in ("aggregate", "report"):
        r = in_process(command, str(bad))
        assert r.exit_code == ExitCode.SPEC, (command, r.stderr)
        assert r.stderr.startswith("error: invalid study spec") and "estimator" in r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) < 5
    assert in_process("site-release", str(bad), "--site", "a").exit_code == ExitCode.SPEC
    r = in_process("site-release", str(spec), "--site", "zz")
    assert r.exit_code == ExitCode.USAGE and "not in study" in r.stderr
    assert len({ExitCode.SPEC, ExitCode.PARTIAL, ExitCode.SITE_DATA, ExitCode.SITES_FAILED}) == 4


def test_failures_are_classified_by_their_type():
    f = classify("SiteDataRejected: site a: column 'y': not a number", "a")
    assert (f.code, f.site, f.lines()) == (
        ExitCode.SITE_DATA,
        "a",
        ["site a: invalid site data: column 'y': not a number"],
    )
    assert classify("BudgetExceededError: cap passed").code == ExitCode.LEDGER
    assert classify("dpate.ledger.LedgerNotFoundError: no ledger").code == ExitCode.LEDGER
    assert classify("ReportError: bad").code == ExitCode.REPORT
    assert classify("SettingsError: no storage").code == ExitCode.SETTINGS
    assert classify("ZeroDivisionError: x").code == ExitCode.UNEXPECTED
    assert classify("no type here").code == ExitCode.UNEXPECTED
    two = [classify("SiteDataRejected: x"), classify("BudgetExceededError: y")]
    assert summary_code(two) == ExitCode.SITES_FAILED
    assert summary_code(two[:1]) == ExitCode.SITE_DATA


def test_unexpected_errors_are_one_line_unless_debug(monkeypatch):
    import typer
    from typer.testing import CliRunner

    from dpate.cli.errors import DEBUG, CliGroup
    from dpate.schemas.spec import SpecError

    app = typer.Typer(cls=CliGroup)

    @app.callback()
    def main(debug: bool = typer.Option(False, "--debug")) -> None:
        DEBUG["on"] = debug

    @app.command()
    def boom(kind: str) -> None:
        if kind == "spec":
            raise SpecError([("estimator", "must be one of ...")], "s.toml")
        raise ZeroDivisionError("division by zero")

    runner = CliRunner()
    r = runner.invoke(app, ["boom", "spec"])
    assert r.exit_code == ExitCode.SPEC and "Traceback" not in r.output
    r = runner.invoke(app, ["boom", "other"])
    assert r.exit_code == ExitCode.UNEXPECTED
    assert "unexpected ZeroDivisionError" in r.output and "--debug" in r.output
    r = runner.invoke(app, ["--debug", "boom", "other"])
    assert isinstance(r.exception, ZeroDivisionError)  # the traceback is the user's to see
    DEBUG["on"] = False
