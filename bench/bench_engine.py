"""A site's release computed where its data lives (dpate.schemas.site_data), against the engine's
own GROUP BY of the same columns: DuckDB on Parquet files and partitioned datasets, PostgreSQL,
Spark in local mode; and, given an older checkout, the streaming path this replaced.

Every measurement runs in a fresh Python process (``--child``); its time excludes the imports and
the load of the secure samplers' compiled kernels (timed apart, ``kernels``), its peak RSS is the
process's own ``ru_maxrss`` (``os.wait4``), and the ``imports`` line is a process that only
imports what a release imports (the RSS baseline). A section's baseline and releases run in turn,
``--repeat`` rounds, and each line shows its median time and the median of its per-round ratios
to the baseline; ``--same-process N`` adds, per section, the baseline and the adjusted release
alternated N rounds in one process that ran each once first (wall and CPU ratios). Lines
(``--only`` picks some):

- ``duckdb-groupby``: DuckDB alone, ``SELECT w, region, CASE ... age bins END, CASE ... bmi
  bins END, count(*), sum(y), sum(y * y) ... GROUP BY 1, 2, 3, 4`` on the file: the same five
  columns read and grouped into the same strata by hand-written SQL (the baseline of the Parquet
  lines; :data:`GROUPBY`);
- ``release`` / ``release-dim`` / ``release-matching``: the site task's path without the ledger
  and a Prefect run (``read_site_records``, the feasibility rules, ``plan_from_records``, one
  secure draw) for the adjusted estimator, the DP difference in means and SmoothDPMatching;
- ``dataset-groupby`` / ``dataset-release``: the same on a hive-partitioned dataset
  (``--dataset-rows``, written once with DuckDB, 16 partitions);
- ``pg-groupby`` (PostgreSQL's own GROUP BY through psycopg), ``pg-release``, and with
  ``--old-checkout DIR`` (a checkout of the commit before this engine, e.g. ``git worktree add``)
  ``pg-old-release``: that checkout's streaming release (COPY parsed by pyarrow);
- ``spark-release``: the adjusted release through Spark local mode (``spark://local[2]``) on the
  Parquet file, beside ``release`` (DuckDB) on the same file.

Data: treatment ``w`` (0/1), outcome ``y`` uniform in [0, 1], ``region`` (5 text levels), ``age``
and ``bmi`` rounded to 2 decimals; spec: clip policy, 5 x 6 x 5 strata (bench/_inputs.py). Files
are written once under ``--dir`` by DuckDB (1 M-row row groups); a PostgreSQL table is created per
run and dropped at the end. Prints times, rows per second, the ratio to the line's baseline and
peak RSS; no assertion. Usage::

    python bench/bench_engine.py --rows 1e8 --dataset-rows 1e9 --pg-rows 1e7 --spark-rows 1e7 \
        --matching-rows 1e8 --old-checkout /tmp/dpate-old
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from _inputs import LEVELS, bench_spec

REPO = Path(__file__).resolve().parents[1]
PG = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SPARK = "spark://local[2]"
COLUMNS = "w, y, region, age, bmi"
#: the engine's own GROUP BY of the same columns into the same strata (the spec's bins as a CASE),
#: with the count, sum and sum of squares of the outcome: what an analyst would write by hand
GROUPBY = (
    "SELECT w, region, CASE WHEN age < 18 THEN 0 WHEN age < 30 THEN 1 WHEN age < 45 THEN 2 "
    "WHEN age < 60 THEN 3 WHEN age < 75 THEN 4 ELSE 5 END AS a, CASE WHEN bmi < 18.5 THEN 0 "
    "WHEN bmi < 25 THEN 1 WHEN bmi < 30 THEN 2 ELSE 3 END AS b, count(*) AS n, sum(y) AS s, "
    "sum(y * y) AS q FROM {source} GROUP BY 1, 2, 3, 4"
)


def _generator(rows: int) -> str:
    levels = ", ".join(f"'{v}'" for v in LEVELS)
    return (
        f"SELECT i AS id, (random() < 0.4)::TINYINT AS w, random() AS y, "
        f"([{levels}])[1 + (i % {len(LEVELS)})] AS region, "
        f"round(random() * 100, 2) AS age, round(26 + 5 * sqrt(-2 * ln(random())) "
        f"* cos(2 * pi() * random()), 2) AS bmi, i % 16 AS part FROM range({rows}) t(i)"
    )


def setup(what: str, target: str, rows: int) -> None:
    """Write the benchmark's data, or load PostgreSQL, in a process of its own: a child forked
    from a process that grew (DuckDB writing a file) would report that size as its own peak RSS
    (Linux keeps ``ru_maxrss`` across ``exec``)."""
    cmd = [sys.executable, __file__, "--setup", what, target, str(rows)]
    subprocess.run(cmd, check=True, cwd=REPO)


def write_parquet(path: Path, rows: int) -> None:
    import duckdb

    tmp = path.with_suffix(".tmp")
    duckdb.sql(f"COPY ({_generator(rows)}) TO '{tmp}' (FORMAT parquet, ROW_GROUP_SIZE 1048576)")
    tmp.rename(path)


def write_dataset(folder: Path, rows: int) -> None:
    import duckdb

    tmp = folder.with_name(folder.name + ".tmp")
    duckdb.sql(
        f"COPY ({_generator(rows)}) TO '{tmp}' (FORMAT parquet, PARTITION_BY (part), "
        f"ROW_GROUP_SIZE 1048576)"
    )
    tmp.rename(folder)


# ---------------------------------------------------------------------------------------------
# children (one measurement each, in a fresh process)

ESTIMATOR = {
    "release": "adjusted",
    "release-dim": "dim",
    "release-matching": "smooth_matching",
    "dataset-release": "adjusted",
    "pg-release": "adjusted",
    "pg-old-release": "adjusted",
    "spark-release": "adjusted",
}


def release(spec, target: str) -> int:
    """The site task's release path without ledger or Prefect run (tasks/site.py)."""
    from dpate_core.release import draw_once

    try:
        from dpate.schemas.site_data import read_site_records
        from dpate.site.feasibility import feasibility_problems
        from dpate.site.plans import plan_from_records
    except ImportError:  # the checkout before the engine (--old-checkout): the streaming path
        from dpate.schemas.preflight import feasibility_problems
        from dpate.schemas.site_statistics import read_site_records
        from dpate.site_plans import plan_from_records

    data = read_site_records(spec, "a", target)
    found = feasibility_problems(data, spec)
    assert not found, found
    plan = plan_from_records(spec, "a", data)
    estimate = plan.estimate(draw_once(plan))
    assert estimate.n == data.n
    return data.n


