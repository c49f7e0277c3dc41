"""A propensity study whose adjustment set mixes categorical covariates and numeric ones with
public bounds and no bins, end to end (``dpate run`` on the embedded Prefect): each site reads its
validated records (the numeric values clipped to the spec's bounds) into its own process, charges
its ledger ``(epsilon, 0)`` once, and publishes a resolved propensity estimate; the result names
the estimand; a second run spends nothing and publishes the same bytes."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.ledger import PrivacyLedger
from dpate_core.synth import synth_strata
from tests.cli.conftest import public_key_line

SPEC = """spec_version = 1
study_id = "propensity-numeric"
design = "observational"
estimator = "propensity"
aggregator = "inverse_variance"
release = "1"
reports = "published"

[treatment]
column = "treated"

[outcome]
column = "death30"
bound = 1.0
policy = "reject"

[[covariates]]
kind = "numeric"
column = "age"
lower = 18
upper = 95

[[covariates]]
kind = "categorical"
column = "sex"
levels = ["f", "m"]

[[covariates]]
kind = "categorical"
column = "diagnosis"
levels = [0, 1, 2, 3]

[[covariates]]
kind = "numeric"
column = "severity"
lower = 0
upper = 8
policy = "clip"

[[covariates]]
kind = "categorical"
column = "comorbid"
levels = [0, 1]
"""


def _site(root, site_id: str, n: int, seed: int) -> str:
    s = synth_strata(n, seed=seed)
    c = s.covariates
    folder = root / "sites" / site_id
    folder.mkdir(parents=True)
    table = {
        "treated": s.w,
        "death30": s.y,
        "age": c["age"],
        "sex": np.where(c["sex"] == 1, "m", "f"),
        "diagnosis": c["diagnosis"],
        "severity": c["severity"],  # up to 10: values above the public bound 8 are clipped
        "comorbid": c["comorbid"],
    }
    pq.write_table(pa.table(table), folder / "records.parquet")
    return f"""
[[sites]]
id = "{site_id}"
{public_key_line(site_id)}data = "sites/{site_id}/records.parquet"
epsilon = "1"
lifetime_cap = {{ epsilon = "3", delta = "0" }}
"""


def _two_site_study(tmp_path, monkeypatch, extra: str = "") -> tuple[Path, Path, str]:
    """The study of north (3,000 records) and south (2,500), ``extra`` spec text before the
    sites, for ``dpate run`` with the spec's data and its own home: (root, spec, ledger URLs)."""
    for k in ("DPATE_LEDGER_URL", "DPATE_SITE_LOG", "DPATE_HOME", "DPATE_STORAGE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    root = tmp_path / "study"
    root.mkdir()
    spec = root / "study.toml"
    spec.write_text(SPEC + extra + _site(root, "north", 3000, 1) + _site(root, "south", 2500, 2))
    return root, spec, f"sqlite:///{tmp_path}/ledgers/{{site}}.sqlite"


def test_dpate_run_releases_a_propensity_study_with_bounded_numeric_covariates(
    tmp_path, monkeypatch
):
    root, spec, ledgers = _two_site_study(tmp_path, monkeypatch)
    runner = CliRunner()
    ran = runner.invoke(
        app, ["run", str(spec), "--init-ledgers", "--ledger", ledgers], env={"COLUMNS": "200"}
    )
    assert ran.exit_code == 0, ran.output
    published = root / "published"
    first = {str(p.relative_to(published)): p.read_bytes() for p in published.rglob("*.json")}
    (result,) = [k for k in first if "/results/" in k]
    doc = json.loads(first[result])
    assert doc["estimand"].startswith("average effect over the patients in propensity-score")
    assert len(doc["sites"]) == 2
    for site in ("north", "south"):
        (report,) = [json.loads(v) for k, v in first.items() if f"/sites/{site}/" in k]
        est = report["estimate"]
        assert "resolved" not in est and np.isfinite(est["variance"])  # a resolved release
        assert est["estimator"] == "propensity" and est["n"] in (3000, 2500)
        # "auto" without a declared n: the rule's first row, two fifths to the model
        assert est["budget_split"] == ["2/5", "29/50", "1/50"]
        assert "model_variance" in est["diagnostics"]
        assert abs(est["tau"]) <= 1.0
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            assert ledger.spend(site).spent.epsilon == Fraction(1)
            assert ledger.spend(site).spent.delta == 0
    again = runner.invoke(app, ["run", str(spec), "--ledger", ledgers])
    assert again.exit_code == 0, again.output
    second = {str(p.relative_to(published)): p.read_bytes() for p in published.rglob("*.json")}
    assert second == first  # the recorded releases, byte for byte
    for site in ("north", "south"):
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            assert ledger.spend(site).spent.epsilon == Fraction(1)  # nothing more spent


def test_dpate_run_releases_the_balance_table_within_the_propensity_bands(tmp_path, monkeypatch):
    """With ``[balance]``: each site records its release's noisy model with the estimate, then
    releases the balance table (its own epsilon) within the bands of that model, each record's
    band from its numeric values; the numeric covariates are read in public bins of their
    bounds; a second run re-publishes the recorded tables byte for byte and spends nothing; the
    HTML report says what "within" is."""
    root, spec, ledgers = _two_site_study(tmp_path, monkeypatch, '\n[balance]\nepsilon = "1/2"\n')
    runner = CliRunner()
    ran = runner.invoke(app, ["run", str(spec), "--init-ledgers", "--ledger", ledgers])
    assert ran.exit_code == 0, ran.output
    published = root / "published"
    first = {str(p.relative_to(published)): p.read_bytes() for p in published.rglob("*.json")}
    (result,) = [k for k in first if "/results/" in k]
    doc = json.loads(first[result])
    for s in doc["sites"]:
        table = s["balance"]
        assert table["within"] == "released" and table["bands"] == 5
        rows = {(r["covariate"], r["level"]): r for r in table["rows"]}
        assert rows[("age", None)]["smd_within"] is not None  # numeric: one row, bin midpoints
        assert rows[("severity", None)]["smd_before"] is not None
        assert ("sex", "m") in rows and len(rows) == 2 + 2 + 4 + 2
    for site in ("north", "south"):
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            assert ledger.spend(site).spent.epsilon == Fraction(3, 2)
    again = runner.invoke(app, ["run", str(spec), "--ledger", ledgers])
    assert again.exit_code == 0, again.output
    second = {str(p.relative_to(published)): p.read_bytes() for p in published.rglob("*.json")}
    assert second == first  # the recorded estimates and tables, byte for byte
    for site in ("north", "south"):
        with PrivacyLedger(ledgers.format(site=site)) as ledger:
            assert ledger.spend(site).spent.epsilon == Fraction(3, 2)  # nothing more spent
    out = tmp_path / "report.html"
    drawn = runner.invoke(app, ["report", str(spec), "-o", str(out)])
    assert drawn.exit_code == 0, drawn.output
    page = out.read_text()
    assert "Covariate balance (DP)" in page and "within propensity bands" in page
    # the numeric rows' noise, from the spec's bin midpoints (`dpate report` reads the spec)
    age = page.split("<td>age</td>", 1)[1].split("</tr>", 1)[0]
    assert age.count("noise sd &gt;=") == 2  # at both sites
