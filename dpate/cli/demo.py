"""``dpate demo``: the demo study (:mod:`dpate.cli.demo_study`) written, run and reported."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from dpate.cli.environment import site_settings
from dpate.cli.output import console, err, print_result, print_site_failures
from dpate.cli.report import write_report
from dpate.cli.study import init_missing_ledgers, run_study
from dpate.errors import ExitCode

__all__ = ["demo"]


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="folder for everything the demo writes")
    ] = Path("dpate-demo"),
    seed: Annotated[
        int, typer.Option(help="seed of the synthetic data (noise is always secure)")
    ] = 2026,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show Prefect's logs")] = False,
) -> None:
    """A three-site synthetic observational study, end to end, in one folder.

    SmoothDPMatching at each site (its own ledger, budget and size), MVAgg on the reports, an
    HTML report with a forest plot. Re-running it spends nothing: the releases are recorded.
    Each site's ledger is created under the folder (OUT/ledgers/SITE.sqlite, with the
    spec's lifetime cap) when absent, and so is each site's report-signing key
    (OUT/keys/SITE.ed25519.pem, whose public half the spec lists: reports are signed by default);
    the operator logs go to OUT/logs/SITE.log.
    """
    from dpate.cli.demo_study import TRUE_ATE, demo_key_path, write_demo_study

    t0 = time.perf_counter()
    root = out.resolve()
    spec = write_demo_study(root, seed)
    console.print(f"demo study written to {out}/ (spec {spec.name}, 3 sites' records)")
    with site_settings(
        key=str(demo_key_path(root, "{site}")),
        ledger=str(root / "ledgers" / "{site}.sqlite"),
        storage=str(root / "published"),
        log=str(root / "logs" / "{site}.log"),
    ):
        init_missing_ledgers(str(spec))
        output = run_study(str(spec), None, verbose)
        html_path = write_report(str(spec), None, None, out / "report.html")
    failed = print_site_failures(output["sites"])
    result = output["result"]
    print_result(result, output["sites"])
    again = [r["site_id"] for r in output["sites"] if r.get("status") == "unchanged"]
    if again:
        console.print(
            f"(already released earlier, re-published from the ledgers, nothing spent: "
            f"{', '.join(again)})"
        )
    console.print(
        f"true ATE of the synthetic data: {TRUE_ATE}. Report: {html_path}. "
        f"Took {time.perf_counter() - t0:.1f} s."
    )
    if failed:
        err.print("partial result: the study was aggregated without the failed site(s) above")
        raise typer.Exit(int(ExitCode.PARTIAL))
