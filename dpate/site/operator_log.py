"""The site's operator log and the public form of a failed data check (no Prefect here).

Operator-only counts (rows dropped, values clipped) and the full text of a failed data check (its
counts and row positions) are not private releases: they go to the site-local operator log file
(the ``dpate.site.<site>`` logger, its file from ``DPATE_SITE_LOG``; :func:`operator_logger`),
which never propagates to Prefect's handlers or the root logger. What leaves the site is
:class:`SiteDataRejected`, naming columns and rules only (:func:`redacted_data_error`), or in a
deployed run only that the data was rejected.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from dpate.errors import DpateError, ExitCode
from dpate.schemas.site_data import SiteDataError
from dpate.settings import SiteContext

__all__ = [
    "SiteDataRejected",
    "operator_logger",
    "redacted_data_error",
    "site_file_logger",
    "unreadable_data_error",
]

#: The parent of every site's operator logger; never propagates (to Prefect or the root logger).
_OPERATOR_ROOT = logging.getLogger("dpate.site")
_OPERATOR_ROOT.propagate = False
_OPERATOR_ROOT.addHandler(logging.NullHandler())
_handlers_lock = threading.Lock()


def operator_logger(ctx: SiteContext) -> logging.Logger:
    """The site's operator logger: writes to the site-local file ``ctx.log_path`` only (never
    to a Prefect handler; ``propagate`` is off). Counts and row positions go here."""
    return site_file_logger(ctx.site_id, ctx.log_path)


def site_file_logger(site_id: str, log_path: str) -> logging.Logger:
    """The logger ``dpate.site.<site_id>``, writing to the file ``log_path`` only (the site's
    operator log; also the site runner's, for a refused run)."""
    log = logging.getLogger(f"dpate.site.{site_id}")
    log.propagate = False
    log.setLevel(logging.INFO)
    path = str(Path(log_path).expanduser().resolve())
    with _handlers_lock:
        if not any(getattr(h, "baseFilename", None) == path for h in log.handlers):
            for h in list(log.handlers):
                log.removeHandler(h)
                h.close()
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(handler)
    return log


class SiteDataRejected(DpateError, ValueError):
    """The site's data failed the spec's checks. Public: names columns and rules only; the counts
    and row positions are in the site's operator log."""

    exit_code = ExitCode.SITE_DATA
    cause = "invalid site data"


def redacted_data_error(ctx: SiteContext, exc: SiteDataError) -> SiteDataRejected:
    """The public form of a data check's failure. In a deployed run only that the data was
    rejected (which column and rule failed would tell the coordinator about the records, e.g.
    that a value lies past the spec's bound); in the operator's own local run, the columns and
    rules broken too, never a count or a row position (those are in the operator log)."""
    if ctx.deployed:
        return SiteDataRejected(
            f"site {ctx.site_id}: site data rejected, see the site's log. Nothing was reserved "
            f"or drawn"
        )
    seen: list[str] = []
    for p in exc.problems:
        line = f"column {p.column!r}: {p.rule}"
        if line not in seen:
            seen.append(line)
    what = "; ".join(seen) or "the data could not be read"
    return SiteDataRejected(
        f"site {ctx.site_id}: its data does not satisfy the study spec ({what}). Nothing was "
        f"reserved or drawn. The site's operator log (DPATE_SITE_LOG) has the details; fix the "
        f"extract, or the spec's levels/bins or 'missing'/'policy' settings if the data is right"
    )


def unreadable_data_error(ctx: SiteContext, exc: BaseException) -> SiteDataRejected:
    """A reader's failure (its message may quote a value): written to the operator log, made
    public by its type only."""
    operator_logger(ctx).error("site %s: reading the data failed: %r", ctx.site_id, exc)
    if ctx.deployed:  # even the type would tell the coordinator about the site's files
        return SiteDataRejected(
            f"site {ctx.site_id}: site data rejected, see the site's log. Nothing was reserved "
            f"or drawn"
        )
    return SiteDataRejected(
        f"site {ctx.site_id}: its data could not be read ({type(exc).__name__}); nothing "
        f"was reserved or drawn. The site's operator log (DPATE_SITE_LOG) has the details"
    )
