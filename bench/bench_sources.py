"""Site data sources read in batches (schemas/sources.py): speed and peak memory vs the bare readers.

Writes, once, a Parquet file of ``--rows`` rows (treatment 0/1, an outcome, one categorical
covariate with 5 text levels, two numeric covariates; 1 M-row row groups, written in chunks so the
generator stays small) and, with ``--pg-rows``, a PostgreSQL table (127.0.0.1:5432, database
``test``, unique name, dropped at the end). Every measurement runs in a fresh Python process; its
peak RSS is that process's own ``ru_maxrss`` (``os.wait4``); the modules are imported before the
clock starts, and the ``imports`` line is a process that only imports them (the RSS baseline).
Measured, in the same run:

- ``pyarrow``: ``ParquetFile.iter_batches`` of the spec's columns (text as dictionary,
  ``pre_buffer=False``): the bare reading cost, bounded memory;
- ``pyarrow-table``: ``pq.read_table`` of the spec's columns (what a whole-file read holds);
- ``table-then-prepare``: the pre-batching path (whole Arrow table, then one validation pass);
- ``prepare``: ``prepare_site_data(path)``: batched read + validation, keeps ``(w, y, x)``;
- ``stream``: ``stream_cell_statistics``: batched read + validation + the adjusted estimator's
  per-cell sums, keeps nothing per row; ``dataset-stream``: the same through ``pyarrow.dataset``
  (the file as a one-file dataset);
- ``pyarrow-csv``: ``pyarrow.csv.open_csv`` alone (streaming) on the same data as CSV
  (``--csv-rows``), then ``csv-prepare`` and ``csv-stream`` (a parsing pass, then the stream);
- ``psycopg-copy`` / ``psycopg-fetch``: the PostgreSQL table through psycopg alone (COPY to
  STDOUT; a server-side cursor fetching tuples), then ``pg-prepare`` and ``pg-stream``;
- the site's release end to end, without the ledger and Prefect's run machinery: what
  ``dpate.tasks.site.load_site_data`` and ``compute_release`` do (``read_site_records``, the
  feasibility rules, ``plan_from_records``, one secure draw): ``release`` (the adjusted estimator,
  streamed), ``release-records`` (the same estimator planned from the materialised records, the
  path every other estimator takes), ``release-matching`` (SmoothDPMatching: materialised, in a
  data-independent order; only up to ``--matching-rows``), ``release-dim`` and
  ``release-dim-records`` (the DP difference in means, streamed and from the records; the same
  file read as a randomized trial with public arm sizes), ``pg-release`` (streamed from
  PostgreSQL). ``release-imports`` is their RSS baseline (it also imports Prefect).

Prints rows per second and peak RSS per line; no assertion. Usage:
``python bench/bench_sources.py [--rows 10000000] [--pg-rows 1000000] [--dir /tmp/...] [--only
MODES] [--repeat 3]`` (``--rows 100000000`` needs about 1.8 GB of disk, and 3 GB of memory for
``prepare``; ``--only release-imports,release,stream --csv-rows 0 --pg-rows 0 --repeat 1`` keeps
it to the bounded-memory lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from _inputs import LEVELS, bench_spec

REPO = Path(__file__).resolve().parents[1]
PG = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def make_spec(estimator: str = "adjusted"):
    return bench_spec(estimator, delta="1e-6")


def _chunk(rng, n: int, start: int):
    import numpy as np
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "w": pa.array(rng.integers(0, 2, n, dtype=np.int8)),
            "y": pa.array(rng.random(n)),
            "region": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, len(LEVELS), n, dtype=np.int32)), pa.array(LEVELS)
            ),
            "age": pa.array(np.round(rng.uniform(0, 100, n), 2)),
            "bmi": pa.array(np.round(rng.normal(26, 5, n), 2)),
        }
    )


def write_parquet(path: Path, rows: int) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2026)
    step = 1 << 20
    writer = None
    for start in range(0, rows, step):
        t = _chunk(rng, min(step, rows - start), start)
        if writer is None:
            writer = pq.ParquetWriter(path.with_suffix(".tmp"), t.schema)
        writer.write_table(t, row_group_size=step)
    assert writer is not None
    writer.close()
    path.with_suffix(".tmp").rename(path)


# ---------------------------------------------------------------------------------------------
# children (one measurement each, in a fresh process)


def _preload() -> None:
    import dpate.schemas.site_statistics
    import psycopg
    import pyarrow.parquet
    import sqlalchemy

    import dpate_core.adjusted

    del psycopg, pyarrow, sqlalchemy, dpate_core, dpate


def release(spec, target: str) -> int:
    """The site task's release path without ledger or Prefect run (tasks/site.py): read (streamed
    or materialised as the estimator needs), feasibility rules, plan, one secure draw."""
    from dpate.schemas.site_statistics import read_site_records

    from dpate.schemas.preflight import feasibility_problems
    from dpate.site_plans import plan_from_records
    from dpate_core.release import draw_once

    data = read_site_records(spec, "a", target)
    found = feasibility_problems(data, spec)
    assert not found, found
    plan = plan_from_records(spec, "a", data)
    estimate = plan.estimate(draw_once(plan))
    assert estimate.n == data.n
    return data.n


def child(mode: str, target: str) -> dict:
    estimator = {"release-matching": "smooth_matching", "release-dim": "dim"}
    spec = make_spec(estimator.get(mode.removesuffix("-records"), "adjusted"))
    cols = ["w", "y", "region", "age", "bmi"]
    _preload()  # module imports are not the reading cost (the imports line shows them)
    if "release" in mode:
        import dpate.tasks.site  # Prefect too: the site task's module

        del dpate
    t0 = time.perf_counter()
    rows = 0
    if mode in ("imports", "release-imports"):
        pass
    elif mode in ("release", "pg-release", "release-matching", "release-dim"):
        rows = release(spec, target)
    elif mode in ("release-records", "release-dim-records"):
        import dpate.schemas.site_statistics

        dpate.schemas.site_statistics.STREAMED_ESTIMATORS = (
            frozenset()
        )  # this process only: the records path
        rows = release(spec, target)
    elif mode == "pyarrow":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(target, read_dictionary=["region"], pre_buffer=False)
        for b in pf.iter_batches(batch_size=1 << 20, columns=cols):
            rows += b.num_rows
    elif mode == "pyarrow-table":
        import pyarrow.parquet as pq

        rows = pq.read_table(target, columns=cols, read_dictionary=["region"]).num_rows
    elif mode == "table-then-prepare":
        from dpate.schemas.site_preparation import prepare_site_data
        from dpate.schemas.site_reading import read_site_table

        rows = prepare_site_data(read_site_table(target, spec), spec).n
    elif mode in ("prepare", "pg-prepare"):
        from dpate.schemas.site_preparation import prepare_site_data

        rows = prepare_site_data(target, spec).n
    elif mode == "dataset-stream":
        from dpate.schemas.site_statistics import stream_cell_statistics

        stats, _ = stream_cell_statistics(target, spec, fmt="parquet-dataset")
        rows = stats.n
    elif mode in ("stream", "pg-stream"):
        from dpate.schemas.site_statistics import stream_cell_statistics

        stats, _ = stream_cell_statistics(target, spec)
        rows = stats.n
    elif mode == "pyarrow-csv":
        import pyarrow.csv as pacsv

        convert = pacsv.ConvertOptions(include_columns=cols)
        for b in pacsv.open_csv(target, convert_options=convert):
            rows += b.num_rows
    elif mode == "csv-prepare":
        from dpate.schemas.site_preparation import prepare_site_data

        rows = prepare_site_data(target, spec).n
    elif mode == "csv-stream":
        from dpate.schemas.site_statistics import stream_cell_statistics

        rows = stream_cell_statistics(target, spec)[0].n
    elif mode == "psycopg-copy":
        import psycopg

        with psycopg.connect(PG) as conn, conn.cursor() as cur:
            q = os.environ["DPATE_DATA_QUERY"]
            with cur.copy(f"COPY ({q}) TO STDOUT (FORMAT csv)") as copy:
                for chunk in copy:
                    rows += bytes(chunk).count(b"\n")
    elif mode == "psycopg-fetch":
        import psycopg

        with psycopg.connect(PG) as conn, conn.cursor(name="bench") as cur:
            cur.itersize = 1 << 16
            cur.execute(os.environ["DPATE_DATA_QUERY"])
            while batch := cur.fetchmany(1 << 16):
                rows += len(batch)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return {"mode": mode, "rows": rows, "seconds": time.perf_counter() - t0}


def best(mode: str, target: str, env: dict | None = None, repeat: int = 1) -> dict:
    """Best time of ``repeat`` fresh processes, and the highest peak RSS among them."""
    runs = [run_child(mode, target, env) for _ in range(repeat)]
    out = min(runs, key=lambda r: r["seconds"])
    return {**out, "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


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


def show(r: dict, base: dict | None) -> None:
    rate = r["rows"] / r["seconds"] if r["seconds"] else float("nan")
    ratio = f"{r['seconds'] / base['seconds']:5.2f}x" if base else "   - "
    print(
        f"  {r['mode']:<20} {r['rows']:>12,} rows  {r['seconds']:8.2f} s  "
        f"{rate / 1e6:7.2f} M rows/s  {ratio}  peak RSS {r['peak_rss_mib']:8.0f} MiB",
        flush=True,
    )


def pg_table(parquet: Path, rows: int) -> str:
    """Load the first ``rows`` rows of the Parquet file into a new table; its name."""
    import psycopg
    import pyarrow.parquet as pq

    name = f"dpate_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {name} (id bigint, w smallint, y double precision, region text, "
            f"age double precision, bmi double precision)"
        )
        done = 0
        with conn.cursor().copy(f"COPY {name} FROM STDIN") as copy:
            for b in pq.ParquetFile(parquet).iter_batches(batch_size=1 << 16):
                t = b.to_pydict()
                for row in zip(*(t[c] for c in b.schema.names), strict=True):
                    if done >= rows:
                        break
                    copy.write_row(row)
                    done += 1
                if done >= rows:
                    break
        conn.execute(f"ANALYZE {name}")
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--csv-rows", type=float, default=1e7, help="0: skip CSV")
    ap.add_argument("--pg-rows", type=float, default=1e6, help="0: skip PostgreSQL")
    ap.add_argument("--dir", default="/tmp/dpate-bench-sources")
    ap.add_argument("--skip-old", action="store_true", help="skip table-then-prepare")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per line (best time)")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated modes to run (default: all); e.g. "
        "release-imports,pyarrow,release,pg-release for a large N",
    )
    ap.add_argument(
        "--matching-rows", type=float, default=1e7, help="largest N for release-matching"
    )
    ap.add_argument("--child", nargs=2, metavar=("MODE", "TARGET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows = int(args.rows)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"site-{rows}.parquet"
    if not path.exists():
        t = time.perf_counter()
        write_parquet(path, rows)
        print(
            f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.0f} s"
        )
    size = path.stat().st_size / 2**20
    print(
        f"Parquet, {rows:,} rows, {size:.0f} MiB ({os.cpu_count()} cores, load {os.getloadavg()})"
    )
    r = args.repeat
    only = {m.strip() for m in args.only.split(",") if m.strip()}

    def wanted(mode: str) -> bool:
        return not only or mode in only

    print(f"best of {r} fresh processes per line; ratio: time / the first line's")
    for mode in ("imports", "release-imports"):
        if wanted(mode):
            show(best(mode, str(path)), None)
    base = best("pyarrow", str(path), repeat=r)
    show(base, base)
    modes = ["pyarrow-table"] + ([] if args.skip_old else ["table-then-prepare"])
    modes += ["prepare", "stream", "release", "release-records", "release-dim"]
    modes += ["release-dim-records"]
    if rows <= args.matching_rows:
        modes.append("release-matching")
    for mode in modes:
        if wanted(mode):
            show(best(mode, str(path), repeat=r), base)
    ds_dir = folder / f"dataset-{rows}"  # the same file as a one-file dataset
    ds_dir.mkdir(exist_ok=True)
    if not (ds_dir / "part-0.parquet").exists():
        (ds_dir / "part-0.parquet").symlink_to(path)
    if wanted("dataset-stream"):
        show(best("dataset-stream", str(ds_dir), repeat=r), base)
    csv_rows = int(args.csv_rows)
    if csv_rows and (not only or only & {"pyarrow-csv", "csv-prepare", "csv-stream"}):
        csv = folder / f"site-{csv_rows}.csv"
        if not csv.exists():
            import pyarrow.csv as pacsv
            import pyarrow.parquet as pq

            src = folder / f"site-{csv_rows}.parquet"
            if not src.exists():
                write_parquet(src, csv_rows)
            table = pq.read_table(src)
            table = table.set_column(3, "region", table.column("region").cast("string"))
            pacsv.write_csv(table, csv)
        print(f"CSV, {csv_rows:,} rows, {csv.stat().st_size / 2**20:.0f} MiB")
        base = best("pyarrow-csv", str(csv), repeat=r)
        show(base, base)
        for mode in ("csv-prepare", "csv-stream"):
            show(best(mode, str(csv), repeat=r), base)
    pg_rows = int(args.pg_rows)
    pg_modes = ("psycopg-copy", "psycopg-fetch", "pyarrow", "pg-prepare", "pg-stream", "pg-release")
    if pg_rows and (not only or only & set(pg_modes)):
        small = folder / f"site-{pg_rows}.parquet"
        if not small.exists():
            write_parquet(small, pg_rows)
        name = pg_table(small, pg_rows)
        try:
            env = {"DPATE_DATA_QUERY": f"SELECT w, y, region, age, bmi FROM {name} ORDER BY id"}
            print(f"PostgreSQL, {pg_rows:,} rows (table {name}, ORDER BY id)")
            base = best("psycopg-copy", PG_URL, env, r)
            show(base, base)
            for mode in ("psycopg-fetch", "pyarrow", "pg-prepare", "pg-stream", "pg-release"):
                if wanted(mode):
                    show(best(mode, str(small) if mode == "pyarrow" else PG_URL, env, r), base)
        finally:
            import psycopg

            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {name}")


if __name__ == "__main__":
    main()
