"""Trigger-to-done time of the deployed study through a real Prefect server and workers, and how
it grows with the number of sites (one worker each); the 4-site STAR study also against the
embedded default (figures in docs/reference/benchmarks.md, "Production topology" and "Deployed study: 4
to 20 sites").

    python bench/bench_topology.py [--sites 4 20] [--repeats 1] [--embedded] [--pg]

For each site count, starts on loopback (as tests/topology does): a Prefect server (SQLite, or a
scratch PostgreSQL database with --pg; with an auth string), SeaweedFS as deployments/storage/
configures it, `prefect deploy` of
deployments/prefect.yaml (for more than 4 sites, the same file with one site block per site),
the zombie automation, one process worker per site and the coordinator's worker. With 4 sites
they are STAR's four; with more, STAR's records dealt round-robin to sites s01..sNN. Then times,
per repeat and with a fresh round (a new release at every site), the deployed study from the API
trigger to its final state (site runs on N workers -> aggregate -> result in S3).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.topology.services import PrefectServer, SeaweedS3, free_port  # noqa: E402
from tests.topology.star import (  # noqa: E402
    PREFECT_YAML,
    STAR_SITES,
    STUDY_ID,
    StarTopology,
    run_embedded,
    write_star_sites,
)


def _sites(n: int) -> tuple[str, ...]:
    return STAR_SITES if n == 4 else tuple(f"s{i:02d}" for i in range(1, n + 1))


def _write_data(root: Path, sites: tuple[str, ...]) -> dict[str, Path]:
    if sites == STAR_SITES:
        return write_star_sites(root)
    import pandas as pd

    frames = [pd.read_parquet(p) for p in write_star_sites(root / "_star").values()]
    records = pd.concat(frames, ignore_index=True)
    out = {}
    for i, site in enumerate(sites):
        d = root / site
        d.mkdir(parents=True, exist_ok=True)
        records.iloc[i :: len(sites)].to_parquet(d / "star.parquet", index=False)
        out[site] = d / "star.parquet"
    return out


def _prefect_yaml(root: Path, sites: tuple[str, ...]) -> Path:
    """deployments/prefect.yaml with one site block per site of ``sites``."""
    if sites == STAR_SITES:
        return PREFECT_YAML
    import yaml

    doc = yaml.safe_load(PREFECT_YAML.read_text())
    site_blocks = [d for d in doc["deployments"] if d["entrypoint"].startswith("dpate.flows.site_")]
    others = [d for d in doc["deployments"] if d not in site_blocks]
    template = site_blocks[0]
    blocks = []
    for site in sites:
        block = {**template, "name": site, "parameters": {"site": site}}
        block["work_pool"] = {**template["work_pool"], "name": f"site-{site}"}
        blocks.append(block)
    doc["deployments"] = blocks + others
    path = root / "prefect.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _site_lags(topo: StarTopology, round: str, t_trigger: float) -> list[float]:
    """Seconds from the trigger to each site run's end (server clock, same machine)."""
    ends = []
    for fr in topo.flow_runs():
        if fr.parameters.get("round") == round and "site" in fr.parameters and fr.end_time:
            ends.append(fr.end_time.timestamp() - t_trigger)
    return sorted(ends)


def bench(n: int, repeats: int, embedded: bool, root: Path, db: str | None = None) -> None:
    sites = _sites(n)
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}" if db else None
    server = PrefectServer(home=root / "prefect", port=free_port(), database_url=url)
    s3 = SeaweedS3(root=root / "s3", bucket="dpate", studies={STUDY_ID: sites})
    topo = None
    try:
        t0 = time.perf_counter()
        server.start()
        t_server = time.perf_counter() - t0
        s3.start()
        star_root = root / "star"
        topo = StarTopology(
            server,
            s3,
            star_root,
            sites,
            _write_data(star_root, sites),
            prefect_yaml=_prefect_yaml(root, sites),
        )
        t0 = time.perf_counter()
        topo.set_up()
        t_setup = time.perf_counter() - t0
        print(
            f"[{n} sites] server healthy {t_server:.1f} s; pools + deploy + workers {t_setup:.1f} s"
        )
        time.sleep(10)  # let every worker reach its polling loop
        walls = []
        for r in range(repeats):
            round = f"bench-{n}-{r}"
            t_trigger = time.time()
            t0 = time.perf_counter()
            run = topo.run_study(round, site_timeout_s=900)
            wall = time.perf_counter() - t0
            assert run.state.is_completed(), run.state
            result = topo.result(round)
            assert result is not None and result["complete"], result
            lags = _site_lags(topo, round, t_trigger)
            walls.append(wall)
            line = (
                f"[{n} sites] repeat {r}: trigger-to-done {wall:.1f} s; site runs done after"
                f" {lags[0]:.1f} (first) / {statistics.median(lags):.1f} (median) /"
                f" {lags[-1]:.1f} s (last)"
            )
            if embedded and sites == STAR_SITES:
                out = root / f"embedded-{r}"
                out.mkdir()
                emb, _ = run_embedded(star_root / "star.toml", star_root, out, round)
                line += f"; embedded (dpate run) {emb:.1f} s"
            print(line, flush=True)
        print(f"[{n} sites] median trigger-to-done {statistics.median(walls):.1f} s")
    finally:
        if topo is not None:
            topo.tear_down()
        s3.stop()
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, nargs="+", default=[4, 20])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--embedded", action="store_true", help="also time `dpate run` (4 sites)")
    ap.add_argument("--pg", action="store_true", help="Prefect on a scratch PostgreSQL database")
    args = ap.parse_args()
    for n in args.sites:
        root = Path(tempfile.mkdtemp(prefix=f"dpate-bench-topology-{n}-"))
        try:
            if args.pg:
                from tests.topology.conftest import scratch_database

                with scratch_database("dpate_bench") as db:
                    bench(n, args.repeats, args.embedded, root, db)
            else:
                bench(n, args.repeats, args.embedded, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
