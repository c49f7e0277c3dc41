"""The command's Prefect environment (:func:`dpate.cli.environment.prefect_env`)."""

from __future__ import annotations

import os

import pytest


def test_the_embedded_server_is_sent_no_logs_and_a_named_server_keeps_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command on the embedded server does not ship its flows' logs to it (on SQLite their
    inserts beside the state updates held the database lock for up to Prefect's 60-s busy
    timeout); a server ``PREFECT_API_URL`` names gets them as before; an explicit setting
    wins either way."""
    from dpate.cli.environment import prefect_env

    monkeypatch.delenv("PREFECT_LOGGING_TO_API_ENABLED", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    prefect_env(verbose=True)
    assert os.environ["PREFECT_LOGGING_TO_API_ENABLED"] == "false"
    monkeypatch.delenv("PREFECT_LOGGING_TO_API_ENABLED")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    prefect_env(verbose=True)
    assert "PREFECT_LOGGING_TO_API_ENABLED" not in os.environ
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("PREFECT_LOGGING_TO_API_ENABLED", "true")
    prefect_env(verbose=True)
    assert os.environ["PREFECT_LOGGING_TO_API_ENABLED"] == "true"
