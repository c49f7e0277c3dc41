"""The privacy ledger's audit: recompute the hash chain and the budget rules over its rows.

:meth:`dpate.ledger.PrivacyLedger.verify` reads the rows and calls :func:`verify_events`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from dpate.ledger._chain import GENESIS, Event, VerifyReport, row_hash
from dpate_core.privacy import NOTHING, PrivacyParams, check_budget

__all__ = ["verify_events"]


def verify_events(events: Sequence[Event], expect_head: str | None = None) -> VerifyReport:
    """Recompute the chain and the budget rules; list every problem found.

    Detects an edited row (its hash), a deleted or reordered row (a gap in ``seq`` or a broken
    ``prev_hash`` link), a COMMIT without its RESERVE, and a RESERVE past the cap in force.
    A deleted last row is caught only with ``expect_head`` (a head hash noted earlier).
    """
    problems: list[str] = []
    prev = GENESIS
    caps: dict[str, PrivacyParams] = {}
    spent: dict[str, PrivacyParams] = {}
    reserved: set[str] = set()
    for i, e in enumerate(events, start=1):
        if e.seq != i:
            problems.append(f"row {e.seq}: expected sequence number {i} (a row is missing)")
        if e.prev_hash != prev:
            problems.append(
                f"row {e.seq}: prev_hash does not match the previous row's hash "
                f"(a row was deleted, inserted or reordered)"
            )
        if row_hash(e.prev_hash, e.content()) != e.row_hash:
            problems.append(f"row {e.seq}: row_hash does not match its content (edited row)")
        prev = e.row_hash
        try:
            if e.kind == "CAP":
                caps[e.site_id] = e.cap
            elif e.kind == "RESERVE":
                before = spent.get(e.site_id, NOTHING)
                spent[e.site_id] = before + e.privacy
                reserved.add(e.release_id or "")
                cap = caps.get(e.site_id)
                if cap is None or not check_budget(cap, before, e.privacy).fits:
                    problems.append(f"row {e.seq}: site {e.site_id} reserved past its cap in force")
            elif e.kind == "COMMIT":
                if (e.release_id or "") not in reserved:
                    problems.append(f"row {e.seq}: COMMIT without an earlier RESERVE")
                json.loads(e.payload)
            else:
                problems.append(f"row {e.seq}: unknown event kind {e.kind!r}")
        except (ValueError, TypeError) as exc:
            problems.append(f"row {e.seq}: unreadable field ({type(exc).__name__})")
    if expect_head is not None and prev != expect_head:
        problems.append(
            f"head hash {prev} differs from the expected {expect_head} "
            f"(rows were removed from or added to the end)"
        )
    return VerifyReport(not problems, len(events), prev, problems)
