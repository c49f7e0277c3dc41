"""``dpate report``: the self-contained HTML report of a published result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dpate.cli.environment import SpecArg, load_spec
from dpate.cli.output import console, fail
from dpate.errors import ExitCode

__all__ = ["report_cmd", "write_report"]


def write_report(spec: str, round: str | None, storage: str | None, out: Path) -> Path:
    """Render the round's published result, with each local site's lifetime spend, to ``out``."""
    from dpate.settings import resolve_site, resolve_study
    from dpate.tasks.aggregate import published_result

    ctx = resolve_study(spec, round, storage)
    found = published_result(ctx)
    if found is None:
        raise fail(
            RuntimeError(
                f"no result of study {ctx.study_id} round {ctx.round} is published under "
                f"{ctx.storage_url}: run `dpate aggregate {spec}` first"
            ),
            int(ExitCode.REPORT),
        )
    uri, result = found
    spends: dict[str, Any] = {}
    for site in ctx.site_ids:
        try:
            url = resolve_site(spec, site, round).ledger_url
        except (ValueError, KeyError):  # no ledger configured here: not this machine's site
            spends[site] = None
            continue
        spends[site] = _local_spend(url, site)
    from dpate.html_report import render_html
    from dpate.schemas.reports import StudyResult

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        render_html(StudyResult.of(result), uri, spends, ctx.spec.balance_values), encoding="utf-8"
    )
    return out


def _local_spend(url: str, site: str) -> Any:
    """The site's lifetime spend when its ledger is reachable from here (never created)."""
    from dpate.ledger import LedgerError, PrivacyLedger

    try:
        with PrivacyLedger(url) as led:
            return led.spend(site)
    except (LedgerError, Exception):
        return None


def report_cmd(
    spec: SpecArg,
    round: Annotated[
        str | None,
        typer.Option(help="round label (default: the spec's 'release')", show_default=False),
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="publication root URL", show_default=False)
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path(
        "dpate-report.html"
    ),
) -> None:
    """A self-contained HTML report: forest plot, chosen sites, estimate and CI, privacy spend."""
    load_spec(spec)  # a spec error ends the command here with its own exit code
    path = write_report(spec, round, storage, out)
    console.print(f"report written: {path}")
