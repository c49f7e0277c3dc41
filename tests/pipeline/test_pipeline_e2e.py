"""End to end on the embedded default (one Prefect test harness per session).

Covers: a full study, a re-run that spends nothing and publishes identical bytes, a cap refusal
that draws no noise and publishes nothing, a site whose data fails validation, crashes between
reserve and commit and between commit and publish, a scan of everything written outside the
sites (including for the failed site: its counts and row positions), a missing ledger and a
conflicting publication refused before reserving.

Each study's sites are configured the way a site's worker is: ``DPATE_LEDGER_URL`` and
``DPATE_SITE_LOG`` in the environment (``Study.site_env``), ledgers created explicitly
(``Study.init_ledgers``, as ``dpate ledger init``).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dpate.ledger import BudgetExceededError, PrivacyLedger
from dpate_core import release as core_release
from tests.pipeline.studies import Site, leaked, write_study

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_harness", "api_logs")]

#: where the invalid site's marker values are (a distinctive count and distinctive positions)
BAD_ROWS = (101, 223, 347, 419, 523, 617, 733, 761, 787, 797, 599, 661, 683)


class InjectedCrash(RuntimeError):
    """Stands for a process dying at this point (not transient: never retried)."""


def _no_draw(*_a, **_k):
    raise AssertionError("noise was drawn, but this run must not draw")


def _configure(study, mp, *, init: bool = True):
    for k, v in study.site_env().items():
        mp.setenv(k, v)
    if init:
        study.init_ledgers()
    return study


def _kinds(study, site):
    with PrivacyLedger(study.ledger_url(site)) as led:
        return Counter(e.kind for e in led.events(site)), led.spend(site).spent


def _paged(read, page=200):
    out, offset = [], 0
    while True:
        got = read(limit=page, offset=offset)
        out += got
        if len(got) < page:
            return out
        offset += page


@pytest.fixture(scope="module")
def full_study(tmp_path_factory):
    """A 3-site study (one site's data invalid) run once through the study flow."""
    from dpate.flows.study import study

    st = write_study(
        tmp_path_factory.mktemp("full"),
        [
            Site("alpha", 3000, epsilon="1"),
            Site("beta", 2000, epsilon="1/2"),
            Site("gamma", 1500, epsilon="2"),
            Site("delta", 800, bad_level="zqx-marker-8071", bad_rows=BAD_ROWS),
        ],
    )
    with pytest.MonkeyPatch.context() as mp:
        _configure(st, mp)
        out = study(spec=str(st.spec))
        yield st, out


@pytest.fixture
def site_env(monkeypatch):
    """Configure a study's sites (environment + ledgers) for one test."""
    return lambda study, init=True: _configure(study, monkeypatch, init=init)


def test_full_study_publishes_reports_and_result(full_study):
    st, out = full_study
    runs = {r["site_id"]: r for r in out["sites"]}
    assert [runs[s]["ok"] for s in ("alpha", "beta", "gamma", "delta")] == [True, True, True, False]
    result = out["result"]
    assert result["complete"] is False  # delta failed validation; the others were aggregated
    status = {s["site_id"]: s["status"] for s in result["sites"]}
    assert status["delta"] == "missing" and all(
        status[s] != "missing" for s in ("alpha", "beta", "gamma")
    )
    assert any(s["status"] == "used" for s in result["sites"])
    lo, hi = result["ci95"]
    # the estimate and the interval are clipped to [-B, B] (B = 1): with this study's secure noise
    # the estimate may sit on the bound together with the interval's end (it did once at 1.0),
    # or the whole interval may lie past the bound and collapse onto it (it did once: [1.0, 1.0];
    # dpate_core.inference then flags the interval uninformative)
    assert -1.0 <= lo <= result["estimate"] <= hi <= 1.0
    assert lo < hi or abs(lo) == 1.0
    files = st.snapshot()
    reports = [k for k in files if "/sites/" in k]
    assert len(reports) == 3
    results = [k for k in files if "/results/" in k]
    assert len(results) == 1 and ".partial-" in results[0]
    doc = json.loads(files[results[0]])
    assert doc["estimate"] == result["estimate"]
    for site in ("alpha", "beta", "gamma"):
        kinds, _ = _kinds(st, site)
        assert kinds == Counter({"CAP": 1, "RESERVE": 1, "COMMIT": 1})
        with PrivacyLedger(st.ledger_url(site)) as led:
            assert led.verify().ok
            committed = led.committed(runs[site]["release_id"])
        report = json.loads(files[f"test-study/sites/{site}/{runs[site]['release_id']}.json"])
        assert report["estimate"] == committed.payload["estimate"]  # published = committed


def test_result_carries_clipped_normal_and_bootstrap_intervals(full_study):
    """Result schema 3: the combined estimate and every reporting site carry the normal interval
    (``ci95``) and the parametric bootstrap (``interval``), both inside [-B, B] (B = 1 here), and
    every site's tau inside it too; the bootstrap flagged uninformative exactly when an information rule
    fired (mostly privacy noise when only the noise rule did), its note naming the rules."""
    from dpate.schemas.reports import interval_text
    from dpate_core.inference import INFORMATION_RULES, NOISE_DOMINATED, UNINFORMATIVE_RULES

    _, out = full_study
    result = out["result"]
    assert result["schema_version"] == 3 and result["status"] == "answered"
    docs = [result, *(s for s in result["sites"] if "tau" in s)]
    assert len(docs) == 4
    for doc in docs:
        iv = doc["interval"]
        assert iv["method"] == "bootstrap" and iv["level"] == 0.95
        assert -1.0 <= iv["lo"] <= iv["hi"] <= 1.0
        assert -1.0 <= doc["ci95"][0] <= doc["ci95"][1] <= 1.0
        # uninformative when an information rule fired; the noise rule alone flags the interval
        # as mostly privacy noise without calling it uninformative
        assert iv["uninformative"] == any(r in INFORMATION_RULES for r in iv["rules"])
        assert all(UNINFORMATIVE_RULES[r] in iv["note"] for r in iv["rules"])
        assert iv["note"].startswith("uninformative at this budget") == iv["uninformative"]
        assert iv["note"].startswith(NOISE_DOMINATED) == (
            bool(iv["rules"]) and not iv["uninformative"]
        )
        assert ("uninformative" in interval_text(doc)) == iv["uninformative"]
    for site in docs[1:]:
        assert -1.0 <= site["tau"] <= 1.0
    assert result["uninformative"] == result["interval"]["uninformative"]
    assert result["interval"]["lo"] <= result["estimate"] <= result["interval"]["hi"]


def test_invalid_site_data_fails_that_site_only_and_names_no_value(full_study):
    st, out = full_study
    delta = next(r for r in out["sites"] if r["site_id"] == "delta")
    assert "SiteDataRejected" in delta["error"] and "stratum" in delta["error"]
    assert "zqx-marker" not in delta["error"] and "row" not in delta["error"]
    assert str(len(BAD_ROWS)) not in delta["error"]
    assert _kinds(st, "delta")[0] == Counter({"CAP": 1})  # nothing reserved
    # the details stay at the site, in its operator log
    oplog = st.operator_log("delta").read_text()
    assert f"{len(BAD_ROWS)} row(s)" in oplog and "rows 101, 223, 347" in oplog


def test_rerun_spends_nothing_draws_nothing_and_publishes_identical_bytes(full_study, monkeypatch):
    from dpate.flows.study import study

    st, out = full_study
    before = st.snapshot()
    spent = {s: _kinds(st, s) for s in ("alpha", "beta", "gamma")}
    monkeypatch.setattr(core_release, "draw_once", _no_draw)
    again = study(spec=str(st.spec))
    assert st.snapshot() == before
    assert {s: _kinds(st, s) for s in spent} == spent
    # nothing written again: "unchanged" from the run's own summary, or "published" when Prefect
    # handed back the subflow's state without its data and the summary was read back from storage
    # (flows.study.state_output); never "written"
    statuses = [r["status"] for r in again["sites"] if r["ok"]]
    assert len(statuses) == 3 and set(statuses) <= {"unchanged", "published"}, statuses
    assert again["result"]["estimate"] == out["result"]["estimate"]


def test_nothing_outside_the_sites_holds_a_raw_value(full_study):
    """Reports, results, Prefect artifacts, logs, flow/task run states and parameters, and
    Prefect's result storage: no raw value, and for the site whose data failed its checks, no
    count, no row position, no marker value (its column and rule may appear)."""
    import numpy as np
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_HOME, PREFECT_LOCAL_STORAGE_PATH

    st, _ = full_study
    values = np.concatenate(list(st.outcomes.values()))
    texts = [b.decode() for b in st.snapshot().values()]
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        logs = [log.message for log in _paged(client.read_logs)]
        assert any("data validated against spec" in m for m in logs)  # the runs' logs were read
        texts += logs
        arts = _paged(client.read_artifacts)
        texts += [json.dumps(a.data) + str(a.description) for a in arts]
        for fr in _paged(client.read_flow_runs):
            texts.append(
                json.dumps(fr.parameters, default=str) + str(fr.state and fr.state.message)
            )
        for tr in _paged(client.read_task_runs):
            texts.append(str(tr.state and tr.state.message) + str(tr.name))
    assert len(texts) > 20 and any("site-report" in a.key for a in arts if a.key)
    for root in {PREFECT_LOCAL_STORAGE_PATH.value(), PREFECT_HOME.value() / "storage"}:
        if root.exists():
            for f in root.rglob("*"):
                if f.is_file():
                    texts.append(f.read_bytes().decode("utf-8", "replace"))
    blob = "\n".join(texts)
    assert leaked(blob, values) == []
    for marker in st.markers:
        assert marker not in blob
    assert "not one of the declared levels" in blob  # the rule reached Prefect: a failed run
    positions = ", ".join(map(str, sorted(BAD_ROWS)[:3]))
    for needle in ("row(s)", f"{len(BAD_ROWS)} row", positions, "rows 101", "of 800 rows"):
        assert needle not in blob, needle


def test_cap_refusal_draws_no_noise_and_publishes_nothing(tmp_path, monkeypatch, site_env):
    from dpate.flows.site_release import site_release

    st = site_env(write_study(tmp_path, [Site("solo", 1200, epsilon="1", cap="1")]))
    first = site_release(spec=str(st.spec), site="solo")
    assert first["status"] == "written"
    before = st.snapshot()
    monkeypatch.setattr(core_release, "draw_once", _no_draw)
    state = site_release(spec=str(st.spec), site="solo", round="2", return_state=True)
    assert state.is_failed()
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, BudgetExceededError) and "no noise was drawn" in str(exc)
    assert st.snapshot() == before
    kinds, spent = _kinds(st, "solo")
    assert kinds == Counter({"CAP": 1, "RESERVE": 1, "COMMIT": 1}) and spent.epsilon == 1


