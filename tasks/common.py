"""What every dpate task shares: the no-cache/no-persist settings and the retry rule for I/O.

Prefect's result cache is not fail-closed (with its storage unreachable or its record lost, a
cached task silently runs again): it is never what stops a second noise draw (the ledger is).
Every dpate task therefore runs with ``cache_policy=NO_CACHE`` and ``persist_result=False``:
nothing a task returns is written to Prefect's result storage, and the tasks that hold raw records
or un-committed noise keep them in memory only.

I/O tasks (ledger database, object storage) retry with a growing delay, but only on errors
that can be transient (connection, timeout, operating-system I/O, and the storage clients' own
connection errors: botocore's ``EndpointConnectionError``, ``ConnectTimeoutError``,
``ReadTimeoutError``..., aiohttp's client connection errors); a refusal (budget cap, a
publication conflict, invalid data or reports, a bad storage key) is final and never retried.
The delays (:data:`IO_RETRY_DELAYS`, 67 s in all before jitter) outlast a storage or database
outage of about a minute, on top of the clients' own retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prefect.cache_policies import NO_CACHE

__all__ = [
    "IO_RETRY_DELAYS",
    "IO_TASK",
    "NO_RETRY_TASK",
    "artifact_key",
    "is_transient",
]

#: seconds between the attempts of an I/O task (5 retries, 67 s before jitter)
IO_RETRY_DELAYS = [2, 5, 10, 20, 30]

#: connection/timeout errors of the storage clients, matched by class name and module (anywhere
#: in the class's MRO) so botocore and aiohttp are not imported here
_CLIENT_TRANSIENT = {
    "botocore": {
        "ConnectionError",  # base of EndpointConnectionError, ConnectTimeoutError, ...
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ProxyConnectionError",
        "HTTPClientError",
    },
    "aiohttp": {
        "ClientConnectionError",  # base of ClientConnectorError, ServerDisconnectedError, ...
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ClientOSError",
        "ClientPayloadError",
    },
    "urllib3": {"NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ProtocolError"},
}


def _client_transient(exc: BaseException) -> bool:
    for cls in type(exc).__mro__:
        top = cls.__module__.split(".", 1)[0]
        if cls.__name__ in _CLIENT_TRANSIENT.get(top, ()):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and len(seen) < 8:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: a dropped connection, a timeout, an I/O error; never a refusal.

    The storage clients' connection errors count whether raised directly or as the cause of
    another error (s3fs and aiobotocore wrap them).
    """
    from sqlalchemy.exc import DBAPIError, OperationalError

    from dpate.ledger import LedgerError
    from dpate.storage import InvalidKeyError, PublicationConflictError

    if isinstance(exc, LedgerError | PublicationConflictError | FileExistsError | InvalidKeyError):
        return False
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    if any(_client_transient(e) for e in _chain(exc)):
        return True
    return isinstance(exc, ConnectionError | TimeoutError | OSError) and not isinstance(
        exc, FileNotFoundError | PermissionError | IsADirectoryError
    )


def _retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:
        return False
    return isinstance(exc, BaseException) and is_transient(exc)


#: every task that does no I/O: no retries, no cache, no persisted result. Those holding raw
#: records or un-committed noise must not retry (a retry could draw again) nor persist anything
#: (Prefect's storage is the coordinator's); those on public values are cheap to run again
NO_RETRY_TASK: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}
#: tasks doing I/O on the ledger or the object store
IO_TASK: dict[str, Any] = {
    "cache_policy": NO_CACHE,
    "persist_result": False,
    "retries": len(IO_RETRY_DELAYS),
    "retry_delay_seconds": IO_RETRY_DELAYS,
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": _retry_if_transient,
}


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from public ids."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")[:200]
