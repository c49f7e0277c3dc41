"""Unit tests of the task logic: the functions behind the Prefect tasks, called through ``.fn``
(no Prefect server, no flow run). Contexts come from ``dpate.settings`` on specs written to a
temporary folder (``tests/pipeline/studies.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.studies import Site, Study, write_study

SITES = [Site("north", 400), Site("south", 300), Site("east", 60)]


@pytest.fixture(autouse=True)
def site_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No site configuration from the environment running the tests; a temporary DPATE_HOME;
    no run logger (``.fn`` runs outside a flow)."""
    from prefect.logging import disable_run_logger

    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "dpate-home"))
    for name in (
        "DPATE_LEDGER_URL",
        "DPATE_DATA_PATH",
        "DPATE_STORAGE_URL",
        "DPATE_SITE_LOG",
        "DPATE_SITE_CONFIG",
        "DPATE_ALLOW_SPEC_DATA",
        "DPATE_SITES",
        "DPATE_SITE_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    with disable_run_logger():
        yield


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Study:
    """Three sites of a SmoothDPMatching / MVAgg study; the sites read the spec's data paths."""
    s = write_study(tmp_path / "study", SITES)
    for k, v in s.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_ALLOW_SPEC_DATA", "1")
    return s