def child(mode: str, target: str) -> dict:
    name = mode.split(":")[-1]
    spec = bench_spec(ESTIMATOR.get(name, "adjusted"), delta="1e-6")
    if name.startswith("dataset"):
        spec = _as_dataset(spec)
    import duckdb
    import ibis
    import psycopg

    import dpate.tasks.site  # the site task's imports (Prefect too), outside the clock

    ibis.duckdb.connect().disconnect()  # Ibis's backend modules, imported on first use
    if name.startswith("pg"):
        assert ibis.postgres is not None  # its backend module too
        import pandas  # imported by Ibis's PostgreSQL backend when it connects

        del pandas
    del dpate, duckdb, psycopg
    if mode == "spark-release":
        from pyspark.sql import SparkSession

        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config(
            "spark.sql.shuffle.partitions", "4"
        ).getOrCreate().sparkContext.setLogLevel("ERROR")
    # the secure samplers' compiled kernels (numba's cache) load on a process's first draw: a
    # fixed cost of a fresh process, like the imports, timed apart (``kernels_s``)
    t0 = time.perf_counter()
    if name in ESTIMATOR:
        import numpy as np

        from dpate_core.noise import integer_laplace_vector

        integer_laplace_vector(np.zeros(2, dtype=np.int64), 1.0)
    kernels = time.perf_counter() - t0
    if mode.startswith("same:"):
        return same_process(spec, target, *mode.split(":")[1:])
    t0 = time.perf_counter()
    rows = measure(mode, spec, target)
    seconds = time.perf_counter() - t0
    return {"mode": mode, "rows": rows, "seconds": seconds, "kernels_s": kernels}


