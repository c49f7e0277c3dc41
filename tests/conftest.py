"""Settings shared by the whole suite. Each test folder adds its own fixtures."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# The paper's data sets are read in place (never copied into the repository).
os.environ.setdefault("DPATE_DATA_DIR", str((REPO.parent / "shared" / "data").resolve()))

# Prefect: offline, quiet, and never the developer's own ~/.prefect database.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="dpate-prefect-home-"))

# Hypothesis: "ci" (.ci/run sets HYPOTHESIS_PROFILE=ci) derandomised, so that a CI run is
# reproducible and a failure is the code's, not the draw's; "dev" (the default) draws new examples
# each run, to explore. Neither has a deadline: the machine's load is not the code's speed.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("dev", **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The server-backed topology files first (a stable sort: the order is otherwise kept).
    Under ``-n 2 --dist loadfile`` (.ci/run) the two workers then share the slow files from the start and
    the quick ones fill in after; collected last, they piled up on one worker at the end while
    the other sat idle (about 4 of the suite's 11 minutes, docs/benchmarks.md)."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/topology/") else 1)
