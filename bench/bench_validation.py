"""Site data validation and discretisation vs reading the same Parquet file.

Writes a Parquet file of N rows (treatment 0/1, an outcome, one categorical covariate with 5 text
levels, two numeric covariates cut at public edges), then times, in the same run:

- baseline: ``pyarrow.parquet.read_table`` of the spec's columns (the cost of reading at all),
  also with ``to_pandas`` and with the text column read as a dictionary (as preparation reads it);
- ``prepare_site_data(path, spec)``: read + pandera validation + clipping + discretisation.

Prints the best of ``--repeat`` runs of each and the ratio (target: at most 3x the read).
Usage: ``python bench/bench_validation.py [--rows 10000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.site_data import prepare_site_data
from schemas.spec import StudySpec

LEVELS = ["north", "south", "east", "west", "centre"]


def make_spec() -> StudySpec:
    return StudySpec.from_dict(
        {
            "study_id": "bench",
            "design": "observational",
            "estimator": "smooth_matching",
            "reports": "file:///tmp/reports",
            "treatment": {"column": "w"},
            "outcome": {"column": "y", "bound": 1.0, "policy": "clip"},
            "covariates": [
                {"kind": "categorical", "column": "region", "levels": LEVELS},
                {"kind": "numeric", "column": "age", "edges": [0, 18, 30, 45, 60, 75, "inf"]},
                {"kind": "numeric", "column": "bmi", "edges": ["-inf", 18.5, 25, 30, "inf"]},
            ],
            "sites": [
                {
                    "id": "a",
                    "data": "a.parquet",
                    "epsilon": "1",
                    "delta": "1e-5",
                    "lifetime_cap": {"epsilon": "1", "delta": "1e-5"},
                }
            ],
        }
    )


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


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
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
        t_read = best(lambda: pq.read_table(path, columns=cols), args.repeat)
        t_read_pd = best(lambda: pq.read_table(path, columns=cols).to_pandas(), args.repeat)
        t_read_dict = best(
            lambda: pq.read_table(path, columns=cols, read_dictionary=["region"]), args.repeat
        )
        t_prep = best(lambda: prepare_site_data(path, spec), args.repeat)
        data = prepare_site_data(path, spec)
    print(f"cores: {os.cpu_count()}, best of {args.repeat}")
    print(f"read Parquet (pyarrow Table)           {t_read:7.3f} s")
    print(f"read Parquet + to_pandas               {t_read_pd:7.3f} s")
    print(f"read Parquet, text as dictionary       {t_read_dict:7.3f} s")
    print(f"prepare_site_data (read+validate+bin)  {t_prep:7.3f} s")
    print(f"ratio prepare / read                   {t_prep / t_read:7.2f} x   (target <= 3)")
    print(f"ratio prepare / (read + to_pandas)     {t_prep / t_read_pd:7.2f} x")
    print(f"ratio prepare / read as dictionary     {t_prep / t_read_dict:7.2f} x")
    print(f"|X| = {data.domain_size}, N = {data.n:,}, clipped {data.report.clipped_high:,}")


if __name__ == "__main__":
    main()
