"""What the commands print: the consoles, a study's result and failed sites, error exits."""

from __future__ import annotations

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


def sites_table(result: StudyResult, runs: list[dict[str, Any]] | None = None) -> Table:
    """The result's table of sites, a failed run's error in place of the published reason."""
    return result.table({r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")})


def _fits(table: Table) -> bool:
    """Whether ``table`` at its natural width (every cell on one line) fits the console."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(10**4), table).maximum
    return natural <= console.width


def print_result(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> None:
    """The table, the combined estimate and where the result is (``result["uri"]``, if given)."""
    from dpate.schemas.reports import StudyResult

    typed = StudyResult.of(result)
    table = sites_table(typed, runs)
    if _fits(table):
        console.print(table)
    else:  # a narrow or piped console (80 columns): one paragraph per site, not a folded table
        errors = {r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")}
        console.print(f"[bold]{escape(str(table.title))}[/bold]", highlight=False)
        for line in typed.site_lines(errors):
            console.print(f"- {line}", highlight=False, markup=False)
        for note in typed.site_notes(errors):
            console.print(note, highlight=False, markup=False)
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
    if "uri" in result:
        console.print(f"result: {result['uri']}")


def print_site_failures(runs: list[dict[str, Any]]) -> int:
    """Each failed site's cause, one short block each, on stderr; returns how many failed."""
    failures = [classify(r.get("error") or "", r["site_id"]) for r in runs if not r.get("ok")]
    print_failures(failures, err)
    return len(failures)