def test_crash_between_reserve_and_commit_then_rerun(tmp_path, site_env):
    """Noise drawn, process dies before COMMIT: the reservation stands; the re-run spends nothing
    more, draws once, commits once; only the committed value is ever published."""
    from dpate.flows.site_release import site_release

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]))
    draws = []
    real_draw = core_release.draw_once

    def counting_draw(plan, rng=None):
        draws.append(1)
        return real_draw(plan, rng)

    def crash(*_a, **_k):
        raise InjectedCrash("process died before the commit")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core_release, "draw_once", counting_draw)
        mp.setattr(PrivacyLedger, "commit", crash)
        state = site_release(spec=str(st.spec), site="solo", return_state=True)
    assert state.is_failed() and len(draws) == 1
    assert st.snapshot() == {}
    kinds, spent = _kinds(st, "solo")
    assert kinds == Counter({"CAP": 1, "RESERVE": 1}) and spent.epsilon == 1

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core_release, "draw_once", counting_draw)
        out = site_release(spec=str(st.spec), site="solo")
    assert out["status"] == "written" and len(draws) == 2
    kinds, spent = _kinds(st, "solo")
    assert kinds == Counter({"CAP": 1, "RESERVE": 1, "COMMIT": 1}) and spent.epsilon == 1
    with PrivacyLedger(st.ledger_url("solo")) as led:
        assert led.committed(out["release_id"]).payload["estimate"]["tau"] == out["tau"]