def measure(mode: str, spec, target: str) -> int:
    """One run of ``mode``: the rows it read."""
    rows = 0
    if mode == "imports":
        pass
    elif mode in ESTIMATOR:
        rows = release(spec, target)
    elif mode in ("duckdb-groupby", "dataset-groupby"):
        import duckdb

        source = (
            f"read_parquet('{target}/**/*.parquet', hive_partitioning = true)"
            if mode.startswith("dataset")
            else f"read_parquet('{target}')"
        )
        con = duckdb.connect(config=_duckdb_config())
        got = con.sql(GROUPBY.format(source=source)).fetchall()
        con.close()
        rows = sum(int(r[4]) for r in got)
    elif mode == "pg-groupby":
        import psycopg

        with psycopg.connect(PG) as conn, conn.cursor() as cur:
            cur.execute(GROUPBY.format(source=f"({os.environ['DPATE_DATA_QUERY']}) AS q"))
            rows = sum(int(r[4]) for r in cur.fetchall())
    else:
        raise SystemExit(f"unknown mode {mode}")
    return rows


def same_process(spec, target: str, base: str, mode: str) -> dict:
    """``base`` and ``mode`` alternated in this one process (each run once first, unclocked:
    what a long-running site worker has already loaded), ``DPATE_BENCH_ROUNDS`` rounds: the
    medians of the per-round ratios of wall and CPU time (all threads of the process)."""
    rounds = int(os.environ.get("DPATE_BENCH_ROUNDS", "5"))
    measure(base, spec, target)
    measure(mode, spec, target)
    wall: dict[str, list[float]] = {base: [], mode: []}
    cpu: dict[str, list[float]] = {base: [], mode: []}
    rows = 0
    for _ in range(rounds):
        for m in (base, mode):
            t, c = time.perf_counter(), time.process_time()
            rows = measure(m, spec, target)
            wall[m].append(time.perf_counter() - t)
            cpu[m].append(time.process_time() - c)

    def ratio(d: dict[str, list[float]]) -> float:
        return statistics.median(a / b for a, b in zip(d[mode], d[base], strict=True))

    return {
        "mode": f"{mode} (same process)",
        "rows": rows,
        "seconds": statistics.median(wall[mode]),
        "base_s": statistics.median(wall[base]),
        "ratio": ratio(wall),
        "cpu_ratio": ratio(cpu),
        "kernels_s": 0.0,
    }


def _duckdb_config() -> dict:
    memory = os.environ.get("DPATE_ENGINE_MEMORY", "").strip()
    return {"memory_limit": memory} if memory else {}


def _as_dataset(spec):
    from dpate.schemas.spec import StudySpec

    d = spec.model_dump(mode="json")
    d["sites"][0]["format"] = "parquet-dataset"
    return StudySpec.from_dict(d)


