"""The study result document (schema ``dpate.study-result``): its views shared by the CLI table,
the Prefect artifact and the HTML report.

Version 2 carries, for the combined estimate and for each site, the normal interval (``ci95``) and
the parametric-bootstrap interval (``interval``: ``lo``, ``hi``, ``level``, ``method``,
``uninformative``, ``note``), both clipped to the outcome's feasible range ``[-B, B]``
(:mod:`dpate_core.inference`). Version 1 documents (``ci95`` only) are still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RESULT_SCHEMA", "interval_ends", "interval_text"]

RESULT_SCHEMA = "dpate.study-result"


def interval_ends(doc: Mapping[str, Any]) -> tuple[float, float]:
    """``(lo, hi)`` of a result's or a site's 95% interval: the bootstrap one when present."""
    iv = doc.get("interval")
    if iv is None:
        lo, hi = doc["ci95"]
        return float(lo), float(hi)
    return float(iv["lo"]), float(iv["hi"])


def interval_text(doc: Mapping[str, Any], digits: int = 4) -> str:
    """``lo to hi`` of the 95% interval, followed by "(uninformative at this budget)" when it was
    wider than the outcome's whole range before clipping.

    >>> interval_text({"ci95": [0.1, 0.3]})
    '0.1 to 0.3'
    >>> interval_text({"interval": {"lo": -1.0, "hi": 1.0, "uninformative": True,
    ...                             "note": "uninformative at this budget"}})
    '-1 to 1 (uninformative at this budget)'
    """
    lo, hi = interval_ends(doc)
    text = f"{lo:.{digits}g} to {hi:.{digits}g}"
    iv = doc.get("interval") or {}
    return f"{text} ({iv['note']})" if iv.get("uninformative") else text
