"""Exit codes of the ``dpate`` command line and the one short message per failure.

An expected error ends a command with one short message naming its cause and an exit code that
tells the causes apart (the table: ``docs/reference/pipeline.md``, "Checking before spending, and exit
codes"); a traceback is shown only with ``--debug``. Failures that come back from a Prefect run
arrive as public text ``"ExceptionType: message"`` (:func:`dpate.flows.study.state_error`);
:func:`classify` reads the type. The exit code and cause of each error are its class's
(:class:`dpate.errors.DpateError`).

No Prefect import here: ``dpate check`` and the spec check before a run use it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import typer
from rich.markup import escape
from typer.core import TyperGroup

from dpate.errors import DpateError, ExitCode, error_class, exit_code_of

__all__ = [
    "DEBUG",
    "PREFECT_LOG",
    "TYPER_OPTIONS",
    "CliGroup",
    "Failure",
    "classify",
    "from_exception",
    "print_failures",
    "quiet_prefect_console",
    "summary_code",
]


_BUILTIN_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (PermissionError, "storage permission"),
    (FileNotFoundError, "not found"),
    (OSError, "storage"),
)


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


def from_exception(exc: BaseException, site: str | None = None) -> Failure:
    """The failure an exception stands for: a :class:`~dpate.errors.DpateError` names its own
    cause and exit code; a storage ``OSError`` is 7, an unknown site id (``KeyError``) 2."""
    code = exit_code_of(exc)
    if isinstance(exc, DpateError):
        return Failure(site, exc.cause, _strip_site(_text(exc), site), code)
    if isinstance(exc, KeyError):  # an unknown site id: KeyError's text is the message
        return Failure(site, "unknown site", str(exc.args[0]) if exc.args else "", code)
    for kind, cause in _BUILTIN_CAUSES:
        if isinstance(exc, kind):
            return Failure(site, cause, _text(exc), code)
    return Failure(site, f"unexpected {type(exc).__name__}", _text(exc), code)


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def classify(error: str, site: str | None = None) -> Failure:
    """A failure from a run's public error text ``"Type: message"`` (Prefect hands a failed
    run's exception back as that text): the :class:`~dpate.errors.DpateError` of that name gives
    the cause and exit code; an unknown type is unexpected (1)."""
    name, sep, message = error.partition(": ")
    name = name.rsplit(".", 1)[-1]
    if not sep or not name.isidentifier():
        return Failure(site, "failed", error, ExitCode.UNEXPECTED)
    cls = error_class(name)
    if cls is not None:
        return Failure(site, cls.cause, _strip_site(message, site), cls.exit_code)
    for kind, cause in _BUILTIN_CAUSES:
        if name == kind.__name__:
            return Failure(site, cause, message, ExitCode.STORAGE)
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


#: every ``typer.Typer`` of the command line: plain help (click's formatter: no Rich, Markdown or
#: pretty-traceback import on ``--help``; dpate's own errors are one line each anyway)
TYPER_OPTIONS: dict[str, Any] = {"rich_markup_mode": None, "pretty_exceptions_enable": False}


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
