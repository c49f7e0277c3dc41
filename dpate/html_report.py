"""The study report: a self-contained HTML page from a published result (public values only).

A forest plot (PNG embedded as base64; matplotlib's Agg backend) of every site's DP estimate
with its 95% CI, the sites the aggregator chose, the combined estimate and CI, and each site's
privacy spend: this release's ``(epsilon, delta)`` and its lifetime spend against its cap after
this release, as its report published it (``lifetime_spend``); for a site whose report did not
carry it (version 1), the site's ledger where it is reachable from here (the site's own machine,
or the demo), marked as read now.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from pathlib import PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from dpate.ledger import SiteSpend
from dpate.schemas.result import ReleasedSite, SiteResult, StudyResult, spend_text

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

#: the page's fixed explanation of what each number is (DP release, public constant, ledger)
_WHAT_THESE_NUMBERS_ARE = """<h2>What these numbers are</h2>
<ul>
<li><b>Differentially private releases</b>: each site's estimate (tau), its variance and its 95%
interval. The combined estimate, its variance and interval, the weights and the choice of sites
are computed from those releases only (post-processing: no further privacy cost).</li>
<li><b>Public design constants</b>, fixed before any data were seen and not noised: each site's
N, each release's epsilon and delta, and the outcome bound B and covariate bins of the study
spec.</li>
<li><b>The site's own ledger</b>: the lifetime spend against the lifetime cap, as the site's report
published it right after this release (the sum of the spec budgets of the releases its ledger has
reserved, and the cap: public amounts, not data), or, for an older report without it, read from the
site's privacy ledger where it is reachable from here; it is the site's accounting, not a
release.</li>
</ul>
"""


def render_html(
    result: StudyResult, result_uri: str, spends: Mapping[str, SiteSpend | None]
) -> str:
    """The self-contained page of ``result``; ``spends`` holds each site's lifetime spend where
    its ledger is reachable from here (None, or no entry, where it is not), shown only for a
    site whose report published none."""
    png = base64.b64encode(forest_plot_png(result)).decode()
    e = html.escape
    rows = []
    for s in result.sites:
        cells = _site_cells(s, spends.get(s.site_id))
        rows.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in cells) + "</tr>")
    estimand = f"<p>{e(result.estimand_text())}.</p>\n" if result.estimand else ""
    forest = f'<img alt="forest plot" src="data:image/png;base64,{png}">'
    plots = _beside(forest, _balance_section(result))
    partial = "" if result.complete else "<p><b>Partial:</b> not every site reported.</p>"
    if result.answered:
        headline = (
            f"<b>{e(result.aggregator)}</b> estimate <b>{_fmt(result.estimate)}</b>,\n"
            f"95% CI {e(result.interval_text(brief=True))} (variance {_fmt(result.variance)})"
        )
    else:
        headline = f"<b>No answer at this budget</b>: {e(result.no_answer_why())}"
    uninformative = ""
    if result.answered and result.uninformative:
        uninformative = (
            f"<p><b>Uninformative at this budget:</b> {e(result.uninformative_why())} "
            "(<code>dpate plan</code> predicts the budget a study needs).</p>"
        )
    elif result.answered and result.noise_dominated:
        uninformative = (
            f"<p><b>Mostly privacy noise:</b> {e(result.noise_why())}; more budget would narrow "
            "the interval (<code>dpate plan</code> predicts it).</p>"
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>dpate report: {e(result.study_id)} round {e(result.round)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3em .6em; }}
th {{ background: #f2f2f2; }} .est {{ font-size: 1.3em; }}
</style></head><body>
<h1>Study {e(result.study_id)}, round {e(result.round)}</h1>
<p class="est">{headline}</p>
{estimand}{uninformative}{partial}
<p>Sites used: {e(", ".join(result.used) or "none")}</p>
{plots}
<h2>Sites</h2>
<table><tr>{"".join(f"<th>{e(h)}</th>" for h in _SITE_COLUMNS)}</tr>
{"".join(rows)}
</table>
{_WHAT_THESE_NUMBERS_ARE}<p>Study spec hash <code>{e(result.spec_hash)}</code>, software
{e(result.software_version)}. Result: <code>{e(source_label(result, result_uri))}</code>.</p>
</body></html>
"""


def _beside(plot: str, balance: str) -> str:
    """The forest plot, with the balance tables beside it when the sites published any."""
    if not balance:
        return plot
    style = "display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start"
    return f'<div class="plots" style="{style}">{plot}\n{balance}</div>'


def _balance_section(result: StudyResult) -> str:
    """The sites' DP covariate-balance tables (``[balance]``), one column per site: the
    standardized mean difference of each covariate (or level) between the arms before, and
    within strata; "" when no site published one."""
    sites, rows = result.balance_rows()
    if not sites:
        return ""
    e = html.escape
    head = "".join(f"<th>{e(s)}</th>" for s in sites)
    body = "".join(
        f"<tr><td>{e(c)}</td><td>{e(lev)}</td>"
        + "".join(f"<td>{e(x)}</td>" for x in cells)
        + "</tr>"
        for c, lev, cells in rows
    )
    return (
        '<div class="balance"><h2>Covariate balance (DP)</h2>\n'
        "<p>Standardized mean difference between treated and control, before / within strata "
        "(|SMD| below 0.1 is the usual mark of balance; within strata of every covariate it is 0 "
        "by construction). Each site's table is a differentially private release of its own "
        "(its epsilon is in the site's report).</p>\n"
        f"<table><tr><th>covariate</th><th>level</th>{head}</tr>\n{body}</table></div>"
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
