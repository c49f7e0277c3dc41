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


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
def test_sites_at_once_is_read_when_a_study_run_starts(monkeypatch):
    """``DPATE_PARALLEL_SITES`` set after the flows are imported still sizes the next study run's
    thread pool (the study flow's runner is duplicated per run and reads it then); a value that
    is not a whole number of sites is refused by name."""
    import threading
    import time

    from prefect import flow, task

    from dpate.flows.study import _SiteThreads, study

    active, peak, lock = [0], [0], threading.Lock()

    @task
    def probe(i: int) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return i

    @flow(task_runner=study.task_runner)  # the study flow's own runner
    def three_sites() -> list[int]:
        return [f.result() for f in probe.map(range(3))]

    assert isinstance(study.task_runner, _SiteThreads)
    monkeypatch.setenv("DPATE_PARALLEL_SITES", "1")
    assert three_sites() == [0, 1, 2] and peak[0] == 1
    monkeypatch.setenv("DPATE_PARALLEL_SITES", "two")
    with pytest.raises(ValueError, match=r"DPATE_PARALLEL_SITES \('two'\) must be a whole number"):
        study.task_runner.duplicate()
