"""A whole study of the toy estimator (with its option) and the toy aggregator, each one module
of its own registered and nothing else edited (docs/how-to/extending.md): ``dpate run`` releases it at
every site (the engine's statistics, the ledger, the report and its plausibility check) and
combines it, ``dpate report`` draws it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import dpate_core.aggregation as aggregators
import dpate_core.mechanisms as mechanisms
from dpate.cli.main import app
from tests.tasks.test_registry_contract import write_toy_spec
from tests.tasks.toy_aggregator import MEDIAN_SITE
from tests.tasks.toy_estimator import TOY

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness")]


def test_dpate_run_and_report_handle_the_toys(tmp_path, monkeypatch):
    for k in ("DPATE_LEDGER_URL", "DPATE_SITE_LOG", "DPATE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    mechanisms.register(TOY)
    aggregators.register(MEDIAN_SITE)
    try:
        spec = write_toy_spec(tmp_path)
        runner = CliRunner()
        ledgers = f"sqlite:///{tmp_path}/ledgers/{{site}}.sqlite"
        ran = runner.invoke(app, ["run", str(spec), "--init-ledgers", "--ledger", ledgers])
        assert ran.exit_code == 0, ran.output
        (result,) = (tmp_path / "published").rglob("results/*.json")
        doc = json.loads(result.read_text())
        assert doc["aggregator"] == "median_site" and doc["estimate"] is not None
        used = [s for s in doc["sites"] if s["status"] == "used"]
        assert len(used) == 1 and "median variance" in used[0]["reason"]
        reports = sorted((tmp_path / "published").rglob("sites/*/*.json"))
        assert len(reports) == 3
        for path in reports:  # the option chose no sampling part: the public noise variance
            est = json.loads(path.read_text())["estimate"]
            assert est["estimator"] == "toy"
            assert est["variance"] == est["diagnostics"]["noise_variance"]
        out = tmp_path / "report.html"
        drawn = runner.invoke(app, ["report", str(spec), "-o", str(out)])
        assert drawn.exit_code == 0, drawn.output
        html = out.read_text()
        assert "median_site" in html and "the site of median variance" in html
    finally:
        mechanisms.unregister(TOY.name)
        aggregators.unregister(MEDIAN_SITE.name)
