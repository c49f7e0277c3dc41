"""What every dpate task shares: the no-cache/no-persist settings and the retry rule for I/O.

Prefect's result cache is not fail-closed (../shared/STACK.md): it is never what stops a second
noise draw (the ledger is). Every dpate task therefore runs with ``cache_policy=NO_CACHE`` and
``persist_result=False``: nothing a task returns is written to Prefect's result storage, and the
tasks that hold raw records or un-committed noise keep them in memory only.

I/O tasks (ledger database, object storage) retry with exponential backoff, but only on errors
that can be transient (connection, timeout, operating-system I/O); a refusal (budget cap, a
publication conflict, invalid data or reports) is final and never retried.
"""

from __future__ import annotations

import re
from typing import Any

from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

__all__ = ["IO_TASK", "PRIVATE_TASK", "PUBLIC_TASK", "artifact_key", "is_transient"]


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: a dropped connection, a timeout, an I/O error; never a refusal."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    from tasks.ledger import LedgerError
    from tasks.storage import PublicationConflictError

    if isinstance(exc, LedgerError | PublicationConflictError | FileExistsError):
        return False
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    return isinstance(exc, ConnectionError | TimeoutError | OSError) and not isinstance(
        exc, FileNotFoundError | PermissionError | IsADirectoryError
    )


def _retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:
        return False
    return isinstance(exc, BaseException) and is_transient(exc)


#: tasks holding raw records or un-committed noise: no retries (a retry could draw again)
PRIVATE_TASK: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}
#: tasks on public values only
PUBLIC_TASK: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}
#: tasks doing I/O on the ledger or the object store
IO_TASK: dict[str, Any] = {
    "cache_policy": NO_CACHE,
    "persist_result": False,
    "retries": 3,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": _retry_if_transient,
}


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from public ids."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")[:200]
