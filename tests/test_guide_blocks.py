"""The blocks of docs/how-to/deploying.md that the STAR topology tests run (tests/topology/guide.py):
each marker names a fenced block, and on a test machine every block keeps no folder, host, port
or placeholder of the guide's own. No server is started here; the blocks run in
tests/topology/test_star_study.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.topology.guide import Machine, env_file, env_file_text, guide_blocks

#: The blocks tests/topology/star.py runs, in the guide's order, and the site-scheduled release
#: (tests/topology/test_packaging.py).
RUN = (
    "coordinator-files",
    "coordinator-storage",
    "coordinator-spec",
    "coordinator-prefect",
    "client-env",
    "coordinator-deploy",
    "coordinator-worker",
    "coordinator-report",
    "site-ledger",
    "site-key",
    "site-config",
    "site-worker",
    "site-approve",
    "site-release",
)


def test_every_block_the_topology_runs_is_marked_in_the_guide():
    assert set(guide_blocks()) == set(RUN)


def _machine(root: Path, site: str) -> Machine:
    return Machine(
        root=root,
        prefect_api="http://127.0.0.1:41234/api",
        s3_endpoint="http://127.0.0.2:41235",
        site=site,
        fill={
            "setup accessKey": "AK",
            "setup secretKey": "SK",
            "aggregator accessKey": "GAK",
            "aggregator secretKey": "GSK",
            "a long random secret": "s3cret",
            "the same secret": "s3cret",
            "the Prefect secret": "s3cret",
            f"{site} accessKey": "SAK",
            f"{site} secretKey": "SSK",
            "hash": "ab" * 32,
            "round": "r1",
        },
        ports={"prefect": 41234, "s3": 41236, "master": 41237},
        database_url="postgresql+asyncpg://postgres@127.0.0.1:41238/scratch",
    )


@pytest.mark.parametrize("name", RUN)
def test_a_block_on_a_test_machine_keeps_nothing_of_the_guides_machine(name, tmp_path):
    text = _machine(tmp_path / "inner-city", "inner-city").adapt(guide_blocks()[name])
    # every absolute folder is the machine's or the virtual environment's
    for path in re.findall(r"(?<![\w.:~/-])/[\w./{}-]+", text.replace("sqlite:///", "")):
        assert path.startswith((str(tmp_path), sys.prefix)), (name, path)
    for host in ("coordinator.example", "127.0.0.1:4200", "127.0.0.1:8333", "sudo", "prefect:"):
        assert host not in text, (name, host)
    if name.startswith("site-"):
        assert "rural" not in text and "inner-city" in text, name


@pytest.mark.parametrize(
    ("name", "example"), [("site-worker", "worker.env"), ("site-release", "release.env")]
)
def test_a_sites_settings_are_the_shipped_examples(name, example):
    """Site step 7 (or the site-scheduled release) writes its environment file with the lines of
    the shipped example (the same settings, the example's values where the guide has no
    placeholder)."""
    systemd = Path(__file__).resolve().parents[1] / "deployments" / "systemd"
    shipped = env_file(systemd / f"{example}.example")
    block = guide_blocks()[name]
    written = env_file_text(block.split("<<'ENV'\n", 1)[1].split("\nENV\n", 1)[0])
    assert set(written) == set(shipped)
    for key, value in written.items():
        if "<" not in value and "coordinator.example" not in value:
            assert value == shipped[key], key


def test_an_unfilled_placeholder_is_refused(tmp_path):
    m = _machine(tmp_path, "rural")
    m.fill.pop("hash")
    with pytest.raises(ValueError, match="<hash>"):
        m.adapt(guide_blocks()["site-approve"])


def test_a_marker_without_a_fenced_block_is_refused():
    with pytest.raises(ValueError, match="not followed by a fenced block"):
        guide_blocks("<!-- guide-test: x -->\ntext\n")


def test_the_shipped_options_and_units_keep_nothing_of_the_guides_machine(tmp_path):
    """What the test's stand-in for systemd reads (the units the blocks install) and the options
    file step 2 installs, adapted as the test adapts them: every listener on the test's ports."""
    from dpate.deployments.files import HERE

    m = _machine(tmp_path, "rural")
    m.ports.update(volume=41239, filer=41240, admin=41241)
    options = m.adapt((HERE / "storage" / "weed-mini.options").read_text())
    for key, port in (("s3", 41236), ("master", 41237), ("volume", 41239), ("admin", 41241)):
        assert f"{key}.port={port}" in options
    assert f"filer.localSocket={tmp_path}/var/lib/seaweedfs/filer.sock" in options
    server = m.adapt((HERE / "systemd" / "prefect-server.service").read_text())
    assert "--port 41234" in server and f"EnvironmentFile={tmp_path}/etc/dpate/server.env" in server