def test_crash_between_commit_and_publish_then_rerun(tmp_path, site_env):
    from dpate import storage as storage
    from dpate.flows.site_release import site_release

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]))

    def crash(*_a, **_k):
        raise InjectedCrash("process died before publishing")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storage, "write_once", crash)
        state = site_release(spec=str(st.spec), site="solo", return_state=True)
    assert state.is_failed() and st.snapshot() == {}
    kinds, _ = _kinds(st, "solo")
    assert kinds == Counter({"CAP": 1, "RESERVE": 1, "COMMIT": 1})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core_release, "draw_once", _no_draw)
        out = site_release(spec=str(st.spec), site="solo")
    published = st.snapshot()
    assert out["status"] == "written" and len(published) == 1
    with PrivacyLedger(st.ledger_url("solo")) as led:
        committed = led.committed(out["release_id"])
    assert json.loads(next(iter(published.values())))["estimate"] == committed.payload["estimate"]
    again = site_release(spec=str(st.spec), site="solo")
    assert again["status"] == "unchanged" and st.snapshot() == published
    assert _kinds(st, "solo")[0] == kinds


def test_required_sites_missing_fails_the_aggregate_and_publishes_nothing(tmp_path, site_env):
    from dpate.flows.aggregate import aggregate_study
    from dpate.flows.site_release import site_release
    from dpate.tasks.aggregate import StudyIncompleteError

    st = site_env(
        write_study(tmp_path, [Site("one", 1200), Site("two", 1000)], require_all_sites=True)
    )
    site_release(spec=str(st.spec), site="one")
    state = aggregate_study(spec=str(st.spec), return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, StudyIncompleteError) and "two: missing" in str(exc)
    assert not any("/results/" in k for k in st.snapshot())
    site_release(spec=str(st.spec), site="two")
    result = aggregate_study(spec=str(st.spec))
    assert result["complete"] and result["uri"].endswith("/results/1.json")


