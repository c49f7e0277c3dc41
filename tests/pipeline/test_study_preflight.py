"""The ``study`` flow checks every site before any site reserves: one site's bad data, and the
study (which requires every site) spends nothing anywhere; the refusal reaching Prefect names the
column and the rule, never a count or a row position."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_run_preflight import BAD_DATA, GOOD, write_spec


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_study_flow_refuses_before_any_reservation(tmp_path, home, prefect_harness):
    from dpate.flows.study import study
    from dpate.ledger import PrivacyLedger
    from dpate.study_check import StudyNotReadyError
    from dpate_core.privacy import PrivacyParams

    spec = write_spec(tmp_path, {"a": GOOD, "b": BAD_DATA["string-outcome"]})
    for site in ("a", "b"):
        url = f"sqlite:///{home / 'ledgers' / f'{site}.sqlite'}"
        PrivacyLedger.init(url, site, PrivacyParams.of("3", "1e-4"), reason="test").close()
    state = study(spec=str(spec), return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, StudyNotReadyError), exc
    assert "nothing was reserved or spent at any site" in str(exc)
    [b] = exc.sites
    assert b["site_id"] == "b" and b["error"].startswith("SiteDataRejected: ")
    assert "column 'y'" in b["error"] and "row" not in b["error"].replace("rows", "")
    for site in ("a", "b"):
        with PrivacyLedger(f"sqlite:///{home / 'ledgers' / f'{site}.sqlite'}") as led:
            assert [e.kind for e in led.events(site)] == ["CAP"]
    assert not (tmp_path / "published").exists()
