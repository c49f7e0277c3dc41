"""What the commands print: the consoles, a study's result and failed sites, error exits."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpate.cli.errors import classify, from_exception, print_failures
from dpate.errors import DpateError

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


def print_result(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> None:
    """The table, the combined estimate and where the result is (``result["uri"]``, if given)."""
    from dpate.schemas.reports import StudyResult

    typed = StudyResult.of(result)
    errors = {r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")}
    print_table(typed.table(errors), typed.site_lines(errors), typed.site_notes(errors))
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