def test_html_report_from_the_published_result(full_study, tmp_path):
    import numpy as np
    from typer.testing import CliRunner

    from dpate.cli.main import app

    st, out = full_study
    html_path = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", str(st.spec), "-o", str(html_path)])
    assert res.exit_code == 0, res.output
    page = html_path.read_text()
    assert "data:image/png;base64," in page and "mvagg" in page
    for site in ("alpha", "beta", "gamma", "delta"):
        assert site in page
    assert f"{out['result']['estimate']:.4g}" in page
    assert "1 of 3" in page  # alpha's lifetime spend from its ledger: epsilon 1 of cap 3
    assert leaked(page, np.concatenate(list(st.outcomes.values()))) == []


def test_a_site_run_refuses_a_missing_ledger_and_creates_none(tmp_path, site_env):
    from dpate.flows.site_release import site_release
    from dpate.ledger import LedgerNotFoundError

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]), init=False)
    state = site_release(spec=str(st.spec), site="solo", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, LedgerNotFoundError) and "dpate ledger init solo" in str(exc)
    assert not (st.root / "ledgers").exists() and st.snapshot() == {}


def test_run_parameters_cannot_choose_the_ledger_data_or_storage(tmp_path, site_env):
    """The coordinator's run parameters are spec, site and round only."""
    from dpate.flows.site_release import site_release

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]))
    fresh = tmp_path / "fresh.sqlite"
    for extra in (
        {"ledger_url": f"sqlite:///{fresh}"},
        {"data_path": str(tmp_path / "x.parquet")},
        {"storage_url": str(tmp_path / "elsewhere")},
    ):
        with pytest.raises(TypeError):
            site_release(spec=str(st.spec), site="solo", **extra)
    state = site_release(spec=str(st.spec), site="solo", round="../1", return_state=True)
    assert state.is_failed()
    assert not fresh.exists() and st.snapshot() == {}
    assert _kinds(st, "solo")[0] == Counter({"CAP": 1})


def test_a_report_published_without_this_ledgers_commit_is_refused_before_reserving(
    tmp_path, site_env, monkeypatch
):
    """A copy of the ledger (or another ledger) cannot release the same release id again."""
    from dpate.flows.site_release import site_release
    from dpate.storage import PublicationConflictError

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]))
    site_release(spec=str(st.spec), site="solo")
    before = st.snapshot()
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("DPATE_LEDGER_URL", f"sqlite:///{other}/{{site}}.sqlite")
    from dpate_core.privacy import PrivacyParams

    PrivacyLedger.init(f"sqlite:///{other}/solo.sqlite", "solo", PrivacyParams.of("3", "1e-4"))
    monkeypatch.setattr(core_release, "draw_once", _no_draw)
    state = site_release(spec=str(st.spec), site="solo", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, PublicationConflictError) and "Nothing was reserved" in str(exc)
    with PrivacyLedger(f"sqlite:///{other}/solo.sqlite") as led:
        assert [e.kind for e in led.events()] == ["CAP"]
    assert st.snapshot() == before


def test_a_deployed_run_refuses_without_the_sites_own_ledger_setting(
    tmp_path, site_env, monkeypatch
):
    """In a worker's flow-run process nothing falls back to a default ledger (which would live
    in Prefect's working folder or a fresh home), to the spec's data or to its 'reports'."""
    import os

    from dpate.flows.site_release import site_release
    from dpate.settings import SettingsError, dpate_home
    from dpate.site.approvals import approve_spec

    st = site_env(write_study(tmp_path, [Site("solo", 1200)]))
    monkeypatch.setenv("DPATE_SPECS", str(tmp_path / "approved"))
    spec = approve_spec(str(st.spec), site="solo").spec_hash  # a deployed run names it by hash
    monkeypatch.setattr("dpate.tasks.site.is_deployed_process", lambda: True)
    state = site_release(spec=spec, site="solo", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, SettingsError) and "DPATE_DATA_PATH" in str(exc)
    monkeypatch.setenv("DPATE_DATA_PATH", str(st.root / "sites" / "{site}" / "records.parquet"))
    monkeypatch.setenv("DPATE_STORAGE_URL", str(st.published))
    monkeypatch.delenv("DPATE_LEDGER_URL")
    state = site_release(spec=spec, site="solo", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, SettingsError) and "DPATE_LEDGER_URL" in str(exc)
    assert not (dpate_home() / "ledgers").exists() and st.snapshot() == {}
    monkeypatch.setenv("DPATE_LEDGER_URL", st.ledger_url("solo"))
    out = site_release(spec=spec, site="solo")
    assert out["status"] == "written" and "DPATE_ALLOW_SPEC_DATA" not in os.environ
    # the spec named by its path instead: refused before anything is read, naming no path
    state = site_release(spec=str(st.spec), site="solo", return_state=True)
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, SettingsError) and "names its study spec by hash" in str(exc)
    assert str(tmp_path) not in str(exc)
