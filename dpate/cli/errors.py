"""Exit codes of the ``dpate`` command line and the one short message per failure.

An expected error ends a command with one short message naming its cause and an exit code that
tells the causes apart (the table: ``docs/pipeline.md``, "Checking before spending, and exit
codes"); a traceback is shown only with ``--debug``. Failures that come back from a Prefect run
arrive as public text ``"ExceptionType: message"`` (:func:`dpate.flows.study.state_error`);
:func:`classify` reads the type.

No Prefect import here: ``dpate check`` and the spec check before a run use it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, TextIO

import typer
from rich.markup import escape
from typer.core import TyperGroup

__all__ = [
    "DEBUG",
    "PREFECT_LOG",
    "CliGroup",
    "ExitCode",
    "Failure",
    "classify",
    "exit_code_of",
    "from_exception",
    "print_failures",
    "quiet_prefect_console",
    "summary_code",
]


class ExitCode(IntEnum):
    """What a ``dpate`` command's exit status means (table in docs/pipeline.md)."""

    OK = 0
    UNEXPECTED = 1  #: an unexpected error (a bug, or an unclassified failure): rerun with --debug
    USAGE = 2  #: wrong command-line usage (typer's own code)
    SPEC = 3  #: the study spec is invalid or unreadable
    SITE_DATA = 4  #: a site's data fails validation, or the release is not feasible on it
    LEDGER = 5  #: the privacy ledger refused (lifetime cap) or is missing / unusable
    REPORT = 6  #: a published report or result failed validation, or is missing
    STORAGE = 7  #: the publication storage could not be read or written
    SETTINGS = 8  #: a site's settings (ledger, data, storage location) are missing or refused
    PARTIAL = 10  #: the study ran, but without some sites (require_all_sites = false)
    SITES_FAILED = 11  #: the study failed: its sites failed for different causes (each listed)


#: exception type name -> (exit code, short cause shown to the operator)
_CAUSES: dict[str, tuple[ExitCode, str]] = {
    "SpecError": (ExitCode.SPEC, "invalid study spec"),
    "SiteDataError": (ExitCode.SITE_DATA, "invalid site data"),
    "SiteDataRejected": (ExitCode.SITE_DATA, "invalid site data"),
    "FeasibilityError": (ExitCode.SITE_DATA, "release not feasible"),
    "DataUnavailableError": (ExitCode.SITE_DATA, "site data unavailable"),
    "LedgerError": (ExitCode.LEDGER, "privacy ledger"),
    "BudgetExceededError": (ExitCode.LEDGER, "privacy budget refused"),
    "CapMismatchError": (ExitCode.LEDGER, "privacy ledger cap"),
    "LedgerNotFoundError": (ExitCode.LEDGER, "no privacy ledger"),
    "ReportError": (ExitCode.REPORT, "invalid report"),
    "StudyIncompleteError": (ExitCode.REPORT, "study incomplete"),
    "PublicationConflictError": (ExitCode.STORAGE, "publication conflict"),
    "StorageError": (ExitCode.STORAGE, "storage"),
    "PermissionError": (ExitCode.STORAGE, "storage permission"),
    "FileNotFoundError": (ExitCode.STORAGE, "not found"),
    "OSError": (ExitCode.STORAGE, "storage"),
    "SettingsError": (ExitCode.SETTINGS, "site settings"),
}

_TYPE_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*): ", re.S)


