"""Start-up time of the ``dpate`` commands, beside ``python -c pass`` and a bare ``import prefect``.

Each command runs in a fresh interpreter (``python -m dpate.cli ...``) on a small study written to a
temporary folder (two CSV sites of 250 records, their ledgers created first); the figure is the
best of ``--repeats`` wall times after one warm-up run (file cache warm), and its ratio to
``python -c pass`` measured in the same run, with the least CPU time (user + system) of those runs,
which other processes on a loaded machine inflate less than the wall time;
``import typer, rich.console`` is the floor of any command of this command line. Commands that
run no flow never import Prefect (checked here: ``-X importtime`` of each command lists no
``prefect`` module).

    python bench/bench_cli_startup.py [--repeats 5]

Results: docs/reference/benchmarks.md, "Command start-up".
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_study(root: Path, n: int = 250) -> Path:
    rng = np.random.default_rng(1)
    blocks = []
    for site in ("north", "south"):
        w = (rng.random(n) < 0.5).astype(int)
        x = rng.integers(0, 3, n)
        y = np.clip(0.3 + 0.1 * x + 0.2 * w + rng.normal(0, 0.1, n), 0, 1)
        (root / f"{site}.csv").write_text(
            "w,y,x\n" + "".join(f"{w[i]},{y[i]:.4f},{x[i]}\n" for i in range(n)), "utf-8"
        )
        blocks.append(
            f'\n[[sites]]\nid = "{site}"\ndata = "{site}.csv"\nepsilon = "1"\ndelta = "1e-6"\n'
            f'lifetime_cap = {{ epsilon = "5", delta = "1e-4" }}\n'
        )
    spec = root / "study.toml"
    spec.write_text(
        'spec_version = 1\nstudy_id = "bench"\ndesign = "observational"\n'
        'estimator = "smooth_matching"\nreports = "published"\n\n[treatment]\ncolumn = "w"\n\n'
        '[outcome]\ncolumn = "y"\nbound = 1.0\n\n[[covariates]]\nkind = "categorical"\n'
        'column = "x"\nlevels = [0, 1, 2]\n' + "".join(blocks),
        "utf-8",
    )
    return spec


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def best(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, float]:
    """The least wall time and the least CPU time (user + system) of ``repeats`` runs."""
    subprocess.run(argv, env=env, capture_output=True, check=False)  # warm-up
    times, cpus = [], []
    for _ in range(repeats):
        c0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
        cpus.append(_children_cpu() - c0)
    return min(times), min(cpus)


def imports_prefect(argv: list[str], env: dict[str, str]) -> bool:
    r = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True
    )
    return any(
        line.rstrip().endswith((" prefect", " prefect.main")) for line in r.stderr.splitlines()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = str(write_study(root))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPATE_")}
        env.update(DPATE_HOME=str(root / "home"), PREFECT_HOME=str(root / "prefect"))
        dpate = [py, "-m", "dpate.cli"]
        for site in ("north", "south"):
            subprocess.run(
                [*dpate, "ledger", "init", site, "--epsilon", "5", "--delta", "1e-4"],
                env=env,
                capture_output=True,
                check=True,
            )
        cases = [
            ("python -c pass", [py, "-c", "pass"], None),
            ("python -c 'import prefect'", [py, "-c", "import prefect"], None),
            (
                "python -c 'import typer, rich.console' (the floor)",
                [py, "-c", "import typer, rich.console"],
                None,
            ),
            ("dpate --help", [*dpate, "--help"], 0.3),
            ("dpate ledger show north", [*dpate, "ledger", "show", "north"], 0.5),
            (
                "dpate plan (2 sites)",
                [*dpate, "plan", spec, "--n", "north=250", "--n", "south=250"],
                1.5,
            ),
            ("dpate check (2 sites, 250 records each)", [*dpate, "check", spec], 1.5),
        ]
        base = None
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(
            f"{'command':<44} {'best s':>8} {'x pass':>8} {'cpu s':>8} {'target s':>9}  "
            "prefect imported"
        )
        for label, argv, target in cases:
            t, cpu = best(argv, env, args.repeats)
            base = base or t
            pf = "" if argv[1] == "-c" else ("yes" if imports_prefect(argv, env) else "no")
            tgt = "" if target is None else f"{target:.1f}"
            print(f"{label:<44} {t:8.3f} {t / base:8.1f} {cpu:8.3f} {tgt:>9}  {pf}")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
