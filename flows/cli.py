"""The ``dpate`` command line (typer). Heavy imports (Prefect) happen inside the commands."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from flows.cli_data import data_app

app = typer.Typer(help="Differentially private multi-site ATE estimation.", no_args_is_help=True)
console = Console()
app.add_typer(data_app, name="data")


@app.callback()
def main() -> None:
    """Differentially private multi-site ATE estimation."""


@app.command()
def demo(
    seed: int = typer.Option(2026, help="seed of the synthetic data (noise stays secure)"),
) -> None:
    """A three-site synthetic observational study: SmoothDPMatching at each site, MVAgg on top."""
    import numpy as np

    from dpate_core import aggregate, smooth_dp_matching

    rng = np.random.default_rng(seed)
    sizes, budgets = (6000, 3000, 1000), ("1", "1/2", "2")
    ests = []
    table = Table(title="dpate demo: sites")
    for col in ("site", "N", "epsilon", "tau_dp", "variance"):
        table.add_column(col, justify="right")
    for j, (n, eps) in enumerate(zip(sizes, budgets, strict=True)):
        x = rng.integers(0, 20, n)
        w = (rng.random(n) < 1 / (1 + np.exp(-(2 * x / 19 - 1)))).astype(np.int8)
        y = 0.2 * x / 19 + 0.5 * w + 0.1 * rng.random(n)
        est = smooth_dp_matching(w, y, x, bound=1.0, epsilon=eps, delta="1e-5", domain_size=20)
        ests.append(est)
        table.add_row(f"site-{j + 1}", str(n), eps, f"{est.tau:.4f}", f"{est.variance:.2e}")
    console.print(table)
    res = aggregate("mvagg", [e.tau for e in ests], [e.n for e in ests], [e.variance for e in ests])
    lo, hi = res.ci95
    used = ", ".join(f"site-{j + 1}" for j in res.used)
    console.print(
        f"MVAgg estimate {res.estimate:.4f} (95% CI {lo:.4f} to {hi:.4f}); sites used: {used}"
    )


if __name__ == "__main__":  # pragma: no cover
    app()
