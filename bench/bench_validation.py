"""Site data validation and discretisation vs reading the same Parquet file.

Writes a Parquet file of N rows (treatment 0/1, an outcome, one categorical covariate with 5 text
levels, two numeric covariates cut at public edges), then times, in the same run:

- baseline: ``pyarrow.parquet.read_table`` of the spec's columns (the cost of reading at all),
  also with ``to_pandas`` and with the text column read as a dictionary (as preparation reads it);
- ``prepare_site_data(path, spec)``: read + pandera validation + clipping + discretisation.

Prints the best of ``--repeat`` runs of each and the ratio (target: at most 3x the read). The same
comparison is made for a CSV file of ``--csv-rows`` rows (baseline ``pyarrow.csv.read_csv``).
Usage: ``python bench/bench_validation.py [--rows 10000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from _inputs import LEVELS, bench_spec

from dpate.schemas.site_data import prepare_site_data
from dpate.schemas.spec import StudySpec


def make_spec() -> StudySpec:
    spec: StudySpec = bench_spec("smooth_matching", delta="1e-5")
    return spec


def write_file(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    region = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, len(LEVELS), rows).astype(np.int32)), pa.array(LEVELS)
    ).cast(pa.string())
    table = pa.table(
        {
            "w": rng.integers(0, 2, rows).astype(np.int8),
            "y": rng.random(rows) * 1.02,  # about 2% above B: clipped
            "region": region,
            "age": rng.uniform(0, 95, rows),
            "bmi": rng.normal(26, 5, rows),
            "unused": rng.random(rows),
        }
    )
    pq.write_table(table, path, row_group_size=1 << 20)


def timed(fn) -> tuple[float, float]:
    """(wall, CPU of all threads) seconds of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def paired(baseline, candidate, repeat: int) -> dict[str, float]:
    """Run baseline and candidate back to back ``repeat`` times (so both see the same machine
    load); best times, and the median of the per-pair wall and CPU ratios."""
    b_wall, c_wall, r_wall, r_cpu = [], [], [], []
    for _ in range(repeat):
        bw, bc = timed(baseline)
        cw, cc = timed(candidate)
        b_wall.append(bw)
        c_wall.append(cw)
        r_wall.append(cw / bw)
        r_cpu.append(cc / bc)
    return {
        "base": min(b_wall),
        "cand": min(c_wall),
        "ratio_wall": float(np.median(r_wall)),
        "ratio_cpu": float(np.median(r_cpu)),
    }


_PEAK = """
import sys
sys.path.insert(0, {bench!r})
import pyarrow.parquet as pq
from bench_validation import make_spec
from dpate.schemas.site_data import prepare_site_data


def hwm():  # VmHWM of this process image (ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024


spec = make_spec()
base = hwm()
if {what!r} == "read":
    t = pq.read_table({path!r}, columns=["w", "y", "region", "age", "bmi"])
else:
    d = prepare_site_data({path!r}, spec)
print(hwm() - base)
"""


def peak_mib(path: Path, what: str) -> float:
    """High-water RSS rise (MiB) of reading or preparing the file in a fresh process."""
    code = _PEAK.format(bench=str(Path(__file__).parent), path=str(path), what=what)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--csv-rows", type=int, default=2_000_000, help="rows of the CSV comparison (0: skip)"
    )
    args = ap.parse_args()
    spec = make_spec()
    cols = ["w", "y", "region", "age", "bmi"]
    with tempfile.TemporaryDirectory(prefix="dpate-bench-") as tmp:
        path = Path(tmp) / "site.parquet"
        t0 = time.perf_counter()
        write_file(path, args.rows)
        size_mb = os.path.getsize(path) / 1e6
        print(f"wrote {args.rows:,} rows ({size_mb:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        prepare_site_data(path, spec)  # warm-up (imports, page cache)
        prep = lambda: prepare_site_data(path, spec)  # noqa: E731
        plain = paired(lambda: pq.read_table(path, columns=cols), prep, args.repeat)
        dictionary = paired(
            lambda: pq.read_table(path, columns=cols, read_dictionary=["region"]), prep, args.repeat
        )
        pandas = paired(lambda: pq.read_table(path, columns=cols).to_pandas(), prep, args.repeat)
        data = prepare_site_data(path, spec)
        mem_read, mem_prep = peak_mib(path, "read"), peak_mib(path, "prepare")
        csv = None
        if args.csv_rows:
            csv_path = Path(tmp) / "site.csv"
            pacsv.write_csv(pq.read_table(path).slice(0, args.csv_rows), csv_path)
            csv = paired(
                lambda: pacsv.read_csv(csv_path),
                lambda: prepare_site_data(csv_path, spec),
                args.repeat,
            )
    print(f"cores: {os.cpu_count()}; {args.repeat} back-to-back pairs; best times, median ratios")
    print("baseline                              read s  prepare s  wall ratio  CPU ratio")
    rows = [
        ("read Parquet (pyarrow Table)", plain),
        ("read Parquet, text as dictionary", dictionary),
        ("read Parquet + to_pandas", pandas),
    ]
    if csv is not None:
        rows.append((f"read CSV ({args.csv_rows:,} rows, pyarrow)", csv))
    for label, r in rows:
        print(
            f"{label:<36} {r['base']:7.3f}  {r['cand']:9.3f}  {r['ratio_wall']:9.2f}x"
            f"  {r['ratio_cpu']:8.2f}x"
        )
    print("target: prepare <= 3x the read of the same Parquet file")
    print(
        f"peak RSS rise: read {mem_read:.0f} MiB, prepare {mem_prep:.0f} MiB "
        f"({mem_prep / mem_read:.2f}x); output arrays (w, y, x) "
        f"{(data.w.nbytes + data.y.nbytes + data.x.nbytes) / 2**20:.0f} MiB"
    )
    print(f"|X| = {data.domain_size}, N = {data.n:,}, clipped {data.report.clipped_high:,}")


if __name__ == "__main__":
    main()
