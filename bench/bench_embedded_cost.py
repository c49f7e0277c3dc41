"""The embedded study's fixed cost (``dpate run`` on one machine) against a bare Prefect flow.

Measured in one run, each in a fresh interpreter, with the load average beside each figure:

* ``python -c pass`` and ``python -c "import prefect"``;
* a bare Prefect flow calling one task, on the ephemeral server (the same ``PREFECT_HOME``,
  already migrated by a first, separately reported run, and the same server settings as
  ``dpate run``: ``dpate.cli.environment.prefect_env``);
* ``dpate run`` of a tiny two-site study (250 records per site, smooth matching; fresh ledgers
  and publication root each time, so every run reserves, releases and publishes);
* to split the gap: ``import dpate.flows.study`` (the flow stack's imports), ``dpate check``
  (the pre-spend check outside Prefect: spec, every site's data and ledger), and the flow and
  task runs a ``dpate run`` records in Prefect's database (counted there after the last run).

Each figure is the least wall time and the least CPU time (user + system of the process and its
children: the ephemeral server runs in a child process) of ``--repeats`` runs; CPU time is the
steadier figure on a shared machine.

    python bench/bench_embedded_cost.py [--repeats 3]

Results: docs/reference/benchmarks.md, "Embedded study against a bare Prefect flow".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench_cli_startup import _children_cpu, write_study

from dpate.cli.environment import EMBEDDED_SERVICES_OFF

BARE_FLOW = """
from prefect import flow, task

@task
def one(x):
    return x + 1

@flow
def bare():
    return one(1)

assert bare() == 2
"""


def timed(argv: list[str], env: dict[str, str], prepare: Callable[[], None] | None = None):
    """(wall s, CPU s incl. children, load average) of one run; fails loudly."""
    if prepare is not None:
        prepare()
    load = os.getloadavg()[0]
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return wall, cpu, load


def best(argv, env, repeats, prepare=None):
    runs = [timed(argv, env, prepare) for _ in range(repeats)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def runs_recorded(prefect_home: Path) -> tuple[int, int]:
    """(flow runs, task runs) in the ephemeral server's database."""
    with sqlite3.connect(prefect_home / "prefect.db") as db:
        flows = db.execute("SELECT count(*) FROM flow_run").fetchone()[0]
        tasks = db.execute("SELECT count(*) FROM task_run").fetchone()[0]
    return int(flows), int(tasks)


