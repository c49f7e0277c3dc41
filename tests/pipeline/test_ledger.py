"""The privacy ledger on SQLite and PostgreSQL: reserve/commit, the cap, the chain, concurrency."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest

from dpate.ledger import (
    BudgetExceededError,
    CapMismatchError,
    LedgerError,
    release_id,
)
from dpate_core.privacy import PrivacyParams

CAP = PrivacyParams.of("1", "1e-5")


def _reserve(led, rid, eps="1/3", delta="1e-6", cap=CAP, site="s1", study="st"):
    return led.reserve(
        release_id=rid,
        study_id=study,
        site_id=site,
        spec_hash="h",
        round="1",
        privacy=PrivacyParams.of(eps, delta),
        cap=cap,
    )


def test_release_id_is_deterministic_and_separates_its_inputs():
    a = release_id("study", "site", "hash", "1")
    assert a == release_id("study", "site", "hash", "1") and len(a) == 64
    others = {
        release_id("study", "site", "hash", "2"),
        release_id("study", "site2", "hash", "1"),
        release_id("study", "site", "hash2", "1"),
        release_id("studysite", "", "hash", "1"),
    }
    assert a not in others and len(others) == 4


def test_reserve_commit_and_rerun_spends_nothing(ledger_factory):
    led = ledger_factory()
    r = _reserve(led, "r1")
    assert r.new and r.committed is None and r.spent_after == PrivacyParams.of("1/3", "1e-6")
    again = _reserve(led, "r1")  # crash before commit: the reservation stands, nothing more spent
    assert not again.new and again.committed is None
    assert led.spend("s1").spent == PrivacyParams.of("1/3", "1e-6")
    out = led.commit("r1", {"tau": 0.123456789012345, "n": 10})
    assert out.payload == {"tau": 0.123456789012345, "n": 10}
    third = _reserve(led, "r1")
    assert not third.new and third.committed == out
    # a second commit (racing process, re-run) returns the first recorded value
    assert led.commit("r1", {"tau": 9.9, "n": 10}) == out
    assert led.committed("r1") == out
    assert [e.kind for e in led.events()] == ["CAP", "RESERVE", "COMMIT"]
    assert led.verify().ok


def test_cap_is_exact_and_refusal_writes_nothing(ledger_factory):
    led = ledger_factory()
    for k in range(3):
        _reserve(led, f"r{k}", eps="1/3", delta="0")  # 1/3 + 1/3 + 1/3 == 1 exactly
    n_events = len(led.events())
    with pytest.raises(BudgetExceededError, match="remains") as err:
        _reserve(led, "r3", eps="1/1000000", delta="0")
    assert "no noise was drawn" in str(err.value)
    assert len(led.events()) == n_events
    spend = led.spend("s1")
    assert spend.spent.epsilon == 1 and spend.remaining == PrivacyParams(Fraction(0), CAP.delta)
    # delta is capped too
    led2 = ledger_factory()
    with pytest.raises(BudgetExceededError):
        _reserve(led2, "d1", site="s2", eps="1/10", delta="2e-5")


def test_spec_cannot_change_recorded_cap_but_set_cap_can(ledger_factory):
    led = ledger_factory()
    _reserve(led, "r1", eps="1", delta="0")
    with pytest.raises(CapMismatchError, match="set-cap"):
        _reserve(led, "r2", eps="1", delta="0", cap=PrivacyParams.of("2", "1e-5"))
    with pytest.raises(LedgerError, match="reason"):
        led.set_cap("s1", PrivacyParams.of("2", "1e-5"), reason=" ")
    led.set_cap("s1", PrivacyParams.of("2", "1e-5"), reason="board approval 2026-11")
    r = _reserve(led, "r2", eps="1", delta="0", cap=PrivacyParams.of("2", "1e-5"))
    assert r.new and led.spend("s1").remaining.epsilon == 0
    assert led.verify().ok


def test_commit_needs_a_reservation_and_mismatched_reservations_are_refused(ledger_factory):
    led = ledger_factory()
    with pytest.raises(LedgerError, match="no reservation"):
        led.commit("nothing", {"tau": 1.0})
    _reserve(led, "r1")
    with pytest.raises(LedgerError, match="already reserved"):
        _reserve(led, "r1", eps="1/2")
    with pytest.raises(LedgerError, match="positive epsilon"):
        _reserve(led, "r0", eps="0")


def test_a_round_is_released_once_even_under_a_replaced_spec(ledger_factory):
    """The spec replaced on the server after its round ran (another hash, so another release
    id): the same round is refused, nothing is reserved; a new round is not."""
    led = ledger_factory()
    _reserve(led, "r1")
    swapped = dict(study_id="st", site_id="s1", round="1", privacy=PrivacyParams.of("1/3"), cap=CAP)
    with pytest.raises(LedgerError, match="round 1 was already released under spec"):
        led.reserve(release_id="r1-swapped", spec_hash="h2", **swapped)
    assert led.spend("s1").spent == PrivacyParams.of("1/3", "1e-6")
    led.reserve(release_id="r2", spec_hash="h2", **{**swapped, "round": "2"})
    assert led.verify().ok


def test_spend_per_study(ledger_factory):
    led = ledger_factory()
    _reserve(led, "a1", study="A", eps="1/4")
    _reserve(led, "a2", study="A", eps="1/4")
    _reserve(led, "b1", study="B", eps="1/8")
    led.commit("a1", {"tau": 1.0})
    s = led.spend("s1")
    assert s.per_study["A"].epsilon == Fraction(1, 2) and s.per_study["B"].epsilon == Fraction(1, 8)
    assert s.releases == {"A": (2, 1), "B": (1, 0)}
    assert s.remaining.epsilon == Fraction(3, 8)


def _tamper(led, sql: str) -> None:
    with led._engine.begin() as conn:
        conn.exec_driver_sql(sql.format(t=led.table_name))


@pytest.mark.parametrize(
    ("sql", "needle"),
    [
        ("UPDATE {t} SET epsilon = '1/100' WHERE seq = 2", "edited row"),
        ("UPDATE {t} SET payload = '{{\"tau\":0.5}}' WHERE kind = 'COMMIT'", "edited row"),
        ("DELETE FROM {t} WHERE seq = 3", "missing"),
        # reorder: swap two rows' positions (their contents keep their hashes)
        (
            "UPDATE {t} SET seq = CASE seq WHEN 2 THEN 1002 WHEN 3 THEN 1003 ELSE seq END;"
            "UPDATE {t} SET seq = CASE seq WHEN 1002 THEN 3 WHEN 1003 THEN 2 ELSE seq END",
            "prev_hash",
        ),
    ],
    ids=["edit-epsilon", "edit-estimate", "delete", "reorder"],
)
def test_verify_detects_tampering(ledger_factory, sql, needle):
    led = ledger_factory()
    _reserve(led, "r1")
    led.commit("r1", {"tau": 0.25})
    _reserve(led, "r2")
    assert led.verify().ok
    for stmt in sql.split(";"):
        _tamper(led, stmt)
    report = led.verify()
    assert not report.ok
    assert any(needle in p for p in report.problems), report.problems


def test_deleting_the_last_row_needs_the_head_hash(ledger_factory):
    led = ledger_factory()
    _reserve(led, "r1")
    head = led.verify().head_hash
    _reserve(led, "r2")
    _tamper(led, "DELETE FROM {t} WHERE seq = 3")
    assert led.verify(expect_head=head).ok  # the chain up to the noted head is intact
    led.commit("r1", {"tau": 1.0})
    later = led.verify().head_hash
    _tamper(led, "DELETE FROM {t} WHERE kind = 'COMMIT'")
    assert not led.verify(expect_head=later).ok


def test_concurrent_reservations_never_pass_the_cap(ledger_factory):
    """20 threads, each with its own ledger object (own connections), reserve 1/10 against cap 1."""
    first = ledger_factory()
    first.set_cap("s1", CAP, reason="test")
    ledgers = [ledger_factory() for _ in range(20)]
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        try:
            _reserve(ledgers[i], f"c{i}", eps="1/10", delta="0")
            res = "ok"
        except BudgetExceededError:
            res = "refused"
        with lock:
            outcomes.append(res)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] * 10 + ["refused"] * 10
    assert first.spend("s1").spent.epsilon == 1
    report = first.verify()
    assert report.ok and report.rows == 11


def test_racing_commits_record_one_value_and_both_get_it(ledger_factory):
    first = ledger_factory()
    _reserve(first, "race")
    ledgers = [ledger_factory() for _ in range(6)]
    barrier = threading.Barrier(6)
    got = [None] * 6

    def worker(i: int) -> None:
        barrier.wait()
        got[i] = ledgers[i].commit("race", {"tau": float(i)}).payload

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(g == got[0] for g in got)
    assert [e.kind for e in first.events()].count("COMMIT") == 1
    assert first.verify().ok


def test_a_ledger_is_never_created_by_opening_it(tmp_path):
    from dpate.ledger import LedgerNotFoundError, PrivacyLedger, ledger_exists

    path = tmp_path / "sub" / "l.sqlite"
    url = f"sqlite:///{path}"
    with pytest.raises(LedgerNotFoundError, match="dpate ledger init site-a") as err:
        PrivacyLedger(url, site="site-a")
    assert str(path) in str(err.value)
    assert not path.exists() and not path.parent.exists() and not ledger_exists(url)
    # a SQLite file without the ledger table is not a ledger either (and is left as it was)
    other = tmp_path / "other.sqlite"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.close()
    with pytest.raises(LedgerNotFoundError):
        PrivacyLedger(f"sqlite:///{other}")
    # init creates it and pins the cap; again with the same cap: unchanged; another cap: refused
    PrivacyLedger.init(url, "site-a", CAP).close()
    PrivacyLedger.init(url, "site-a", CAP).close()
    with pytest.raises(CapMismatchError, match="set-cap"):
        PrivacyLedger.init(url, "site-a", PrivacyParams.of("2", "1e-5"))
    with PrivacyLedger(url) as led:
        assert [e.kind for e in led.events()] == ["CAP"] and led.cap("site-a") == CAP
    assert ledger_exists(url)


def test_postgres_ledger_is_not_created_by_opening_it(pg_url):
    import uuid

    from dpate.ledger import LedgerNotFoundError, PrivacyLedger

    prefix = f"t{uuid.uuid4().hex[:10]}_"
    with pytest.raises(LedgerNotFoundError):
        PrivacyLedger(pg_url, table_prefix=prefix)
    led = PrivacyLedger.init(pg_url, "s1", CAP, table_prefix=prefix)
    try:
        with PrivacyLedger(pg_url, table_prefix=prefix) as again:
            assert again.cap("s1") == CAP
    finally:
        led.table.drop(led._engine, checkfirst=True)
        led.close()


def test_cli_ledger_init_show_verify_set_cap(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from dpate.cli.main import app
    from dpate.ledger import PrivacyLedger

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    runner = CliRunner()
    # show and verify refuse a ledger that does not exist, naming it and the command to create it
    for cmd in (["show", "s1"], ["verify"]):
        out = runner.invoke(app, ["ledger", *cmd, "--ledger", url])
        assert out.exit_code != 0
        text = " ".join(out.output.split())
        assert "no privacy ledger at" in text and "dpate ledger init" in text
        assert not (tmp_path / "l.sqlite").exists()
    out = runner.invoke(
        app, ["ledger", "init", "s1", "--epsilon", "1", "--delta", "1e-5", "--ledger", url]
    )
    assert out.exit_code == 0, out.output
    with PrivacyLedger(url) as led:
        _reserve(led, "r1", eps="1/3", study="study-x")
        led.commit("r1", {"tau": 0.5})
    out = runner.invoke(app, ["ledger", "show", "s1", "--ledger", url])
    assert out.exit_code == 0, out.output
    assert "study-x" in out.output and "2/3" in out.output  # remaining epsilon, exact
    out = runner.invoke(app, ["ledger", "show", "s1", "--ledger", url, "--json"])
    doc = json.loads(out.output)
    assert doc["remaining"]["epsilon"] == "2/3" and doc["studies"]["study-x"]["committed"] == 1
    out = runner.invoke(app, ["ledger", "verify", "--ledger", url])
    assert out.exit_code == 0 and "ledger OK: 3 rows" in out.output
    with PrivacyLedger(url) as led:
        head = led.verify().head_hash
    assert f"head {head}" in out.output  # whole, on one line
    out = runner.invoke(app, ["ledger", "verify", "--ledger", url, "--json"])
    assert json.loads(out.output) == {
        "ledger": url,
        "ok": True,
        "rows": 3,
        "head_hash": head,
        "problems": [],
    }
    # the site's default ledger: $DPATE_HOME/ledgers/<site>.sqlite, or its DPATE_LEDGER_URL
    monkeypatch.setenv("DPATE_LEDGER_URL", url)
    out = runner.invoke(app, ["ledger", "verify", "s1", "--json"])
    assert json.loads(out.output)["head_hash"] == head
    monkeypatch.delenv("DPATE_LEDGER_URL")
    out = runner.invoke(
        app,
        [
            "ledger",
            "set-cap",
            "s1",
            "--epsilon",
            "5",
            "--delta",
            "1e-4",
            "--reason",
            "board",
            "--ledger",
            url,
        ],
    )
    assert out.exit_code == 0, out.output
    with PrivacyLedger(url) as led:
        assert led.cap("s1") == PrivacyParams.of("5", "1e-4")
        with led._engine.begin() as conn:
            conn.exec_driver_sql(
                f"UPDATE {led.table_name} SET epsilon = '1/1000' WHERE kind = 'RESERVE'"
            )
    out = runner.invoke(app, ["ledger", "verify", "--ledger", url])
    assert out.exit_code == 5 and "edited row" in out.output
