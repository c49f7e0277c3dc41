"""A site's privacy ledger under concurrent reservations, on PostgreSQL and on a SQLite file.

Twenty releases (each epsilon 1/2) race for a site whose lifetime cap is epsilon 5: exactly ten
may be reserved, the others are refused with BudgetExceededError, the recorded spend never passes
the cap, and the hash chain stays intact. Run with threads (one PrivacyLedger shared, as a worker
running several flow runs would) and with processes (one PrivacyLedger each, as several workers
or CLI invocations on one ledger would; they also race to create the table).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest

from dpate_core.privacy import PrivacyParams

pytestmark = [pytest.mark.services, pytest.mark.postgres]

ledger_mod = pytest.importorskip("dpate.ledger")

N_RELEASES = 20
RELEASE = PrivacyParams(Fraction(1, 2), Fraction(1, 10**6))
CAP = PrivacyParams(Fraction(5), Fraction(1, 10**4))
FIT = 10  # CAP.epsilon / RELEASE.epsilon
SITE = "site-a"


def _reserve(ledger, i: int) -> str:
    try:
        r = ledger.reserve(
            release_id=ledger_mod.release_id("race", SITE, "spec-hash", str(i)),
            study_id=f"race-{i % 3}",
            site_id=SITE,
            spec_hash="spec-hash",
            round=str(i),
            privacy=RELEASE,
            cap=CAP,
        )
    except ledger_mod.BudgetExceededError:
        return "refused"
    return "reserved" if r.new else "existing"


def _reserve_in_process(url: str, i: int, barrier, out) -> None:
    ledger = ledger_mod.PrivacyLedger(url)
    try:
        barrier.wait(60)
        out.put((i, _reserve(ledger, i)))
    except Exception as exc:  # reported to the parent, never swallowed
        out.put((i, f"error: {type(exc).__name__}: {exc}"))
    finally:
        ledger.close()


def _check(url: str, outcomes: list[str]) -> None:
    assert sorted(set(outcomes)) <= ["refused", "reserved"], outcomes
    assert outcomes.count("reserved") == FIT, outcomes
    assert outcomes.count("refused") == N_RELEASES - FIT
    with ledger_mod.PrivacyLedger(url) as ledger:
        spend = ledger.spend(SITE)
        assert spend.cap == CAP
        assert spend.spent == PrivacyParams(FIT * RELEASE.epsilon, FIT * RELEASE.delta)
        assert spend.spent <= CAP
        assert sum(r for r, _ in spend.releases.values()) == FIT
        report = ledger.verify()
        assert report.ok, report.problems
        # one more release is refused now that the cap is reached
        assert _reserve(ledger, N_RELEASES) == "refused"


def _race_threads(url: str) -> list[str]:
    with ledger_mod.PrivacyLedger(url) as ledger:
        barrier = threading.Barrier(N_RELEASES)

        def one(i: int) -> str:
            barrier.wait(60)
            return _reserve(ledger, i)

        with ThreadPoolExecutor(N_RELEASES) as pool:
            return list(pool.map(one, range(N_RELEASES)))


def _race_processes(url: str) -> list[str]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(N_RELEASES), ctx.Queue()
    procs = [
        ctx.Process(target=_reserve_in_process, args=(url, i, barrier, out))
        for i in range(N_RELEASES)
    ]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=180) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return [results[i] for i in range(N_RELEASES)]


@pytest.fixture(params=["postgresql", "sqlite"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'site-a-ledger.sqlite'}"
    else:
        url = request.getfixturevalue("pg_database")
    ledger_mod.PrivacyLedger.init(url, SITE, CAP).close()  # as `dpate ledger init`
    yield url


def test_concurrent_reservations_in_threads_never_pass_the_cap(ledger_url):
    _check(ledger_url, _race_threads(ledger_url))


def test_concurrent_reservations_in_processes_never_pass_the_cap(ledger_url):
    _check(ledger_url, _race_processes(ledger_url))


def test_concurrent_retries_of_one_release_spend_once(ledger_url):
    """Twenty workers retrying the same release (same id): one RESERVE, nineteen see it."""
    with ledger_mod.PrivacyLedger(ledger_url) as ledger:
        barrier = threading.Barrier(N_RELEASES)
        rid = ledger_mod.release_id("race", SITE, "spec-hash", "same")

        def one(_: int):
            barrier.wait(60)
            return ledger.reserve(
                release_id=rid,
                study_id="race",
                site_id=SITE,
                spec_hash="spec-hash",
                round="same",
                privacy=RELEASE,
                cap=CAP,
            ).new

        with ThreadPoolExecutor(N_RELEASES) as pool:
            new = list(pool.map(one, range(N_RELEASES)))
        assert new.count(True) == 1
        assert ledger.spend(SITE).spent == RELEASE
        assert ledger.verify().ok
