"""The process a command runs in: Prefect's quiet offline defaults, the local operator's options
as the site configuration, and the spec read before Prefect starts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from dpate.cli.errors import DEBUG, quiet_prefect_console

#: The Prefect server services the command's embedded server runs without (each
#: ``PREFECT_SERVER_SERVICES_<NAME>_ENABLED=false``): it serves only this command's in-process
#: flows, so it needs no automations, event feed or vacuum (fewer writers on its SQLite
#: database), and no scheduler, late-run marker, worker monitor (foreman) or pause expiry (no
#: deployments, scheduled runs, workers or pauses). Each loop costs CPU while the command runs:
#: an idle server with every service took 1.7 s of CPU a minute, without these 1.0 s.
EMBEDDED_SERVICES_OFF = (
    "EVENT_PERSISTER",
    "TRIGGERS",
    "DB_VACUUM",
    "SCHEDULER",
    "LATE_RUNS",
    "FOREMAN",
    "PAUSE_EXPIRATIONS",
)


def prefect_env(verbose: bool = False) -> None:
    """Offline, quiet defaults for Prefect; call before importing it."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if not os.environ.get("PREFECT_API_URL"):
        # the embedded server: only the services its in-process flows use
        for service in EMBEDDED_SERVICES_OFF:
            os.environ.setdefault(f"PREFECT_SERVER_SERVICES_{service}_ENABLED", "false")
        # and none of the flows' logs (unless the environment says otherwise): it lives for one
        # command and nobody watches it, the logs stay in Prefect's log file and the site's own
        # log, and on its SQLite database their bulk inserts beside the runs' state updates
        # made a command wait about a minute for the database lock (Prefect's busy_timeout of
        # 60 s): `dpate demo` took 77-85 s in 3 of 30 runs with them, 19-28 s in all 22
        # without (docs/reference/benchmarks.md, stop 42)
        os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    if not (verbose or DEBUG["on"]):
        for handler in ("CONSOLE", "CONSOLE_FLOW_RUNS"):
            os.environ.setdefault(f"PREFECT_LOGGING_HANDLERS_{handler}_LEVEL", "WARNING")
        quiet_prefect_console()  # Prefect's console output to a log file, not stderr


@contextmanager
def site_settings(**values: str | None) -> Iterator[None]:
    """The local operator's options (``--ledger``, ``--data``, ``--storage``; the demo's log and
    key locations) as this command's site settings (:func:`dpate.settings.command_options`: over
    the environment and the site config file, for the flows this command runs here)."""
    from dpate.settings import command_options

    fields = {
        "ledger": "ledger_url",
        "data": "data_path",
        "storage": "storage_url",
        "log": "site_log",
        "key": "site_key",
    }
    with command_options(**{fields[key]: value for key, value in values.items()}):
        yield


def load_spec(spec: str) -> Any:
    """The study spec (:func:`dpate.settings.load_study_spec`): a spec error ends the command
    with its own exit code, before Prefect starts."""
    from dpate.settings import load_study_spec

    return load_study_spec(spec)


#: the study spec argument of every command that reads one
SpecArg = Annotated[
    str,
    typer.Argument(
        help="study spec (TOML path or fsspec URL)", metavar="STUDY.toml", show_default=False
    ),
]
