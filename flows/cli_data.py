"""``dpate data``: the paper's data sets and their site splits.

``dpate data describe NAME [--split S] [--sites J] [--seed K]`` prints N, N_t, N_c and |X| for a
data set (ist, star, ihdp, lalonde, synth) and the sizes of each site under a split:

- ``--split natural`` (STAR's default): the data set's own sites (STAR: entry-grade urbanicity);
- ``--split equal --sites J``: a random equal split into J sites (the paper's two-site setting);
- ``--split 3:2:1`` (or ``1:1:1``, ``9:9:2``, ``18:1:1``, any ``a:b:...``): random proportions;
- ``--split none``: one site.

These are public research data sets, so per-site arm sizes are shown; never run this on a site's
private records.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

data_app = typer.Typer(help="The paper's data sets and site splits.", no_args_is_help=True)
console = Console()


@data_app.command("describe")
def describe(
    name: str = typer.Argument(..., help="ist, star, ihdp, lalonde or synth"),
    split: str | None = typer.Option(
        None,
        help="natural | equal | none | proportions such as 3:2:1 (default: natural for STAR, "
        "else none; 'equal' when --sites is given)",
    ),
    sites: int | None = typer.Option(None, "--sites", "-J", help="number of sites for 'equal'"),
    seed: int = typer.Option(0, help="seed of the random split (and of Synth)"),
    replication: int = typer.Option(1, help="IHDP replication (1..10)"),
    n: int = typer.Option(10_000, "--n", help="Synth: number of records"),
    domain_size: int = typer.Option(100, "--domain-size", help="Synth: |X|"),
    a: float | None = typer.Option(None, "-a", help="Synth: imbalance a (default: U[-1, 1])"),
) -> None:
    """Print N, N_t, N_c, |X| and per-site sizes of a data set under a split."""
    import numpy as np

    from dpate_core.synth import parse_proportions, split_equal, split_proportions
    from schemas.datasets import DATASETS, DataUnavailableError, load_dataset

    key = name.lower()
    options: dict = {}
    if key == "ihdp":
        options["replication"] = replication
    elif key == "synth":
        options.update(n=n, domain_size=domain_size, a=a, seed=seed)
    try:
        ds = load_dataset(key, **options)
    except DataUnavailableError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    except ValueError as exc:
        console.print(f"[red]{exc}[/red] (data sets: {', '.join(DATASETS)})")
        raise typer.Exit(2) from None

    mode = split or ("equal" if sites else ("natural" if ds.sites is not None else "none"))
    try:
        if mode == "natural":
            parts = ds.site_indices()
            labels = list(ds.site_names)
        elif mode == "none":
            parts, labels = [np.arange(ds.n)], ["all"]
        elif mode == "equal":
            if not sites or sites < 1:
                raise ValueError("--split equal needs --sites J (J >= 1)")
            parts = split_equal(ds.n, sites, seed)
            labels = [f"site-{j + 1}" for j in range(len(parts))]
        else:
            parts = split_proportions(ds.n, parse_proportions(mode), seed)
            labels = [f"site-{j + 1}" for j in range(len(parts))]
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None

    console.print(
        f"[bold]{ds.name}[/bold] ({ds.design}): N = {ds.n:,}, N_t = {ds.n_treated:,}, "
        f"N_c = {ds.n_control:,}, |X| = {ds.domain_size}, B = {ds.bound:g}"
    )
    console.print(f"[dim]{ds.note}; outcomes clipped to [0, B]: {ds.clipped}[/dim]")
    seeded = "" if mode in ("natural", "none") else f", seed {seed}"
    table = Table(title=f"split: {mode}{seeded}")
    for col in ("site", "N", "N_t", "N_c", "share"):
        table.add_column(col, justify="right" if col != "site" else "left")
    for label, idx in zip(labels, parts, strict=True):
        nt = int(np.count_nonzero(ds.w[idx]))
        table.add_row(
            str(label), f"{idx.size:,}", f"{nt:,}", f"{idx.size - nt:,}", f"{idx.size / ds.n:.3f}"
        )
    console.print(table)
