"""The public documents anchor the site's ledger (docs/how-to/ledger.md, "Anchored by the reports").

Every site report carries ``ledger_head``: the ``seq`` and ``row_hash`` of its release's COMMIT row,
and the aggregator copies the head of every report it used into its result document
(``sites[].ledger_head``). A row hash chains every earlier row (dpate.ledger), and both documents
are write-once and outside the site's database, so the heads a site has published pin its
ledger's history:

* the last row deleted: a published ``seq`` has no row any more;
* a middle row deleted, an amount edited, rows reordered: either :meth:`PrivacyLedger.verify`
  sees a broken chain, or (when the chain was recomputed to hide it) the row at a published
  ``seq`` no longer has the published hash.

Only rows up to the newest published head are pinned; rows after it (a reservation not yet
published) are checked by the chain alone. Reading the result documents too means that deleting
the site's own newest report (its storage identity may delete its own objects) does not unpin
the rows it anchored. No input is needed beyond the ledger and the storage root the site
publishes to. One code path, :func:`verify_against_reports`, serves ``dpate ledger verify
--against-reports``.

Before every reservation a site runs :func:`require_not_behind`: the newest head it has published
(its own reports and the results naming it, at its publication root) must be a row of its ledger
with the same hash. A ledger restored from an older copy ends before that row (or, padded with
rows, has another hash there): it is refused with :class:`LedgerBehindError` before anything is
reserved, so a restore can never refund budget that published releases spent. The row number
``seq`` is the monotonic counter; the published hash at it is what a copy cannot fake.

API::

    require_not_behind(ledger, Store(url), "site-a")   # or LedgerBehindError, before reserving
    report = verify_against_reports(ledger, Store(url), "site-a")  # chain + every published head
    heads, bare, unreadable = published_heads(Store(url), "site-a")
    report = check_anchors(ledger, heads)                          # ledger.verify() + the anchors
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from dpate.ledger._chain import LedgerError
from dpate.ledger._privacy_ledger import PrivacyLedger
from dpate.schemas.reports import MAX_REPORT_BYTES, MAX_RESULT_BYTES, loads_bounded
from dpate.storage import ObjectTooLargeError, Store

__all__ = [
    "AnchorReport",
    "LedgerBehindError",
    "PublishedHead",
    "check_anchors",
    "published_heads",
    "require_not_behind",
    "verify_against_reports",
]


@dataclass(frozen=True)
class PublishedHead:
    """One ledger head as a published document states it: the site's own report, or the
    aggregator's result document that used that report (``source``)."""

    report: str  # the document's URL
    release_id: str
    seq: int
    row_hash: str
    source: Literal["report", "result"] = "report"


@dataclass(frozen=True)
class AnchorReport:
    ok: bool
    rows: int
    head_hash: str
    heads: list[PublishedHead]
    problems: list[str] = field(default_factory=list)
    unanchored: list[str] = field(default_factory=list)  # reports without a ledger head
    unreadable: list[str] = field(default_factory=list)  # documents that could not be read


_ROW_HASH = re.compile(r"^[0-9a-f]{64}$")
#: a ledger row number is an SQLite integer
_MAX_SEQ = 2**63 - 1


def _head(uri: str, rid: object, head: Any, source: Literal["report", "result"]) -> PublishedHead:
    """The head a document states, its fields checked (ValueError when they are not a ledger
    row's: a positive integer ``seq`` and a 64-hex ``row_hash``)."""
    seq, row_hash = head["seq"], head["row_hash"]
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= _MAX_SEQ:
        raise ValueError("ledger_head.seq is not a ledger row number")
    if not isinstance(row_hash, str) or not _ROW_HASH.match(row_hash):
        raise ValueError("ledger_head.row_hash is not a row hash")
    if not isinstance(rid, str):
        raise ValueError("release_id is not a string")
    return PublishedHead(uri, rid, seq, row_hash, source)


def _result_heads(
    store: Store, study: str, site_id: str, heads: list[PublishedHead], bad: list[str]
) -> None:
    """The heads the aggregator recorded for ``site_id`` in every result of ``study``."""
    for key in store.children(f"{study}/results"):
        if not key.endswith(".json"):
            continue
        uri = store.uri(key)
        try:
            doc = loads_bounded(store.read(key, max_bytes=MAX_RESULT_BYTES) or b"null")
            for entry in doc["sites"]:
                if entry.get("site_id") == site_id and entry.get("ledger_head") is not None:
                    heads.append(_head(uri, entry["release_id"], entry["ledger_head"], "result"))
        except (ObjectTooLargeError, ValueError, TypeError, KeyError, AttributeError):
            bad.append(uri)


