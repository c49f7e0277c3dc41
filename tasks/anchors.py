"""The public reports anchor the site's ledger (docs/deploying.md, Trust).

Every site report carries ``ledger_head``: the ``seq`` and ``row_hash`` of its release's COMMIT row.
A row hash chains every earlier row (tasks.ledger), and a published report is write-once and
outside the site's database, so the heads a site has published pin its ledger's history:

* the last row deleted: a published ``seq`` has no row any more;
* a middle row deleted, an amount edited, rows reordered: either :meth:`PrivacyLedger.verify`
  sees a broken chain, or (when the chain was recomputed to hide it) the row at a published
  ``seq`` no longer has the published hash.

Only rows up to the newest published head are pinned; rows after it (a reservation not yet
published) are checked by the chain alone. No input is needed beyond the ledger and the storage
root the site publishes to.

API::

    heads, bare, unreadable = published_heads(Store(url), "site-a")  # every published head
    report = check_anchors(ledger, heads)                  # ledger.verify() + the anchors
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from schemas.report import MAX_REPORT_BYTES
from tasks.ledger import PrivacyLedger
from tasks.storage import ObjectTooLargeError, Store

__all__ = ["AnchorReport", "PublishedHead", "check_anchors", "published_heads"]


@dataclass(frozen=True)
class PublishedHead:
    """One ledger head as a published report states it."""

    report: str  # the report's URL
    release_id: str
    seq: int
    row_hash: str


@dataclass(frozen=True)
class AnchorReport:
    ok: bool
    rows: int
    head_hash: str
    heads: list[PublishedHead]
    problems: list[str] = field(default_factory=list)
    unanchored: list[str] = field(default_factory=list)  # reports without a ledger head


def published_heads(
    store: Store, site_id: str, study_ids: list[str] | None = None
) -> tuple[list[PublishedHead], list[str], list[str]]:
    """Every ledger head ``site_id`` published under ``store`` (all studies found at the root
    unless ``study_ids``): ``(heads, reports without a head, unreadable reports)``."""
    studies = study_ids if study_ids is not None else [k for k in store.children("")]
    heads: list[PublishedHead] = []
    bare: list[str] = []
    bad: list[str] = []
    for study in studies:
        try:
            keys = store.site_report_keys(study, site_id)
        except ValueError:  # a folder whose name is no study id: not ours
            continue
        for key in keys:
            uri = store.uri(key)
            try:
                data = store.read(key, max_bytes=MAX_REPORT_BYTES)
                doc = json.loads(data or b"null")
                head = doc.get("ledger_head")
                if head is None:
                    bare.append(uri)
                    continue
                heads.append(
                    PublishedHead(uri, str(doc["release_id"]), int(head["seq"]), head["row_hash"])
                )
            except (ObjectTooLargeError, ValueError, TypeError, KeyError, AttributeError):
                bad.append(uri)
    heads.sort(key=lambda h: h.seq)
    return heads, bare, bad


def check_anchors(ledger: PrivacyLedger, heads: list[PublishedHead]) -> AnchorReport:
    """The ledger's own verification plus every published head checked against its row."""
    verified = ledger.verify()
    problems = list(verified.problems)
    by_seq = {e.seq: e for e in ledger.events()}
    last = max(by_seq, default=0)
    for h in heads:
        e = by_seq.get(h.seq)
        where = f"report {h.report} (release {h.release_id[:12]}) published ledger row {h.seq}"
        if e is None:
            problems.append(
                f"{where}, but the ledger has no row {h.seq} (it ends at row {last}): rows were "
                f"removed"
            )
        elif e.row_hash != h.row_hash:
            problems.append(
                f"{where} with hash {h.row_hash[:16]}, but that row's hash is now "
                f"{e.row_hash[:16]}: a row at or before {h.seq} was edited, removed, inserted or "
                f"reordered (and the chain recomputed)"
            )
        elif e.kind != "COMMIT" or e.release_id != h.release_id:
            problems.append(f"{where}, but row {h.seq} is not that release's COMMIT row")
    return AnchorReport(not problems, verified.rows, verified.head_hash, heads, problems)