@dataclass(frozen=True)
class Failure:
    """One failure: where (a site id or None), why (short cause), the message, its exit code."""

    site: str | None
    cause: str
    message: str
    code: ExitCode

    def lines(self) -> list[str]:
        head = f"site {self.site}: " if self.site else ""
        first, *rest = self.message.splitlines() or [""]
        if not first.lower().startswith(self.cause.lower()):  # name the cause once
            first = f"{self.cause}: {first}"
        return [f"{head}{first}", *(f"    {line.strip()}" for line in rest)]


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit code of an exception (by its class or a base class's name)."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _CAUSES:
            return _CAUSES[cls.__name__][0]
    if isinstance(exc, KeyError):
        return ExitCode.USAGE
    return ExitCode.UNEXPECTED


def from_exception(exc: BaseException, site: str | None = None) -> Failure:
    for cls in type(exc).__mro__:
        if cls.__name__ in _CAUSES:
            code, cause = _CAUSES[cls.__name__]
            return Failure(site, cause, _text(exc), code)
    if isinstance(exc, KeyError):  # an unknown site id: KeyError's text is the message
        return Failure(site, "unknown site", str(exc.args[0]) if exc.args else "", ExitCode.USAGE)
    return Failure(site, f"unexpected {type(exc).__name__}", _text(exc), ExitCode.UNEXPECTED)


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def classify(error: str, site: str | None = None) -> Failure:
    """A failure from a run's public error text ``"Type: message"`` (or bare text)."""
    m = _TYPE_PREFIX.match(error)
    if m:
        name = m.group(1).rsplit(".", 1)[-1]
        message = error[m.end() :]
        if name in _CAUSES:
            code, cause = _CAUSES[name]
            return Failure(site, cause, _strip_site(message, site), code)
        if name.endswith(("Error", "Exception")):
            return Failure(site, f"unexpected {name}", message, ExitCode.UNEXPECTED)
    return Failure(site, "failed", error, ExitCode.UNEXPECTED)


def _strip_site(message: str, site: str | None) -> str:
    """Drop a leading ``site X:`` (the site is named once, in front)."""
    if site and message.startswith(f"site {site}: "):
        return message[len(f"site {site}: ") :]
    return message


def summary_code(failures: Iterable[Failure]) -> ExitCode:
    """One exit code for several failures: theirs if they share it, else SITES_FAILED."""
    codes = {f.code for f in failures}
    if not codes:
        return ExitCode.OK
    return codes.pop() if len(codes) == 1 else ExitCode.SITES_FAILED


# ---------------------------------------------------------------------------------------------
# one handler for every command


class PrefectLogSink:
    """Where Prefect's console logs go unless ``--verbose``/``--debug``: appended to a log file
    (opened on the first write), not stderr. Named in Prefect's logging config as
    ``ext://dpate.cli.errors.PREFECT_LOG`` (``PREFECT_LOGGING_HANDLERS_CONSOLE_STREAM``).
    What Prefect logs is public (the tasks log no record or private count)."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self._fh: TextIO | None = None

    @property
    def path(self) -> Path:
        home = os.environ.get("PREFECT_HOME", "").strip() or "~/.prefect"
        return Path(home).expanduser() / "dpate-cli.log"

    def write(self, text: str) -> int:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        return self._fh.write(text)

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def isatty(self) -> bool:
        return False

    @property
    def used(self) -> bool:
        return self._fh is not None


PREFECT_LOG = PrefectLogSink()

#: set by ``dpate --debug``: unexpected errors show their traceback
DEBUG = {"on": os.environ.get("DPATE_DEBUG", "").strip() in ("1", "true", "yes")}


def quiet_prefect_console() -> None:
    """Send Prefect's console handlers to :data:`PREFECT_LOG` (call before importing Prefect)."""
    for handler in ("CONSOLE", "DEBUG"):
        os.environ.setdefault(
            f"PREFECT_LOGGING_HANDLERS_{handler}_STREAM", "ext://dpate.cli.errors.PREFECT_LOG"
        )


def print_failures(failures: Iterable[Failure], console: Any) -> None:
    for f in failures:
        for i, line in enumerate(f.lines()):
            console.print(
                f"[red]error:[/red] {escape(line)}" if i == 0 else escape(line),
                highlight=False,
                soft_wrap=True,
            )
    if PREFECT_LOG.used:
        console.print(
            f"(Prefect's log: {PREFECT_LOG.path}; --verbose shows it here)",
            highlight=False,
            soft_wrap=True,
        )


class CliGroup(TyperGroup):
    """Every command's expected errors end in one short message and their exit code
    (:class:`ExitCode`); an unexpected one too, with its traceback only under ``--debug``."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as exc:
            if DEBUG["on"] or type(exc).__module__.startswith(("typer.", "click.")):
                raise
            from rich.console import Console

            failure = from_exception(exc)
            if failure.code == ExitCode.UNEXPECTED:
                failure = Failure(
                    None,
                    failure.cause,
                    f"{failure.message} (dpate --debug shows the traceback)",
                    failure.code,
                )
            print_failures([failure], Console(stderr=True))
            raise typer.Exit(int(failure.code)) from None
