"""Wall time of the 4-site STAR study through a real Prefect server and workers versus the embedded
default, measured in the same run (figures in docs/benchmarks.md, section "Production topology").

    python bench/bench_topology.py [--repeats 2]

Starts on loopback (as tests/topology does): a Prefect server (SQLite), SeaweedFS S3 with one
identity per site, `prefect deploy` of deployments/prefect.yaml, one process worker per site and
the coordinator's worker. Then times, per repeat and each with a fresh round (a new release at
every site): the deployed study (API trigger -> site runs on 4 workers -> aggregate -> result in
S3) and `dpate run` of the same spec (ephemeral Prefect, local storage, SQLite ledgers).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.topology.services import (  # noqa: E402
    PrefectServer,
    SeaweedS3,
    admin_identity,
    aggregator_identity,
    free_port,
    site_identity,
)
from tests.topology.star import StarTopology, run_embedded, write_star_sites  # noqa: E402

SITES = ("rural", "suburban", "inner-city", "urban")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dpate-bench-topology-"))
    server = PrefectServer(home=root / "prefect", port=free_port())
    ids = {"admin": admin_identity(), "aggregator": aggregator_identity("dpate")}
    ids.update({s: site_identity(s, "dpate") for s in SITES})
    s3 = SeaweedS3(root=root / "s3", bucket="dpate", identities=ids)
    topo = None
    try:
        t0 = time.perf_counter()
        server.start()
        t_server = time.perf_counter() - t0
        s3.start()
        s3.ensure_bucket()
        topo = StarTopology(server, s3, root / "star", SITES, write_star_sites(root / "star"))
        t0 = time.perf_counter()
        topo.set_up()
        t_setup = time.perf_counter() - t0
        print(f"server healthy {t_server:.1f} s; pools + deploy + workers {t_setup:.1f} s")
        for r in range(args.repeats):
            t0 = time.perf_counter()
            run = topo.run_study(f"bench-{r}")
            deployed = time.perf_counter() - t0
            assert run.state.is_completed(), run.state
            out = root / f"embedded-{r}"
            out.mkdir()
            embedded, _ = run_embedded(
                root / "star" / "star.toml", root / "star", out, f"bench-{r}"
            )
            print(
                f"repeat {r}: deployed (server + 5 workers) {deployed:.1f} s, "
                f"embedded (dpate run) {embedded:.1f} s, ratio {deployed / embedded:.2f}"
            )
    finally:
        if topo is not None:
            topo.tear_down()
        s3.stop()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
