"""The guide installs everything from the package ("nothing to clone"): the built wheel holds
the deployments, the example spec the guide deploys, and the storage and systemd files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

SHIPPED = [
    "deployments/prefect.yaml",
    "deployments/orchestrate.py",
    "deployments/automations.py",
    "deployments/files.py",
    "deployments/examples/star.toml",
    "deployments/storage/config.py",
    "deployments/storage/weed-mini.options",
    "deployments/storage/nginx-s3.conf",
    "deployments/storage/seaweedfs.service",
    "deployments/systemd/dpate-worker.service",
    "deployments/systemd/prefect-server.service",
    "deployments/systemd/worker.env.example",
]


def test_wheel_ships_the_deployment_files(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "-w", str(tmp_path), "--no-deps", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = tmp_path.glob("dpate-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for path in SHIPPED:
            assert path in names, path
            assert z.read(path) == (REPO / path).read_bytes(), path


def test_files_lists_and_copies_the_shipped_files(tmp_path):
    from deployments.files import main, shipped_files

    rel = {str(p) for p in shipped_files()}
    assert {p.removeprefix("deployments/") for p in SHIPPED if not p.endswith(".py")} <= rel
    assert main(["--copy", str(tmp_path)]) == 0
    assert (tmp_path / "prefect.yaml").read_bytes() == (
        REPO / "deployments" / "prefect.yaml"
    ).read_bytes()
    assert main(["--copy", str(tmp_path)]) == 1  # never overwrites an edited copy
