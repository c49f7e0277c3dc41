"""Settings shared by the whole suite. Each test folder adds its own fixtures."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.golden import Golden

REPO = Path(__file__).resolve().parents[1]

# The paper's data sets are read in place (never copied into the repository).
os.environ.setdefault("DPATE_DATA_DIR", str((REPO.parent / "shared" / "data").resolve()))

# Prefect: offline, quiet, and never the developer's own ~/.prefect database.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="dpate-prefect-home-"))
# In-process studies release their sites one at a time: their servers are SQLite-backed, where
# parallel site subflows contend for the database ("database is locked", then the client's
# backoff: the same study took 9 s in parallel and 5.5 s one at a time, docs/reference/
# benchmarks.md) and, with three test workers on two cores, for the CPU. Sites in parallel are
# tested where they run in production, on their own workers (tests/topology), and the setting
# itself in tests/pipeline/test_study_preflight.py.
os.environ.setdefault("DPATE_PARALLEL_SITES", "1")
# Flows run by the tests send no logs to their Prefect server unless a test reads them there
# (``api_logs``): on the session's SQLite-backed server the logs' bulk inserts contend with the
# runs' state updates, and Prefect's `PRAGMA busy_timeout = 60000` turned a lock into a minute
# of idle waiting in one or two tests of every CI run (py-spy, docs/reference/benchmarks.md;
# seven runs of one CLI test file with API logs: two took 104 s against 39-42 s; eight without:
# 36-40 s each). The operator's own site log is written either way.
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")

# Hypothesis: "ci" (.ci/run sets HYPOTHESIS_PROFILE=ci) derandomised, so that a CI run is
# reproducible and a failure is the code's, not the draw's; "dev" (the default) draws new examples
# each run, to explore. Neither has a deadline: the machine's load is not the code's speed.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("dev", **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@dataclass(frozen=True)
class PrefectTestServer:
    """The session's Prefect API server (:func:`prefect_test_server`)."""

    api_url: str

    @property
    def env(self) -> dict[str, str]:
        """What a subprocess (``dpate run``, a flow) needs to use this server instead of starting
        an embedded one of its own: add it to the subprocess's environment."""
        return {"PREFECT_API_URL": self.api_url}

    @contextmanager
    def settings(self) -> Iterator[None]:
        """Prefect's client settings of this process pointed at this server."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: self.api_url}):
            yield


@pytest.fixture(scope="session")
def prefect_test_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectTestServer]:
    """One Prefect API server for the whole session (one per xdist worker), on a SQLite database
    of its own: every test that runs flows uses it, in-process through ``prefect_harness`` and in
    a subprocess through ``prefect_test_server.env``. Each embedded server costs 10-30 s to start
    and migrate its database; one per command or per test file was most of the CLI tests' time.

    Registered as Prefect's default embedded server of this process (as
    ``prefect.testing.utilities.prefect_test_harness`` does), so that in-process code that would
    start one finds this server instead. The settings of this process are left unchanged: a
    test that needs them uses ``prefect_harness``.

    Its services are the CLI's embedded server's (:func:`dpate.cli.environment.prefect_env`,
    ``EMBEDDED_SERVICES_OFF``): no event persister, automations or vacuum, fewer writers to its
    SQLite database (under load a ``dpate run`` on it took 4x its time in the client's retries of
    "database is locked"), and no scheduler, late runs, foreman or pause expiry, whose loops cost
    the CPU the tests need for the whole session."""
    import prefect.settings
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    from dpate.cli.environment import EMBEDDED_SERVICES_OFF

    db = tmp_path_factory.mktemp("prefect-test-server") / "prefect.db"
    server = SubprocessASGIServer()
    # the server process takes its database URL and services from the settings it is started with
    off = {
        getattr(prefect.settings, f"PREFECT_SERVER_SERVICES_{name}_ENABLED"): False
        for name in EMBEDDED_SERVICES_OFF
    }
    with temporary_settings(
        updates={PREFECT_SERVER_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{db}", **off}
    ):
        server.start(timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
    try:
        yield PrefectTestServer(server.api_url)
    finally:
        # send the logs and events still queued while the server answers (as Prefect's own
        # test harness does): after it stops, the process's exit would retry them against a
        # closed port for over a minute ("Error logging to API")
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)
        EventsWorker.drain_all(timeout=10)
        server.stop()


@pytest.fixture(scope="module")
def prefect_harness(prefect_test_server: PrefectTestServer) -> Iterator[None]:
    """Flows run in this process talk to the session's Prefect server, for one test module (its
    module-scoped fixtures included): ``pytestmark = pytest.mark.usefixtures("prefect_harness")``."""
    with prefect_test_server.settings():
        yield


@pytest.fixture(scope="module")
def api_logs() -> Iterator[None]:
    """Flows run in this process send their logs to the Prefect server, for one test module (the
    suite's default is off, above): for the tests that read what a site's run leaves in Prefect's
    logs. Request it before any module-scoped fixture that runs flows."""
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    with temporary_settings(updates={PREFECT_LOGGING_TO_API_ENABLED: True}):
        yield


@pytest.fixture(autouse=True)
def _environment_restored():
    """Every test leaves ``os.environ`` as it found it. The command line sets Prefect's quiet,
    embedded-server defaults in its own environment (``dpate.cli.environment.prefect_env``:
    console logs to a file, no triggers service); run in-process by a CLI test, those would
    otherwise reach every server and worker a later test starts (a Prefect server without
    automations, a flow whose retries log nowhere)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


#: Each test file's measured seconds (setup, call and teardown of its tests, one process), to
#: order the files for the two xdist workers. Regenerate: ``python -m pytest -p no:xdist
#: --record-durations`` (on a quiet machine; any subset of the suite updates its own files).
DURATIONS = REPO / "tests" / "durations.json"
#: Seconds per test by mark for a file not in DURATIONS yet: a test that starts real servers
#: waits tens of seconds, one on Prefect's test server seconds.
_COST_BY_MARK = {"services": 30.0, "prefect": 10.0, "slow": 5.0}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's measured seconds to {DURATIONS.relative_to(REPO)}",
    )
    parser.addoption(
        "--regenerate",
        action="store_true",
        help="rewrite the pinned outputs and golden files the selected tests compare with "
        "(tests/golden.py; after an intended change only)",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """The golden files of the requesting test's file (tests/golden.py), rewritten first when
    pytest runs with ``--regenerate``."""
    return Golden(Path(request.node.path), bool(request.config.getoption("regenerate")))


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _estimate(item: pytest.Item) -> float:
    marks = [cost for mark, cost in _COST_BY_MARK.items() if item.get_closest_marker(mark)]
    return max(marks, default=0.1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files in decreasing order of their cost (DURATIONS, else estimated from their tests'
    marks), the tests of a file kept together and in order. Under ``-n 3 --dist loadfile``
    (.ci/run) each worker takes the next file when it runs out, so the slow server-backed files
    start at once, one per worker, and the quick ones fill in after (longest first): none is
    left to run alone at the end."""
    measured = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    cost: dict[str, float] = {}
    for item in items:
        name = _file(item.nodeid)
        cost[name] = measured[name] if name in measured else cost.get(name, 0) + _estimate(item)
    items.sort(key=lambda item: -cost[_file(item.nodeid)])  # stable: each file's order kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` in the order ``pytest_collection_modifyitems`` leaves the files: by
    default xdist queues them by their number of tests, which put the slow server-backed files
    (a few tests each) last."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _recorded[_file(report.nodeid)] = _recorded.get(_file(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("record_durations") or hasattr(config, "workerinput"):
        return
    durations = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    durations.update({name: round(sec, 1) for name, sec in _recorded.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(durations.items())), indent=1) + "\n")
