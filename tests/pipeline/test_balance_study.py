"""A study with a DP covariate-balance table, end to end (``dpate run`` on the embedded Prefect,
then again, then ``dpate report``): every site charges its ledger the estimate's budget and the
table's own, publishes the table in its report, the result carries it and names the study's
estimand; the second run spends nothing and re-publishes the same bytes (the recorded table, no
fresh noise); the HTML report shows the tables beside the forest plot."""

from __future__ import annotations

import json
from fractions import Fraction

from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.ledger import PrivacyLedger
from tests.pipeline.studies import Site, write_study


def test_dpate_run_releases_each_balance_table_once(tmp_path, monkeypatch):
    for k in ("DPATE_LEDGER_URL", "DPATE_SITE_LOG", "DPATE_HOME", "DPATE_STORAGE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    study = write_study(tmp_path / "s", [Site("north", 500), Site("south", 400)])
    head, sites = study.spec.read_text().split("[[sites]]", 1)
    study.spec.write_text(head + '\n[balance]\nepsilon = "1/5"\n\n[[sites]]' + sites)
    ledgers = f"sqlite:///{tmp_path}/ledgers/{{site}}.sqlite"
    runner = CliRunner()
    ran = runner.invoke(
        app, ["run", str(study.spec), "--init-ledgers", "--ledger", ledgers], env={"COLUMNS": "200"}
    )
    assert ran.exit_code == 0, ran.output
    assert "Estimand: the average effect over all patients" in ran.output
    first = study.snapshot()
    (result,) = [k for k in first if "/results/" in k]
    doc = json.loads(first[result])
    assert doc["estimand"].startswith("the average effect over all patients")
    for s in doc["sites"]:
        assert s["balance"]["epsilon"] == "1/5" and s["balance"]["within"] == "by construction"
    spent = {}
    for site in ("north", "south"):
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            spent[site] = ledger.spend(site).spent
        assert spent[site].epsilon == Fraction(1) + Fraction(1, 5)
    again = runner.invoke(app, ["run", str(study.spec), "--ledger", ledgers])
    assert again.exit_code == 0, again.output
    assert study.snapshot() == first  # the recorded tables, byte for byte
    for site in ("north", "south"):
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            assert ledger.spend(site).spent == spent[site]  # nothing more spent
    out = tmp_path / "report.html"
    drawn = runner.invoke(app, ["report", str(study.spec), "-o", str(out)])
    assert drawn.exit_code == 0, drawn.output
    page = out.read_text()
    assert "Covariate balance (DP)" in page and "Estimand: the average effect" in page