def published_heads(
    store: Store, site_id: str, study_ids: list[str] | None = None
) -> tuple[list[PublishedHead], list[str], list[str]]:
    """Every ledger head of ``site_id`` published under ``store`` (all studies found at the root
    unless ``study_ids``), from its reports and from the results that used them:
    ``(heads, reports without a head, unreadable documents)``. Heads are sorted by ``seq``; the
    same head stated by a report and a result is kept once (the report's)."""
    studies = study_ids if study_ids is not None else store.children("")
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
                doc = loads_bounded(store.read(key, max_bytes=MAX_REPORT_BYTES) or b"null")
                if doc.get("ledger_head") is None:
                    bare.append(uri)
                    continue
                heads.append(_head(uri, doc["release_id"], doc["ledger_head"], "report"))
            except (ObjectTooLargeError, ValueError, TypeError, KeyError, AttributeError):
                bad.append(uri)
        _result_heads(store, study, site_id, heads, bad)
    seen: set[tuple[int, str, str]] = set()
    unique = []
    for h in heads:  # reports first: a result repeating a report's head adds nothing
        if (h.seq, h.row_hash, h.release_id) not in seen:
            seen.add((h.seq, h.row_hash, h.release_id))
            unique.append(h)
    unique.sort(key=lambda h: h.seq)
    return unique, bare, bad


def check_anchors(
    ledger: PrivacyLedger, heads: list[PublishedHead], *, expect_head: str | None = None
) -> AnchorReport:
    """The ledger's own verification plus every published head checked against its row."""
    verified = ledger.verify(expect_head=expect_head)
    problems = list(verified.problems)
    by_seq = {e.seq: e for e in ledger.events()}
    last = max(by_seq, default=0)
    for h in heads:
        doc = "report" if h.source == "report" else "result (the aggregator's copy)"
        where = f"{doc} {h.report} (release {h.release_id}) published ledger row {h.seq}"
        e = by_seq.get(h.seq)
        if e is None:
            problems.append(
                f"{where}, but the ledger has no row {h.seq} (it ends at row {last}): rows were "
                f"removed"
            )
        elif e.row_hash != h.row_hash:
            problems.append(
                f"{where} with hash {h.row_hash}, but that row's hash is now {e.row_hash}: a row "
                f"at or before {h.seq} was edited, removed, inserted or reordered (and the chain "
                f"recomputed)"
            )
        elif e.kind != "COMMIT" or e.release_id != h.release_id:
            problems.append(f"{where}, but row {h.seq} is not that release's COMMIT row")
    return AnchorReport(not problems, verified.rows, verified.head_hash, heads, problems)


def verify_against_reports(
    ledger: PrivacyLedger,
    store: Store,
    site_id: str,
    study_ids: list[str] | None = None,
    *,
    expect_head: str | None = None,
) -> AnchorReport:
    """``ledger.verify()`` plus every head ``site_id`` has published under ``store``.

    Also a problem: a document that could not be read (it may have been replaced), and a
    ledger with committed releases of which no head is found (nothing anchors it: a wrong storage
    root, or every document gone). Reports without a head (written before heads were published)
    are listed, not problems.
    """
    heads, bare, bad = published_heads(store, site_id, study_ids)
    found = check_anchors(ledger, heads, expect_head=expect_head)
    problems = found.problems + [f"unreadable published document {u}" for u in bad]
    commits = sum(1 for e in ledger.events(site_id) if e.kind == "COMMIT")
    if commits and not heads:
        problems.append(
            f"the ledger holds {commits} committed release(s) of site {site_id}, but no report "
            f"or result under {store.url} carries a ledger head: nothing anchors this ledger "
            f"(check the storage root, --storage)"
        )
    return AnchorReport(
        not problems, found.rows, found.head_hash, heads, problems, unanchored=bare, unreadable=bad
    )


class LedgerBehindError(LedgerError):
    """The site's ledger is behind (or beside) what the site has published: restored from an
    older copy or replaced. Nothing is reserved."""


def require_not_behind(ledger: PrivacyLedger, store: Store, site_id: str) -> PublishedHead | None:
    """Refuse (:class:`LedgerBehindError`) when the newest ledger head ``site_id`` has published
    under ``store`` is not a row of ``ledger`` with the same hash; returns that head (None when
    the site has published none). Documents that cannot be read are skipped here (they are
    ``verify --against-reports``'s problems)."""
    heads, _, _ = published_heads(store, site_id)
    if not heads:
        return None
    newest = heads[-1]
    rows = {e.seq: e for e in ledger.events()}
    last = max(rows, default=0)
    row = rows.get(newest.seq)
    if row is None or row.row_hash != newest.row_hash:
        state = (
            f"the ledger ends at row {last}"
            if row is None
            else f"the ledger's row {newest.seq} has another hash"
        )
        raise LedgerBehindError(
            f"site {site_id}: this site has published ledger row {newest.seq} (release "
            f"{newest.release_id[:12]}...), but {state}: the ledger was restored from an older "
            f"copy or replaced, and spending from it would spend budget again. Nothing was "
            f"reserved. Restore the newest copy (docs/how-to/ledger.md, Backups) and check it with "
            f"dpate ledger verify {site_id} --against-reports"
        )
    return newest
