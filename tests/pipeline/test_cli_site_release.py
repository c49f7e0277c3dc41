"""``dpate site-release``: one site's release from the command line (the same path as a study's
site subflow): without a ledger it refuses (and creates none); after ``dpate ledger init`` the
first call publishes, a second spends nothing and says it was recorded, and a refused release
exits non-zero with a public message. ``--ledger`` is the site operator's own setting."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from tests.pipeline.studies import Site, leaked, write_study

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness")]


def _text(result) -> str:
    return " ".join(result.output.split())  # rich wraps long lines


def test_site_release_cli_publishes_once_then_reports_the_recorded_release(tmp_path):
    study = write_study(tmp_path / "cli", [Site("north", 400, "1", "1")], study_id="cli-study")
    runner = CliRunner()
    ledger = study.ledger_url("north")
    args = ["site-release", str(study.spec), "--site", "north", "--ledger", ledger]

    missing = runner.invoke(app, args)
    assert missing.exit_code != 0
    assert "no privacy ledger at" in _text(missing) and "dpate ledger init north" in _text(missing)
    assert not (study.root / "ledgers").exists() and study.snapshot() == {}
    init = ["ledger", "init", "north", "--epsilon", "1", "--delta", "1e-4", "--ledger", ledger]
    assert runner.invoke(app, init).exit_code == 0

    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "report published" in _text(first)
    published = study.snapshot()

    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "already published (nothing spent: recorded release re-published)" in _text(second)
    assert study.snapshot() == published  # identical bytes, nothing new

    # the cap (epsilon 1) is spent: a new round is refused, nothing more is published
    third = runner.invoke(app, [*args, "--round", "2"])
    assert third.exit_code != 0
    assert study.snapshot() == published
    for out in (first.output, second.output, third.output):
        assert not leaked(out, study.outcomes["north"])
    # the option was this command's setting only: the process environment is as before
    import os

    assert "DPATE_LEDGER_URL" not in os.environ


def test_run_creates_ledgers_only_when_asked(tmp_path):
    """``dpate run`` refuses sites without a ledger (creating none); ``--init-ledgers`` creates
    them with the spec's caps; a second run spends nothing."""
    from dpate.ledger import PrivacyLedger

    study = write_study(tmp_path / "run", [Site("east", 300), Site("west", 300, cap="2")])
    runner = CliRunner()
    args = ["run", str(study.spec), "--ledger", f"sqlite:///{study.root}/ledgers/{{site}}.sqlite"]
    refused = runner.invoke(app, args)
    assert refused.exit_code != 0
    assert "dpate ledger init" in _text(refused)
    assert not (study.root / "ledgers").exists()

    first = runner.invoke(app, [*args, "--init-ledgers"])
    assert first.exit_code == 0, first.output
    with PrivacyLedger(study.ledger_url("west")) as led:
        assert led.spend("west").cap.epsilon == 2 and led.spend("west").spent.epsilon == 1
        n_events = len(led.events())
    published = study.snapshot()
    again = runner.invoke(app, [*args, "--init-ledgers"])
    assert again.exit_code == 0, again.output
    assert study.snapshot() == published
    with PrivacyLedger(study.ledger_url("west")) as led:
        assert len(led.events()) == n_events


def test_a_study_no_site_resolves_completes_with_no_answer(tmp_path, monkeypatch):
    """The adjusted estimator whose noisy counts come out all zero resolves nothing at any site:
    ``dpate run`` still completes (the sites spent their budget), publishes a result with
    ``status`` "no_answer" and null numbers, and says so; no 0 is ever shown as the estimate."""
    import json

    import numpy as np

    import dpate_core.release as core_release
    from dpate_core.release import noise_free

    study = write_study(tmp_path / "none", [Site("east", 300), Site("west", 300)])
    text = study.spec.read_text().replace('estimator = "smooth_matching"', 'estimator = "adjusted"')
    study.spec.write_text(text)

    def zero_counts(plan, rng=None):  # what a release of tiny budget can draw: no count at all
        return {k: np.zeros_like(v) for k, v in noise_free(plan).items()}

    monkeypatch.setattr(core_release, "draw_once", zero_counts)
    args = ["run", str(study.spec), "--ledger", f"sqlite:///{study.root}/ledgers/{{site}}.sqlite"]
    out = CliRunner().invoke(app, [*args, "--init-ledgers"])
    assert out.exit_code == 0, out.output
    said = _text(out)
    assert "No answer at this budget: no site resolved its estimate" in said
    assert "unresolved" in said and "estimate 0" not in said
    (result,) = [v for k, v in study.snapshot().items() if "/results/" in k]
    doc = json.loads(result)
    assert doc["status"] == "no_answer" and doc["complete"] is True
    assert (doc["estimate"], doc["variance"], doc["ci95"], doc["interval"]) == (None,) * 4
    assert {s["status"] for s in doc["sites"]} == {"excluded"}


def test_run_reads_each_sites_data_once(tmp_path, monkeypatch):
    """``dpate run`` on one machine: the pre-spend check's read of each site is the release's
    (one engine read per site, where the check, the flow's check and the release read three
    times), and the published reports are a normal release's."""
    from dpate.ledger import PrivacyLedger
    from tests.cli.test_run_preflight import count_reads

    opened = count_reads(monkeypatch)
    study = write_study(tmp_path / "once", [Site("east", 300), Site("west", 300)])
    args = ["run", str(study.spec), "--ledger", f"sqlite:///{study.root}/ledgers/{{site}}.sqlite"]
    out = CliRunner().invoke(app, [*args, "--init-ledgers"])
    assert out.exit_code == 0, out.output
    assert sorted(p.split("/")[-2] for p in opened) == ["east", "west"]
    for site in ("east", "west"):
        with PrivacyLedger(study.ledger_url(site)) as led:
            assert [e.kind for e in led.events(site)] == ["CAP", "RESERVE", "COMMIT"]
    assert any("/results/" in k for k in study.snapshot())
