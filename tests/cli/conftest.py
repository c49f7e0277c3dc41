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


def public_key_line(site: str, home: Path | None = None) -> str:
    """What ``dpate site keygen SITE`` gives a run on this machine: the site's private key at
    ``$DPATE_HOME/keys/SITE.ed25519.pem`` (made once; ``home`` instead of this process's
    DPATE_HOME), and the spec line with its public half (reports are signed by default)."""
    from dpate.settings import dpate_home
    from dpate.signing import ensure_private_key

    path = (home if home is not None else dpate_home()) / "keys" / f"{site}.ed25519.pem"
    return f'public_key = "{ensure_private_key(path)}"\n'
