"""What the commands print: the consoles, a study's result and failed sites, error exits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpate.cli.errors import classify, from_exception, print_failures
from dpate.errors import DpateError

if TYPE_CHECKING:
    from dpate.schemas.reports import StudyResult

console = Console()
err = Console(stderr=True)


def fail(exc: BaseException, code: int | None = None) -> typer.Exit:
    """Print ``error: <exc>`` on stderr (a :class:`~dpate.errors.DpateError` with its cause);
    returns the exit to raise: ``code``, else the error's own (:func:`dpate.errors.exit_code_of`)."""
    failure = from_exception(exc)
    if isinstance(exc, DpateError):
        print_failures([failure], err)
    else:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(int(failure.code if code is None else code))


def plain(text: str) -> None:
    """Print without wrapping (hashes and ids are copied whole)."""
    console.print(text, soft_wrap=True, highlight=False, markup=False)


def print_table(
    table: Table, lines: list[str], notes: list[str] | None = None, on: Console | None = None
) -> None:
    """``table`` on the console ``on`` (default :data:`console`) when it fits at its natural width
    (every cell on one line); else, on a narrow or piped console (80 columns), its title,
    ``lines`` (one per row, the same content) and ``notes`` (what its caption says), never a
    table folded letter by letter into its cells."""
    from rich.measure import Measurement

    on = on or console
    natural = Measurement.get(on, on.options.update_width(10**4), table).maximum
    if natural <= on.width:
        on.print(table)
        return
    on.print(f"[bold]{escape(str(table.title))}[/bold]", highlight=False)
    for line in lines:
        on.print(f"- {line}", highlight=False, markup=False)
    for note in notes or []:
        on.print(note, highlight=False, markup=False)


def sites_table(result: StudyResult, errors: Mapping[str, str | None] | None = None) -> Table:
    """The CLI's table of sites (rich); ``errors`` (site -> message) replaces the published
    reason of a site whose run failed here. A flagged site interval says its flag in its cell
    ("mostly privacy noise") and why in the caption, so the column stays narrow."""
    from dpate.schemas.reports import ReleasedSite

    table = Table(title=f"{result.study_id}, round {result.round}: sites")
    cols = (
        "site",
        "N",
        "epsilon",
        "delta",
        "tau (DP)",
        "95% CI",
        "lifetime eps",
        "lifetime delta",
    )
    for col in (*cols, "status"):
        # overflow "fold": a narrow or piped console wraps a cell, never cuts it ("hospi…")
        left = col in ("site", "status")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    for s in result.sites:
        if isinstance(s, ReleasedSite):
            life = s.lifetime_spend
            table.add_row(
                s.site_id,
                str(s.n),
                s.epsilon,
                s.delta,
                s.tau_text(),
                s.interval_text(brief=True),
                "" if life is None else f"{life.spent.epsilon} of {life.cap.epsilon}",
                "" if life is None else f"{life.spent.delta} of {life.cap.delta}",
                s.status.replace("_", " "),
            )
        else:
            table.add_row(s.site_id, "", "", "", "", "", "", "", s.status)
    notes = site_notes(result, errors)
    if notes:
        table.caption = "\n".join(notes)
    return table


def site_lines(result: StudyResult) -> list[str]:
    """The table's rows as one line per site (its notes are :func:`site_notes`): what a
    console too narrow for the table prints (a piped one is 80 columns), readable at any
    width."""
    from dpate.schemas.reports import ReleasedSite

    lines = []
    for s in result.sites:
        if isinstance(s, ReleasedSite):
            life = "" if s.lifetime_spend is None else f"; lifetime spend {s.spend_text()}"
            estimate = (
                "unresolved"
                if s.tau is None
                else f"tau {s.tau_text()}, 95% CI {s.interval_text(brief=True)}"
            )
            lines.append(
                f"{s.site_id} ({s.status.replace('_', ' ')}): {estimate}; N {s.n}; this "
                f"release epsilon {s.epsilon}, delta {s.delta}{life}"
            )
        else:
            lines.append(f"{s.site_id} ({s.status})")
    return lines


def site_notes(result: StudyResult, errors: Mapping[str, str | None] | None = None) -> list[str]:
    """What the table of sites says under it: why a site is missing, rejected or excluded
    (``errors``, site -> message, in place of the published reason of a site whose run
    failed here), why a site interval is flagged, why a site was not used, the estimand, the
    design's cautions and its notes on reading the intervals."""
    from dpate.schemas.reports import ReleasedSite

    errors = errors or {}
    notes = [
        f"{s.site_id}: {errors.get(s.site_id) or s.reason}"
        for s in result.sites
        if s.status in ("missing", "rejected", "excluded")
    ]
    notes += [
        f"{s.site_id}'s interval: {s.interval.note}"
        for s in result.sites
        if isinstance(s, ReleasedSite) and s.interval is not None and ": " in s.interval.note
    ]
    not_used = [s for s in result.sites if s.status == "not_used"]
    if not_used:
        notes.append(f"not used: {not_used[0].reason}")
    if result.estimand:
        notes.append(result.estimand_text())
    notes += [f"Caution: {c}" for c in result.cautions]
    notes += [f"Note: {n}" for n in result.notes]
    return notes


def print_result(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> None:
    """The table, the combined estimate and where the result is (``result["uri"]``, if given)."""
    from dpate.schemas.reports import StudyResult

    typed = StudyResult.of(result)
    errors = {r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")}
    print_table(sites_table(typed, errors), site_lines(typed), site_notes(typed, errors))
    if not typed.answered or typed.estimate is None or typed.variance is None:
        console.print(f"[bold]{typed.summary_text()}[/bold]", markup=True, highlight=False)
        console.print("[yellow]see `dpate plan` for the budget a study needs[/yellow]")
    else:
        console.print(
            f"[bold]{typed.aggregator} estimate {typed.estimate:.4f}[/bold] "
            f"(95% CI {typed.interval_text(brief=True)}; variance {typed.variance:.3g}); sites "
            f"used: {', '.join(typed.used)}"
        )
    if typed.answered and typed.uninformative:
        console.print(
            f"[yellow]the combined interval is uninformative at this budget: "
            f"{typed.uninformative_why()} (see `dpate plan`)[/yellow]"
        )
    elif typed.answered and typed.noise_dominated:
        console.print(
            f"[yellow]the combined interval mostly reflects privacy noise: {typed.noise_why()} "
            f"(more budget would narrow it; see `dpate plan`)[/yellow]"
        )
    if typed.misses_target and not typed.uninformative:
        console.print(
            f"[yellow]the combined interval is wider than the study's target: "
            f"{typed.target_why()} (`dpate plan` gives the budget that reaches it)[/yellow]"
        )
    if "uri" in result:
        console.print(f"result: {result['uri']}")


def print_site_failures(runs: list[dict[str, Any]]) -> int:
    """Each failed site's cause, one short block each, on stderr; returns how many failed."""
    failures = [classify(r.get("error") or "", r["site_id"]) for r in runs if not r.get("ok")]
    print_failures(failures, err)
    return len(failures)
