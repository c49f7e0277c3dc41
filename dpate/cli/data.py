"""``dpate data``: the paper's data sets, how to get them, and their site splits.

``dpate data fetch [NAME...] [--from DIR] [--dest DIR]`` downloads the public data sets (ist, star,
ihdp, lalonde; default all) from their original sources, checks each file's pinned sha256 and stores
them in the data directory (``$DPATE_DATA_DIR``, else ``$XDG_DATA_HOME/dpate/data``, else
``~/.local/share/dpate/data``; ``--dest`` overrides it). ``--from DIR`` copies from a local mirror
with the same layout (``DIR/<name>/<file>``) instead of the network. A file with another checksum is
refused and nothing of its data set is written (:mod:`dpate.data.fetch`).

``dpate data describe NAME [--split S] [--sites J] [--seed K]`` prints N, N_t, N_c and |X| for a
data set (ist, star, ihdp, lalonde, synth) and the sizes of each site under a split:

- ``--split natural`` (STAR's default): the data set's own sites (STAR: entry-grade urbanicity);
- ``--split equal --sites J``: a random equal split into J sites (the paper's two-site setting);
- ``--split 3:2:1`` (or ``1:1:1``, ``9:9:2``, ``18:1:1``, any ``a:b:...``): random proportions;
- ``--split none``: one site.

``dpate data extracts star OUT_DIR`` writes the example site extracts of the deployment guide's
study (docs/how-to/deploying.md): each STAR site's records as ``OUT_DIR/<site>/star.parquet``
(:mod:`dpate.data.extracts`), from the data directory ``dpate data fetch star`` fills.

These are public research data sets, so per-site arm sizes are shown; never run this on a site's
private records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpate.cli.errors import TYPER_OPTIONS

data_app = typer.Typer(
    **TYPER_OPTIONS,
    help="The paper's data sets: fetch them, describe them and their site splits, write the "
    "deployment guide's example site extracts.",
    no_args_is_help=True,
)
console = Console()


@data_app.command("fetch")
def fetch(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="NAME", help="data sets to fetch: ist, star, ihdp, lalonde (default: all four)"
        ),
    ] = None,
    mirror: Annotated[
        Path | None,
        typer.Option(
            "--from", help="copy from a local mirror DIR/<name>/<file> instead of downloading"
        ),
    ] = None,
    dest: Annotated[
        Path | None,
        typer.Option(help="where to store them (default: the data directory the loaders read)"),
    ] = None,
) -> None:
    """Download (or copy from --from DIR) the public data sets, verify their sha256, store them."""
    from dpate.data.datasets import data_dir
    from dpate.data.fetch import FetchError, fetch_datasets

    target = dest if dest is not None else data_dir()
    if mirror is not None and not mirror.is_dir():
        console.print(f"[red]--from {escape(str(mirror))} is not a folder[/red]")
        raise typer.Exit(2)
    try:
        done = fetch_datasets(names, target, mirror=mirror)
    except (FetchError, ValueError) as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    table = Table(title=f"data directory: {target}")
    for col in ("data set", "file", "sha256", "status"):
        table.add_column(col, overflow="fold")
    for f in done:
        table.add_row(f.dataset, f.name, "verified", f.status)
    console.print(table)


@data_app.command("extracts")
def extracts(
    name: Annotated[str, typer.Argument(help="the data set whose sites to write: star")],
    out_dir: Annotated[Path, typer.Argument(help="folder for OUT_DIR/<site>/<file>")],
) -> None:
    """Write the example site extracts of the deployment guide: one file per site."""
    from dpate.data.datasets import DataUnavailableError
    from dpate.data.extracts import EXTRACTS, write_star_extracts

    if name.lower() not in EXTRACTS:
        console.print(
            f"[red]no example site extracts for {escape(repr(name))}: the data sets with them are "
            f"{', '.join(EXTRACTS)}[/red]"
        )
        raise typer.Exit(2)
    try:
        paths = write_star_extracts(out_dir)
    except DataUnavailableError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(int(exc.exit_code)) from None
    table = Table(title=f"{name.lower()} site extracts (public research data)")
    for col in ("site", "file"):
        table.add_column(col, overflow="fold")
    for site, path in paths.items():
        table.add_row(site, str(path))
    console.print(table)


@data_app.command("describe")
def describe(
    name: Annotated[str, typer.Argument(help="ist, star, ihdp, lalonde or synth")],
    split: Annotated[
        str | None,
        typer.Option(
            help="natural | equal | none | proportions such as 3:2:1 (default: natural for "
            "STAR, else none; 'equal' when --sites is given)",
        ),
    ] = None,
    sites: Annotated[
        int | None, typer.Option("--sites", "-J", help="number of sites for 'equal'")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the random split (and of Synth)")] = 0,
    replication: Annotated[int, typer.Option(help="IHDP replication (1..10)")] = 1,
    n: Annotated[int, typer.Option("--n", help="Synth: number of records")] = 10_000,
    domain_size: Annotated[int, typer.Option("--domain-size", help="Synth: |X|")] = 100,
    a: Annotated[
        float | None, typer.Option("-a", help="Synth: imbalance a (default: U[-1, 1])")
    ] = None,
) -> None:
    """Print N, N_t, N_c, |X| and per-site sizes of a data set under a split."""
    import numpy as np

    from dpate.data.datasets import DATASETS, DataUnavailableError, load_dataset

    key = name.lower()
    options: dict[str, object] = {}
    if key == "ihdp":
        options["replication"] = replication
    elif key == "synth":
        options.update(n=n, domain_size=domain_size, a=a, seed=seed)
    try:
        ds = load_dataset(key, **options)
    except DataUnavailableError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/red] (data sets: {', '.join(DATASETS)})")
        raise typer.Exit(2) from None

    mode = split or ("equal" if sites else ("natural" if ds.sites is not None else "none"))
    try:
        parts, labels = _split(ds, mode, sites, seed)
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None

    console.print(
        f"[bold]{ds.name}[/bold] ({ds.design}): N = {ds.n:,}, N_t = {ds.n_treated:,}, "
        f"N_c = {ds.n_control:,}, |X| = {ds.domain_size}, B = {ds.bound:g}"
    )
    console.print(f"[dim]{ds.note}; outcomes clipped to [0, B]: {ds.clipped}[/dim]")
    seeded = "" if mode in ("natural", "none") else f", seed {seed}"
    table = Table(title=f"split: {mode}{seeded}")
    for col in ("site", "N", "N_t", "N_c", "share"):
        table.add_column(col, justify="right" if col != "site" else "left", overflow="fold")
    for label, idx in zip(labels, parts, strict=True):
        nt = int(np.count_nonzero(ds.w[idx]))
        table.add_row(
            str(label), f"{idx.size:,}", f"{nt:,}", f"{idx.size - nt:,}", f"{idx.size / ds.n:.3f}"
        )
    console.print(table)


def _split(ds: Any, mode: str, sites: int | None, seed: int) -> tuple[list[Any], list[str]]:
    """The index arrays and labels of ``ds``'s sites under the split ``mode``."""
    import numpy as np

    from dpate_core.synth import parse_proportions, split_equal, split_proportions

    if mode == "natural":
        return list(ds.site_indices()), [str(name) for name in ds.site_names]
    if mode == "none":
        return [np.arange(ds.n)], ["all"]
    if mode == "equal":
        if not sites or sites < 1:
            raise ValueError("--split equal needs --sites J (J >= 1)")
        parts = split_equal(ds.n, sites, seed)
    else:
        parts = split_proportions(ds.n, parse_proportions(mode), seed)
    return list(parts), [f"site-{j + 1}" for j in range(len(parts))]