def run_child(mode: str, target: str, env: dict | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, target]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, **(env or {})}, text=True
    )
    out = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(f"{mode} failed (status {status})")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def best(mode: str, target: str, env: dict | None = None, repeat: int = 1) -> dict:
    """Best time of ``repeat`` fresh processes, and the highest peak RSS among them."""
    runs = [run_child(mode, target, env) for _ in range(repeat)]
    out = min(runs, key=lambda r: r["seconds"])
    return {**out, "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


def interleaved(
    base_mode: str, modes: list[str], target: str, env: dict | None = None, repeat: int = 1
) -> tuple[dict, list[dict]]:
    """The baseline and each mode run in turn, ``repeat`` rounds (a loaded machine slows
    neighbouring runs alike): per line its median time, and per mode the median of its
    per-round ratios to that round's baseline (``ratio``), with the highest peak RSS."""
    rounds = []
    for _ in range(repeat):
        rounds.append([run_child(m, target, env) for m in [base_mode, *modes]])

    def line(i: int) -> dict:
        runs = [r[i] for r in rounds]
        ratios = [r[i]["seconds"] / r[0]["seconds"] for r in rounds]
        return {
            **runs[0],
            "seconds": statistics.median(x["seconds"] for x in runs),
            "kernels_s": statistics.median(x["kernels_s"] for x in runs),
            "ratio": statistics.median(ratios),
            "peak_rss_mib": max(x["peak_rss_mib"] for x in runs),
        }

    return line(0), [line(i) for i in range(1, len(modes) + 1)]


def show(r: dict, base: dict | None, imports: dict | None) -> None:
    rate = r["rows"] / r["seconds"] if r["seconds"] else float("nan")
    if "ratio" in r:
        ratio = f"{r['ratio']:6.2f}x"
    else:
        ratio = f"{r['seconds'] / base['seconds']:6.2f}x" if base else "     - "
    above = f"{r['peak_rss_mib'] - imports['peak_rss_mib']:7.0f}" if imports else "      -"
    print(
        f"  {r['mode']:<18} {r['rows']:>14,} rows {r['seconds']:9.2f} s {rate / 1e6:8.2f} M rows/s"
        f"  {ratio}  peak RSS {r['peak_rss_mib']:6.0f} MiB ({above} above imports)  "
        f"kernels {r.get('kernels_s', 0):.2f} s  "
        + (f"CPU {r['cpu_ratio']:.2f}x  " if "cpu_ratio" in r else "")
        + f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def pg_table(parquet: Path, rows: int) -> str:
    """Load the first ``rows`` rows of the Parquet file into a new table (DuckDB's postgres
    writer is an extension download away: rows go through psycopg's COPY in binary-free text)."""
    import duckdb
    import psycopg

    name = f"dpate_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {name} (id bigint, w smallint, y double precision, region text, "
            f"age double precision, bmi double precision)"
        )
        reader = duckdb.sql(
            f"SELECT id, w, y, region, age, bmi FROM read_parquet('{parquet}') LIMIT {rows}"
        ).to_arrow_reader(1 << 18)
        with conn.cursor().copy(f"COPY {name} FROM STDIN") as copy:
            for batch in reader:
                cols = batch.to_pydict()
                for row in zip(*cols.values(), strict=True):
                    copy.write_row(row)
        conn.execute(f"ANALYZE {name}")
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=1e7, help="Parquet file rows")
    ap.add_argument("--dataset-rows", type=float, default=0, help="0: skip the dataset lines")
    ap.add_argument("--pg-rows", type=float, default=0, help="0: skip PostgreSQL")
    ap.add_argument("--spark-rows", type=float, default=0, help="0: skip Spark")
    ap.add_argument("--matching-rows", type=float, default=1e7, help="largest N for matching")
    ap.add_argument("--old-checkout", default="", help="a checkout with the streaming path")
    ap.add_argument("--dir", default="/tmp/dpate-bench-engine")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds: a fresh process per line and round; medians (Spark: best time)",
    )
    ap.add_argument(
        "--same-process",
        type=int,
        default=0,
        help="also N rounds of GROUP BY and release alternated in one warm process",
    )
    ap.add_argument("--only", default="", help="comma-separated modes (default: all)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "TARGET"), help=argparse.SUPPRESS)
    ap.add_argument("--setup", nargs=3, metavar=("WHAT", "TARGET", "ROWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    if args.setup:
        what, target, n = args.setup
        if what == "parquet":
            write_parquet(Path(target), int(n))
        elif what == "dataset":
            write_dataset(Path(target), int(n))
        else:
            print(pg_table(Path(target), int(n)))
        return
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    only = {m.strip() for m in args.only.split(",") if m.strip()}
    r = args.repeat
    if args.same_process:
        os.environ["DPATE_BENCH_ROUNDS"] = str(args.same_process)

    def wanted(mode: str) -> bool:
        return not only or mode in only

    def parquet(rows: int) -> Path:
        path = folder / f"site-{rows}.parquet"
        if not path.exists():
            t = time.perf_counter()
            setup("parquet", str(path), rows)
            print(
                f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) in "
                f"{time.perf_counter() - t:.0f} s",
                flush=True,
            )
        return path

    print(f"{os.cpu_count()} cores; load average {os.getloadavg()}; {r} interleaved rounds")
    imports = best("imports", "-")
    show(imports, None, None)
    rows = int(args.rows)
    if rows:
        path = parquet(rows)
        print(f"Parquet, {rows:,} rows, {path.stat().st_size / 2**20:.0f} MiB")
        modes = ["release", "release-dim"]
        if rows <= args.matching_rows:
            modes.append("release-matching")
        base, lines = interleaved(
            "duckdb-groupby", [m for m in modes if wanted(m)], str(path), None, r
        )
        show(base, base, imports)
        for line in lines:
            show(line, base, imports)
        if args.same_process and wanted("release"):
            show(run_child("same:duckdb-groupby:release", str(path)), None, imports)
    ds_rows = int(args.dataset_rows)
    if ds_rows:
        ds = folder / f"dataset-{ds_rows}"
        if not ds.exists():
            t = time.perf_counter()
            setup("dataset", str(ds), ds_rows)
            print(f"wrote {ds} in {time.perf_counter() - t:.0f} s", flush=True)
        size = sum(p.stat().st_size for p in ds.rglob("*.parquet")) / 2**30
        print(f"partitioned dataset, {ds_rows:,} rows, {size:.1f} GiB in 16 partitions")
        modes = [m for m in ["dataset-release"] if wanted(m)]
        base, lines = interleaved("dataset-groupby", modes, str(ds), None, r)
        show(base, base, imports)
        for line in lines:
            show(line, base, imports)
        if args.same_process and wanted("dataset-release"):
            show(run_child("same:dataset-groupby:dataset-release", str(ds)), None, imports)
    spark_rows = int(args.spark_rows)
    if spark_rows:
        path = parquet(spark_rows)
        print(f"Spark local mode (2 cores) vs DuckDB, {spark_rows:,} rows of Parquet")
        base = best("release", str(path), repeat=r)
        show(base, base, imports)
        env = {"DPATE_DATA_QUERY": f"SELECT {COLUMNS} FROM parquet.`{path}`"}
        show(best("spark-release", SPARK, env, r), base, imports)
    pg_rows = int(args.pg_rows)
    if pg_rows:
        source = parquet(pg_rows)
        out = subprocess.run(
            [sys.executable, __file__, "--setup", "pg", str(source), str(pg_rows)],
            check=True,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        name = out.stdout.strip().splitlines()[-1]
        try:
            env = {"DPATE_DATA_QUERY": f"SELECT {COLUMNS} FROM {name}"}
            print(f"PostgreSQL, {pg_rows:,} rows (table {name})")
            base, lines = interleaved("pg-groupby", ["pg-release"], PG_URL, env, r)
            show(base, base, imports)
            show(lines[0], base, imports)
            if args.same_process:
                show(run_child("same:pg-groupby:pg-release", PG_URL, env), None, imports)
            if args.old_checkout:
                old = {**env, "PYTHONPATH": str(Path(args.old_checkout).resolve())}
                show(best("pg-old-release", PG_URL, old, r), base, imports)
        finally:
            import psycopg

            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {name}")


if __name__ == "__main__":
    main()
