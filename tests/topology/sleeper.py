"""A flow that only sleeps: a run to kill mid-way in tests/topology/test_crashes.py."""

from __future__ import annotations

import time

from prefect import flow


@flow(name="sleeper", persist_result=False)
def sleeper(seconds: float = 600) -> None:
    time.sleep(seconds)
