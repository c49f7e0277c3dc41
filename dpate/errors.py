"""Every expected dpate error and the exit code it ends a command with (no dependencies).

Each error the project raises on purpose is a :class:`DpateError`: its class carries the
``exit_code`` (:class:`ExitCode`, the table in docs/reference/pipeline.md, "Checking before spending, and
exit codes") and the short ``cause`` the command line names in front of the message. The command
line reads them from the exception (:func:`exit_code_of`), and, for a failure that comes back from
a Prefect run as public text ``"TypeName: message"``, from the class of that name
(:func:`error_class`: every subclass registers itself when its module is imported).

The errors stay where they are raised (the spec's in :mod:`dpate.schemas.spec`, the ledger's in
:mod:`dpate.ledger` ...); each also keeps its built-in base (``ValueError``,
``RuntimeError``, ``FileNotFoundError``) for callers that catch those.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

__all__ = ["DpateError", "ExitCode", "error_class", "exit_code_of"]


class ExitCode(IntEnum):
    """What a ``dpate`` command's exit status means (table in docs/reference/pipeline.md)."""

    OK = 0
    UNEXPECTED = 1  #: an unexpected error (a bug, or an unclassified failure): rerun with --debug
    USAGE = 2  #: wrong command-line usage (typer's own code, an unknown site id)
    SPEC = 3  #: the study spec is invalid or unreadable
    SITE_DATA = 4  #: a site's data fails validation, or the release is not feasible on it
    LEDGER = 5  #: the privacy ledger refused (lifetime cap) or is missing / unusable
    REPORT = 6  #: a published report or result failed validation, or is missing
    STORAGE = 7  #: the publication storage could not be read or written, or holds a conflict
    SETTINGS = 8  #: a site's settings (ledger, data, storage location) are missing or refused
    PARTIAL = 10  #: the study ran, but without some sites (require_all_sites = false)
    SITES_FAILED = 11  #: the study failed: its sites failed for different causes (each listed)


_REGISTRY: dict[str, type[DpateError]] = {}


class DpateError(Exception):
    """An expected error: its message says what is wrong and what to do next, and names no
    private value. Subclasses set ``exit_code`` and ``cause``."""

    exit_code: ClassVar[ExitCode] = ExitCode.UNEXPECTED
    cause: ClassVar[str] = "error"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY.setdefault(cls.__name__, cls)


#: the modules (or the packages) that define the errors a run's public text may name (imported
#: on a miss)
_MODULES = (
    "dpate.ledger",
    "dpate.settings",
    "dpate.storage",
    "dpate.study_check",
    "dpate.schemas.spec",
    "dpate.schemas.reports",
    "dpate.data.datasets",
    "dpate.site.feasibility",
    "dpate.signing",
    "dpate.schemas.site_data",
    "dpate.site.operator_log",
    "dpate.tasks.aggregate",
)


def error_class(name: str) -> type[DpateError] | None:
    """The :class:`DpateError` subclass of that (unqualified) name; its module is imported if
    it was not yet (a run's failure arrives as text naming the class)."""
    name = name.rsplit(".", 1)[-1]
    if name not in _REGISTRY and name.endswith(("Error", "Rejected")):
        import importlib

        for module in _MODULES:
            # asking for the name imports its module where a package imports its names on first
            # use (dpate.ledger)
            getattr(importlib.import_module(module), name, None)
    return _REGISTRY.get(name)


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit code a command ends with for ``exc``: its class's; a storage ``OSError`` 7;
    an unknown site id (``KeyError``) 2; anything else 1 (a bug)."""
    if isinstance(exc, DpateError):
        return exc.exit_code
    if isinstance(exc, OSError):
        return ExitCode.STORAGE
    if isinstance(exc, KeyError):
        return ExitCode.USAGE
    return ExitCode.UNEXPECTED
