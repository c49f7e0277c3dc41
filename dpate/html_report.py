"""The study report: a self-contained HTML page from a published result (public values only).

A forest plot (PNG embedded as base64; matplotlib's Agg backend) of every site's DP estimate
with its 95% CI, the sites the aggregator chose, the combined estimate and CI, and each site's
privacy spend: this release's ``(epsilon, delta)`` and its lifetime spend against its cap after
this release, as its report published it (``lifetime_spend``); for a site whose report did not
carry it (version 1), the site's ledger where it is reachable from here (the site's own machine,
or the demo), marked as read now. The page is the Jinja2 template ``dpate/templates/report.html.j2``
with autoescape on: every value from a result is escaped.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import PurePosixPath
from urllib.parse import urlsplit, urlunsplit

import jinja2

from dpate.ledger import SiteSpend
from dpate.schemas.reports import ReleasedSite, SiteResult, StudyResult, spend_text

__all__ = ["forest_plot_png", "render_html", "source_label"]


def forest_plot_png(result: StudyResult) -> bytes:
    """Every released site's DP estimate with its 95% interval (grey: not used), and the combined
    estimate and interval as a diamond (PNG, matplotlib's Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sites = result.released
    rows = len(sites) + 1
    fig, ax = plt.subplots(figsize=(7.0, 0.55 * rows + 1.2), dpi=110)
    labels = []
    for i, s in enumerate(sites):
        y = rows - 1 - i
        used = s.status == "used"
        colour = "#1f5fa8" if used else "#9a9a9a"
        ends = s.interval_ends()
        if s.tau is not None and ends is not None:  # an unresolved site has nothing to draw
            ax.plot(list(ends), [y, y], color=colour, lw=2)
            ax.plot(s.tau, y, "s", color=colour, ms=6)
        labels.append(
            f"{s.site_id} (N={s.n}, eps={s.epsilon})"
            + ("" if s.resolved else " unresolved")
            + ("" if used else " *")
        )
    ends, est = result.interval_ends(), result.estimate
    if ends is not None and est is not None:
        lo, hi = ends
        ax.fill([lo, est, hi, est], [0, 0.25, 0, -0.25], color="#b22222")
        ax.axvline(est, color="#b22222", lw=0.8, ls=":")
    ax.axvline(0.0, color="black", lw=0.6)
    ax.set_yticks([*list(range(rows - 1, 0, -1)), 0])
    combined = "combined" if result.answered else "no answer"
    ax.set_yticklabels([*labels, f"{result.aggregator} ({combined})"])
    ax.set_xlabel("average treatment effect (95% CI)")
    ax.set_title(f"{result.study_id}, round {result.round}  (* = not used)", fontsize=10)
    ax.set_ylim(-0.7, rows - 0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:.4g}"


def _lifetime(s: SiteResult, spend: SiteSpend | None) -> str:
    """The published spend after this release; else the site's ledger read now, if reachable."""
    if isinstance(s, ReleasedSite) and s.lifetime_spend is not None:
        return s.spend_text()
    if spend is None or spend.cap is None:
        return "not published; ledger not reachable from here"
    return spend_text(spend.spent, spend.cap) + " (site ledger, now)"


def _site_cells(s: SiteResult, spend: SiteSpend | None) -> list[str]:
    if isinstance(s, ReleasedSite):
        return [
            s.site_id,
            s.status,
            s.tau_text(4, fixed=False),
            s.interval_text(),
            _fmt(s.variance),
            str(s.n),
            f"{s.weight:.3f}",
            f"{s.epsilon} / {s.delta}",
            _lifetime(s, spend),
            s.reason,
        ]
    return [s.site_id, s.status, "", "", "", "", "", "", _lifetime(s, spend), s.reason]


#: the columns of the page's site table (one row per site: :func:`_site_cells`)
_SITE_COLUMNS = (
    "site",
    "status",
    "tau",
    "95% CI",
    "variance",
    "N",
    "weight",
    "this release: epsilon / delta",
    "lifetime spend of cap (after this release)",
    "why",
)


@cache
def _template() -> jinja2.Template:
    """The page's template (``dpate/templates/report.html.j2``), every value HTML-escaped."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dpate", "templates"),
        autoescape=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = _fmt
    return env.get_template("report.html.j2")


def render_html(
    result: StudyResult,
    result_uri: str,
    spends: Mapping[str, SiteSpend | None],
    balance_values: Mapping[str, Sequence[float]] | None = None,
) -> str:
    """The self-contained page of ``result``; ``spends`` holds each site's lifetime spend where
    its ledger is reachable from here (None, or no entry, where it is not), shown only for a
    site whose report published none; ``balance_values``: each numeric covariate's public level
    values (the spec's :attr:`~dpate.schemas.spec.StudySpec.balance_values`), which give its
    balance row's noise (:meth:`~dpate.schemas.reports.StudyResult.balance_rows`)."""
    return _template().render(
        result=result,
        balance_values=balance_values or {},
        png=base64.b64encode(forest_plot_png(result)).decode(),
        columns=_SITE_COLUMNS,
        rows=[[str(c) for c in _site_cells(s, spends.get(s.site_id))] for s in result.sites],
        source=source_label(result, result_uri),
    )


def source_label(result: StudyResult, result_uri: str) -> str:
    """How the footer names the result document: a URL (``s3://...``, ``https://...``) as is,
    without any user or password; a local path (or ``file://``) only as the object's key under
    the storage root (``<study>/results/<round>.json``), else its basename, so that no local
    absolute path is embedded in a page meant to be shared."""
    parts = urlsplit(result_uri)
    if len(parts.scheme) > 1 and parts.scheme != "file":  # one letter: a Windows drive
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    path = parts.path if parts.scheme == "file" else result_uri
    path = path.replace("\\", "/")
    key = f"{result.study_id}/results/{result.round}.json"
    if path == key or path.endswith("/" + key):
        return key
    return PurePosixPath(path).name
