"""``dpate site-release``: one site's release from the command line (the same path as a study's
site subflow): the first call publishes, a second spends nothing and says it was recorded, and a
refused release exits non-zero with a public message."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.pipeline.studies import Site, leaked, write_study

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness")]


def _text(result) -> str:
    return " ".join(result.output.split())  # rich wraps long lines


def test_site_release_cli_publishes_once_then_reports_the_recorded_release(tmp_path):
    study = write_study(tmp_path / "cli", [Site("north", 400, "1", "1")], study_id="cli-study")
    runner = CliRunner()
    args = ["site-release", str(study.spec), "--site", "north"]

    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "report published" in _text(first)
    published = study.snapshot()

    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "already published (recorded release)" in _text(second)
    assert study.snapshot() == published  # identical bytes, nothing new

    # the cap (epsilon 1) is spent: a new round is refused, nothing more is published
    third = runner.invoke(app, [*args, "--round", "2"])
    assert third.exit_code != 0
    assert study.snapshot() == published
    for out in (first.output, second.output, third.output):
        assert not leaked(out, study.outcomes["north"])