def _when(value: str | None) -> float | None:
    """A time Prefect recorded (UTC; SQLite keeps it without its zone), in epoch seconds."""
    if value is None:
        return None
    t = datetime.fromisoformat(value)
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def timeline(prefect_home: Path, started: float, ended: float) -> None:
    """Where one ``dpate run`` spent its wall time, from the start and end times Prefect
    recorded for the flow and task runs it made (runs that started after ``started``)."""
    with sqlite3.connect(prefect_home / "prefect.db") as db:
        flows = db.execute(
            "SELECT f.name, r.start_time, r.end_time FROM flow_run r JOIN flow f "
            "ON r.flow_id = f.id"
        ).fetchall()
        tasks = db.execute("SELECT task_key, start_time, end_time FROM task_run").fetchall()
    runs = [(n, _when(a), _when(b)) for n, a, b in flows if a and (_when(a) or 0) >= started]
    study = [r for r in runs if r[0] == "study"]
    if not study:
        print("timeline: no study flow run recorded")
        return
    _, s0, s1 = study[0]
    assert s0 is not None and s1 is not None
    print(f"timeline of the last dpate run (wall {ended - started:.2f} s):")
    print(f"  process start -> study flow starts (imports, check, server) {s0 - started:6.2f} s")
    by_name: dict[str, list[float]] = {}
    for name, a, b in runs:
        if name != "study" and a is not None and b is not None:
            by_name.setdefault(f"flow {name}", []).append(b - a)
    for key, a, b in tasks:  # a task's key: its name and a hash
        ta, tb = _when(a), _when(b)
        if ta is not None and tb is not None and s0 <= ta <= s1:
            by_name.setdefault(f"task {key.rsplit('-', 1)[0]}", []).append(tb - ta)
    print(f"  study flow (start to end)                                  {s1 - s0:6.2f} s")
    for name, spans in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {name:<40} x{len(spans):<3} {sum(spans):6.2f} s in all")
    print(f"  study flow ends -> process exits (server stop, output)    {ended - s1:6.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prefect_home = root / "prefect"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DPATE_", "PREFECT_"))}
        env.update(PREFECT_HOME=str(prefect_home), DPATE_HOME=str(root / "home"))
        # dpate run's own Prefect settings (dpate.cli.environment.prefect_env), for both
        env.update(
            DO_NOT_TRACK="1",
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
            PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL="WARNING",
            PREFECT_LOGGING_HANDLERS_CONSOLE_FLOW_RUNS_LEVEL="WARNING",
            **{f"PREFECT_SERVER_SERVICES_{s}_ENABLED": "false" for s in EMBEDDED_SERVICES_OFF},
        )
        bare = root / "bare_flow.py"
        bare.write_text(BARE_FLOW, "utf-8")
        study_dir = root / "study"
        study_dir.mkdir()
        spec = write_study(study_dir)
        dpate = [py, "-m", "dpate.cli"]

        def fresh_study() -> None:  # new ledgers and publication root: the run spends
            shutil.rmtree(root / "home", ignore_errors=True)
            shutil.rmtree(study_dir / "published", ignore_errors=True)
            for site in ("north", "south"):
                subprocess.run(
                    [*dpate, "ledger", "init", site, "--epsilon", "5", "--delta", "1e-4"],
                    env=env,
                    capture_output=True,
                    check=True,
                )

        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        fresh_study()  # the ledgers dpate check reads
        first = timed([py, str(bare)], env)
        print(
            f"first bare flow, fresh PREFECT_HOME (database created and migrated): "
            f"wall {first[0]:.2f} s, CPU {first[1]:.2f} s (load {first[2]:.1f})"
        )
        cases: list[tuple[str, list[str], Callable[[], None] | None]] = [
            ("python -c pass", [py, "-c", "pass"], None),
            ("python -c 'import prefect'", [py, "-c", "import prefect"], None),
            ("bare Prefect flow + 1 task (ephemeral server)", [py, str(bare)], None),
            ("python -c 'import dpate.flows.study'", [py, "-c", "import dpate.flows.study"], None),
            ("dpate check (2 sites, 250 records each)", [*dpate, "check", str(spec)], None),
            ("dpate run (2 sites, 250 records each)", [*dpate, "run", str(spec)], fresh_study),
        ]
        results = {}
        header = f"{'what':<48} {'wall s':>7} {'CPU s':>7} {'x pass':>7} {'x bare':>7} {'load':>5}"
        print(header)
        for label, argv, prepare in cases:
            results[label] = best(argv, env, args.repeats, prepare)
        base = results["python -c pass"][0]
        bare_wall = results["bare Prefect flow + 1 task (ephemeral server)"][0]
        for label, (wall, cpu, load) in results.items():
            print(
                f"{label:<48} {wall:7.2f} {cpu:7.2f} {wall / base:7.1f} {wall / bare_wall:7.2f} "
                f"{load:5.1f}"
            )
        before = runs_recorded(prefect_home)
        fresh_study()
        started = time.time()
        subprocess.run([*dpate, "run", str(spec)], env=env, capture_output=True, check=True)
        ended = time.time()
        after = runs_recorded(prefect_home)
        print(
            f"one dpate run records {after[0] - before[0]} flow run(s) and "
            f"{after[1] - before[1]} task run(s) (the bare flow: 1 and 1)"
        )
        timeline(prefect_home, started, ended)
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
