"""Wall time of the pipeline: ``dpate demo`` and a 3-site study of 10^6 records per site,
split into Prefect overhead and compute.

    python bench/bench_pipeline.py [--records 1000000] [--skip-demo]

Figures (printed; recorded in docs/reference/benchmarks.md, section "Pipeline"):

* ``dpate demo`` as a user runs it (a subprocess): with a fresh PREFECT_HOME (first run: the
  ephemeral server migrates its database), with a warm one, and re-run on the same folder
  (every release already recorded: nothing computed, nothing spent).
* the study flow on 3 sites x ``--records`` (ephemeral Prefect in this process, server already up),
  against the same work done by the same functions without Prefect, sequentially (the baseline,
  measured in the same run); overhead = flow wall time - baseline (the flow runs sites in
  parallel threads, so on more cores the overhead figure is an upper bound).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _env(prefect_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PREFECT_HOME=str(prefect_home),
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
    )
    return env


def _timed_demo(out: Path, prefect_home: Path) -> float:
    dpate = Path(sys.executable).with_name("dpate")
    t = time.perf_counter()
    subprocess.run(
        [str(dpate), "demo", "--out", str(out)],
        env=_env(prefect_home),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t


def bench_demo(tmp: Path) -> None:
    home = tmp / "prefect-home"
    cold = _timed_demo(tmp / "demo-1", home)
    warm = _timed_demo(tmp / "demo-2", home)
    again = _timed_demo(tmp / "demo-2", home)
    print(f"dpate demo, fresh PREFECT_HOME (first run)   {cold:6.1f} s")
    print(f"dpate demo, warm PREFECT_HOME                {warm:6.1f} s")
    print(f"dpate demo, re-run (all releases recorded)   {again:6.1f} s")


def _without_prefect(spec: str, sites: list[str], round: str) -> dict[str, float]:
    """The site releases and the aggregation by the same functions, no Prefect, sequential."""
    from dpate.ledger import PrivacyLedger
    from dpate.schemas.reports import read_report, software_version
    from dpate.schemas.site_data import prepare_site_data
    from dpate.settings import resolve_site
    from dpate.site.reports import site_report_bytes
    from dpate.storage import Store
    from dpate.tasks.site import plan_release
    from dpate_core import release as core_release
    from dpate_core.aggregation import aggregate

    t = {"read+validate": 0.0, "estimate+draw": 0.0, "ledger": 0.0, "publish+aggregate": 0.0}
    reports = []
    for site in sites:
        ctx = resolve_site(spec, site, round)
        s = ctx.spec.site(site)
        t0 = time.perf_counter()
        data = prepare_site_data(ctx.data_location, ctx.spec)
        t1 = time.perf_counter()
        with PrivacyLedger(ctx.ledger_url) as led:
            led.reserve(
                release_id=ctx.rid,
                study_id=ctx.study_id,
                site_id=site,
                spec_hash=ctx.spec.spec_hash,
                round=round,
                privacy=s.privacy,
                cap=s.lifetime_cap.params,
            )
            t2 = time.perf_counter()
            plan = plan_release(ctx, data)
            est = plan.estimate(core_release.draw_once(plan))
            t3 = time.perf_counter()
            committed = led.commit(
                ctx.rid, {"estimate": est.public_fields(), "software_version": software_version()}
            )
        t4 = time.perf_counter()
        store = Store(ctx.storage_url)
        key = Store.site_report_key(ctx.study_id, site, ctx.rid)
        store.publish(key, site_report_bytes(ctx, committed))
        reports.append(read_report(store.read(key), ctx.spec))
        t5 = time.perf_counter()
        t["read+validate"] += t1 - t0
        t["estimate+draw"] += t3 - t2
        t["ledger"] += (t2 - t1) + (t4 - t3)
        t["publish+aggregate"] += t5 - t4
    t0 = time.perf_counter()
    ests = [r.to_estimate() for r in reports]
    aggregate("mvagg", [e.tau for e in ests], [e.n for e in ests], [e.variance for e in ests])
    t["publish+aggregate"] += time.perf_counter() - t0
    return t


def bench_study(tmp: Path, records: int) -> None:
    from dpate.cli.demo_study import DemoSite, write_demo_study

    os.environ.update(_env(tmp / "prefect-home-study"))
    sites = (
        DemoSite("site-1", records, "1", "100"),
        DemoSite("site-2", records, "1/2", "100"),
        DemoSite("site-3", records, "2", "100"),
    )
    t = time.perf_counter()
    spec = str(write_demo_study(tmp / "study", 11, sites))
    # the sites' own configuration; ledgers are created explicitly (docs/how-to/ledger.md)
    from dpate.ledger import PrivacyLedger
    from dpate_core.privacy import PrivacyParams

    os.environ["DPATE_LEDGER_URL"] = f"sqlite:///{tmp / 'study' / 'ledgers'}/{{site}}.sqlite"
    os.environ["DPATE_SITE_LOG"] = str(tmp / "study" / "logs" / "{site}.log")
    for s in sites:
        url = os.environ["DPATE_LEDGER_URL"].replace("{site}", s.id)
        PrivacyLedger.init(url, s.id, PrivacyParams.of(s.cap, "1e-4")).close()
    print(
        f"\nstudy: 3 sites x {records:,} records (writing the Parquet files: "
        f"{time.perf_counter() - t:.1f} s)"
    )

    from prefect import flow

    from dpate.flows.study import study

    @flow(persist_result=False)
    def trivial() -> int:
        return 1

    t = time.perf_counter()
    trivial()
    startup = time.perf_counter() - t
    t = time.perf_counter()
    trivial()
    trivial_run = time.perf_counter() - t

    # warm the compiled kernels and imports once, outside both measurements
    _without_prefect(spec, ["site-1"], "warm-up")

    t = time.perf_counter()
    base = _without_prefect(spec, [s.id for s in sites], "baseline")
    baseline = time.perf_counter() - t
    t = time.perf_counter()
    out = study(spec=spec, round="flow")
    flow_wall = time.perf_counter() - t
    assert all(r["ok"] for r in out["sites"]), out["sites"]
    t = time.perf_counter()
    study(spec=spec, round="flow")
    rerun = time.perf_counter() - t

    print(f"ephemeral Prefect server start + first trivial flow   {startup:6.2f} s")
    print(f"one trivial flow run (server up)                        {trivial_run:6.2f} s")
    print(f"baseline without Prefect (sequential)                   {baseline:6.2f} s")
    for k, v in base.items():
        print(f"    {k:<22} {v:6.2f} s")
    print(f"study flow (3 site subflows in threads + aggregate)     {flow_wall:6.2f} s")
    print(
        f"    Prefect overhead = flow - baseline                   {flow_wall - baseline:6.2f} s "
        f"(flow / baseline = {flow_wall / baseline:.2f}x)"
    )
    print(f"study flow re-run (all recorded: nothing computed)      {rerun:6.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--skip-demo", action="store_true")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="dpate-bench-") as tmp:
        if not args.skip_demo:
            bench_demo(Path(tmp))
        bench_study(Path(tmp), args.records)


if __name__ == "__main__":
    main()
