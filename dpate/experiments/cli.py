"""``dpate experiments [--quick] [--out DIR]``: section 4 of the paper, reproduced.

Light at import (the ``dpate`` command line stays quick); the work is in
:mod:`dpate.experiments.run`.
Simulations only: the noise comes from a seeded numpy generator (``--seed``), not a secure source,
and nothing here is a release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def experiments(
    quick: bool = typer.Option(
        False, "--quick", help="30 repetitions over 3 splits, a smaller sensitivity grid"
    ),
    out: Annotated[Path, typer.Option(help="folder for tables and figures")] = Path(
        "experiment-results"
    ),
    seed: int = typer.Option(20240229, help="seed of the simulation generator (not private)"),
    reps: int | None = typer.Option(None, help="repetitions per point (default 100, quick 30)"),
    figures: bool = typer.Option(True, help="draw the PNG figures"),
) -> None:
    """Reproduce the paper's experiments (IST, STAR, Synth, IHDP, Lalonde): MAE per alpha and
    combiner, smooth sensitivity on Synth, and each claim of the paper checked with numbers."""
    from dpate.experiments.run import run_experiments
    from dpate.experiments.settings import ExperimentSettings

    base = ExperimentSettings.quick() if quick else ExperimentSettings()
    options = {"seed": seed, "figures": figures}
    if reps is not None:
        if reps < 1:
            raise typer.BadParameter(f"--reps ({reps}) must be at least 1")
        options["reps"] = reps
        options["splits"] = min(base.splits, reps)  # at least one repetition per split
    settings = type(base)(**{**base.__dict__, **options})
    from dpate.data.datasets import DataUnavailableError

    try:
        result = run_experiments(settings, out)
    except DataUnavailableError as exc:  # a fresh clone: the one command that gets the data
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    table = Table(title="The paper's claims, this run")
    for col in ("claim", "reproduced", "numbers"):
        table.add_column(col, overflow="fold")
    for c in result["claims"]:
        table.add_row(c.name, "yes" if c.holds else "[red]no[/red]", c.detail)
    console.print(table)
    t = result["timings"]
    console.print(
        f"{len(result['rows'])} points, {settings.reps} repetitions each, in "
        f"{t['total_s']:.1f} s; table, claims, timings{' and figures' if figures else ''} "
        f"in {out}/"
    )
