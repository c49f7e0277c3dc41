"""Fixtures of the command-line tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh DPATE_HOME under the test's folder, with no other DPATE_* setting of the caller's
    environment in effect."""
    for k in list(os.environ):
        if k.startswith("DPATE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("DPATE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
