"""What the commands say to a new user: the ledger lines with the spec's cap, tables that wrap
instead of cutting, help text without Python or RST markup."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from typer.main import get_command
from typer.testing import CliRunner

from dpate.cli.main import app
from tests.cli.test_run_preflight import BAD_DATA, GOOD, write_spec

runner = CliRunner()


def test_check_on_day_one_prints_each_ledger_init_line_with_the_specs_cap(tmp_path, home):
    spec = write_spec(tmp_path, {"a": GOOD, "b": GOOD})
    r = runner.invoke(app, ["check", str(spec)])
    assert r.exit_code == 5, r.output  # the data is ready; only the ledgers are missing
    for site in ("a", "b"):
        assert f"dpate ledger init {site} --epsilon 3 --delta 1/10000" in r.output
    assert "--epsilon E" not in r.output and "data and settings" not in r.output
    lines = runner.invoke(app, ["ledger", "init-commands", str(spec)])
    assert lines.exit_code == 0, lines.output
    assert lines.output.splitlines() == [
        "dpate ledger init a --epsilon 3 --delta 1/10000",
        "dpate ledger init b --epsilon 3 --delta 1/10000",
    ]
    assert not (home / "ledgers").exists()
    # the printed lines work as they are
    for line in lines.output.splitlines():
        assert runner.invoke(app, line.split()[1:]).exit_code == 0
    assert runner.invoke(app, ["check", str(spec)]).exit_code == 0


def test_check_separates_a_data_problem_from_the_ledger_state(tmp_path, home):
    spec = write_spec(tmp_path, {"a": GOOD, "b": BAD_DATA["unknown-level"]})
    r = runner.invoke(app, ["check", str(spec)])
    assert r.exit_code == 4, r.output
    assert r.output.index("data and settings") < r.output.index("ledger state")


def test_tables_wrap_instead_of_cutting_on_a_narrow_console(tmp_path, home, monkeypatch):
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    study = "hospital-readmissions-longitudinal"
    with PrivacyLedger.init(url, "north", PrivacyParams.of("5", "1e-4"), reason="t") as led:
        led.reserve(
            release_id="r" * 64,
            study_id=study,
            site_id="north",
            spec_hash="0" * 64,
            round="1",
            privacy=PrivacyParams.of("1", "1e-6"),
            cap=PrivacyParams.of("5", "1e-4"),
        )
    out = io.StringIO()
    monkeypatch.setattr("dpate.cli.ledger.console", Console(file=out, width=40))
    r = runner.invoke(app, ["ledger", "show", "north", "--ledger", url])
    assert r.exit_code == 0, r.output
    text = out.getvalue()
    assert "…" not in text and "..." not in text
    first_column = [line.split("│")[1].strip() for line in text.splitlines() if line[:1] == "│"]
    assert study in "".join(first_column)  # the whole name, folded over lines


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


def test_help_text_has_no_python_or_rst_markup():
    root = get_command(app)
    for path, _cmd in [((), root), *_commands(root)]:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (path, r.output)
        for bad in ("``", ":func:", ":class:", ":mod:", "{spec}", "None"):
            assert bad not in r.output, (path, bad, r.output)
        options = [line for line in r.output.splitlines() if " --" in line]
        assert not [line for line in options if "[str]" in line], (path, r.output)


def test_verify_against_reports_finds_the_root_as_run_does(tmp_path, home):
    spec = write_spec(tmp_path, {"a": GOOD, "b": GOOD})
    assert (
        runner.invoke(app, ["ledger", "init", "a", "--epsilon", "3", "--delta", "1e-4"]).exit_code
        == 0
    )
    r = runner.invoke(app, ["ledger", "verify", "a", "--against-reports", "--spec", str(spec)])
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "published") in " ".join(r.output.split()).replace(" ", "")
    assert "None" not in r.output
