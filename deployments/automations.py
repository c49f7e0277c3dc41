"""Server-side automations a dpate deployment needs (docs/how-to/deploying.md, "Crashes").

**Zombie runs.** A site machine that dies mid-release (power, OOM, SIGKILL) cannot report its
flow run's end: the run stays ``Running`` on the server forever. Every flow run started by a
worker sends a ``prefect.flow-run.heartbeat`` event every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``
seconds (Prefect 3.8: default 180, minimum 30; the legacy name is
``PREFECT_RUNNER_HEARTBEAT_FREQUENCY``). The open-source server has no built-in detection, so
this module creates the automation of Prefect's guide "How to detect and respond to zombie
flows": a run whose heartbeat is followed by neither another heartbeat nor a final state within
``within_s`` is set ``Crashed``. The study flow then sees the site as failed and aggregates the
others; re-running the study finishes that site's release from its ledger (no new spend).

``within_s`` must exceed the heartbeat interval with margin for a slow machine: we use three
intervals (worker setting ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30``, ``within_s=90``).

    PREFECT_API_URL=... PREFECT_API_AUTH_STRING=... python -m dpate.deployments.automations [--within 90]
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import cast

__all__ = ["ZOMBIE_AUTOMATION", "ensure_zombie_automation"]

ZOMBIE_AUTOMATION = "dpate: crash zombie flow runs"

#: The heartbeat interval the site and coordinator workers are started with (seconds).
HEARTBEAT_S = 30


def ensure_zombie_automation(within_s: float = 3 * HEARTBEAT_S) -> str:
    """Create (or replace) the zombie-run automation on the configured Prefect server; its id."""
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    # (called from synchronous code, where Prefect's async_dispatch methods return their value,
    # not the coroutine their declared type allows)
    try:
        cast(Automation, Automation.read(name=ZOMBIE_AUTOMATION)).delete()
    except ValueError:  # none yet
        pass
    automation = Automation(
        name=ZOMBIE_AUTOMATION,
        description=(
            "A flow run that stopped sending heartbeats (its machine or process died) is set"
            f" Crashed after {within_s:.0f} s; re-running the study is safe (docs/how-to/deploying.md)."
        ),
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {within_s:.0f} s: the run's machine or process died",
            )
        ],
    ).create()
    return str(cast(Automation, automation).id)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dpate.deployments.automations", description=__doc__
    )
    ap.add_argument("--within", type=float, default=3 * HEARTBEAT_S, help="seconds (default 90)")
    args = ap.parse_args(argv)
    print(f"{ZOMBIE_AUTOMATION}: {ensure_zombie_automation(args.within)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
