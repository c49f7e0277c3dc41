"""`dpate data describe`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dpate.cli.main import app

from .test_datasets import needs_data

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["data", "describe", *args], env={"COLUMNS": "200"})


@needs_data
def test_star_natural_sites():
    res = run("star")
    assert res.exit_code == 0, res.output
    assert "N = 10,329, N_t = 2,643, N_c = 7,686, |X| = 1" in res.output
    for site, size in (
        ("rural", "4,294"),
        ("suburban", "2,721"),
        ("inner-city", "2,426"),
        ("urban", "888"),
    ):
        assert site in res.output and size in res.output


@needs_data
def test_ist_paper_proportions_and_equal_split():
    res = run("ist", "--split", "18:1:1", "--seed", "4")
    assert res.exit_code == 0, res.output
    assert "N = 19,408, N_t = 9,705, N_c = 9,703" in res.output
    assert "17,467" in res.output and "971" in res.output and "970" in res.output
    res = run("lalonde", "--sites", "2")
    assert res.exit_code == 0 and "361" in res.output and "|X| = 39" in res.output


def test_synth_and_errors():
    res = run("synth", "--n", "1000", "--domain-size", "10", "-a", "0.5")
    assert res.exit_code == 0, res.output
    assert "N = 1,000" in res.output and "|X| = 10" in res.output
    assert run("mnist").exit_code == 2
    assert run("synth", "--split", "3:x").exit_code == 2
    assert run("synth", "--split", "equal").exit_code == 2


@pytest.mark.parametrize("name", ["ist"])
def test_missing_data_dir(tmp_path, name):
    res = runner.invoke(
        app, ["data", "describe", name], env={"DPATE_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    )
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "DPATE_DATA_DIR" in text
    assert "run `dpate data fetch`" in text and "shared" not in text
