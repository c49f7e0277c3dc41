"""`dpate data describe`."""

from __future__ import annotations

from pathlib import Path

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


@needs_data
def test_extracts_writes_each_star_site_as_the_example_spec_reads_it(tmp_path):
    import pandas as pd

    from dpate.schemas.spec import load_spec

    res = runner.invoke(app, ["data", "extracts", "star", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    spec = load_spec(Path(__file__).resolve().parents[2] / "deployments/examples/star.toml")
    sizes = {}
    for site in spec.sites:
        frame = pd.read_parquet(tmp_path / spec.site(site.id).data)  # <site>/star.parquet
        assert list(frame.columns) == [spec.treatment.column, spec.outcome.column]
        scores = frame[spec.outcome.column]
        assert scores.between(spec.outcome.offset, spec.outcome.offset + spec.outcome.bound).all()
        sizes[site.id] = len(frame)
    assert sizes == {"rural": 4294, "suburban": 2721, "inner-city": 2426, "urban": 888}


def test_extracts_name_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("DPATE_DATA_DIR", str(tmp_path / "empty"))
    res = runner.invoke(app, ["data", "extracts", "star", str(tmp_path / "out")])
    assert res.exit_code == 4 and "dpate data fetch star" in " ".join(res.output.split())
    assert not (tmp_path / "out").exists()
    res = runner.invoke(app, ["data", "extracts", "ihdp", str(tmp_path / "out")])
    assert res.exit_code == 2 and "star" in res.output
