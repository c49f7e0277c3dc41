"""The ``dpate`` command line (typer). Heavy imports (Prefect) happen inside the commands.

Prefect runs embedded (an ephemeral server) unless ``PREFECT_API_URL`` points at a server. The
commands set quiet, offline defaults first: analytics off, a start-up timeout long enough for a
first run's database migrations, Prefect's console logs at WARNING (``--verbose`` shows them).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from flows.cli_data import data_app
from flows.cli_experiments import experiments

app = typer.Typer(help="Differentially private multi-site ATE estimation.", no_args_is_help=True)
ledger_app = typer.Typer(help="The site's privacy ledger: spend, audit, cap.", no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")
console = Console()
app.add_typer(data_app, name="data")
app.command("experiments")(experiments)
err = Console(stderr=True)


@app.callback()
def main() -> None:
    """Differentially private multi-site ATE estimation."""


def _prefect_env(verbose: bool = False) -> None:
    """Offline, quiet defaults for Prefect; call before importing it."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if not os.environ.get("PREFECT_API_URL"):
        # the embedded server: no automations, no event feed, no vacuum (fewer SQLite writers)
        for service in ("EVENT_PERSISTER", "TRIGGERS", "DB_VACUUM"):
            os.environ.setdefault(f"PREFECT_SERVER_SERVICES_{service}_ENABLED", "false")
    if not verbose:
        for handler in ("CONSOLE", "CONSOLE_FLOW_RUNS"):
            os.environ.setdefault(f"PREFECT_LOGGING_HANDLERS_{handler}_LEVEL", "WARNING")


def _fail(exc: BaseException, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
    return typer.Exit(code)


# -- printing ---------------------------------------------------------------------------------


def _sites_table(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> Table:
    table = Table(title=f"{result['study_id']}, round {result['round']}: sites")
    for col in ("site", "N", "epsilon", "delta", "tau (DP)", "95% CI", "status"):
        table.add_column(col, justify="right" if col not in ("site", "status") else "left")
    errors = {r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")}
    for s in result["sites"]:
        if "tau" in s:
            a, b = s["ci95"]
            table.add_row(
                s["site_id"],
                str(s["n"]),
                s["epsilon"],
                s["delta"],
                f"{s['tau']:.4f}",
                f"{a:.4f} to {b:.4f}",
                s["status"].replace("_", " "),
            )
        else:
            table.add_row(s["site_id"], "", "", "", "", "", s["status"])
    notes = [
        f"{s['site_id']}: {errors.get(s['site_id']) or s['reason']}"
        for s in result["sites"]
        if s["status"] in ("missing", "rejected", "excluded")
    ]
    not_used = [s for s in result["sites"] if s["status"] == "not_used"]
    if not_used:
        notes.append(f"not used: {not_used[0]['reason']}")
    if notes:
        table.caption = "\n".join(notes)
    return table


def _print_result(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> None:
    console.print(_sites_table(result, runs))
    lo, hi = result["ci95"]
    used = ", ".join(s["site_id"] for s in result["sites"] if s["status"] == "used")
    console.print(
        f"[bold]{result['aggregator']} estimate {result['estimate']:.4f}[/bold] "
        f"(95% CI {lo:.4f} to {hi:.4f}; variance {result['variance']:.3g}); sites used: {used}"
    )
    if "uri" in result:
        console.print(f"result: {result['uri']}")


def _print_site_failures(runs: list[dict[str, Any]]) -> None:
    for r in runs:
        if not r.get("ok"):
            err.print(f"[yellow]site {r['site_id']} failed:[/yellow] {r['error']}", highlight=False)


# -- running studies --------------------------------------------------------------------------


def _run_study(
    spec: str, round: str | None, storage: str | None, ledger: str | None, verbose: bool
) -> dict[str, Any]:
    _prefect_env(verbose)
    with console.status("starting Prefect and running the study flow ...", spinner="dots"):
        from flows.study import state_error, state_output, study

        state = study(
            spec=spec, round=round, storage_url=storage, ledger_url=ledger, return_state=True
        )
    if not state.is_completed():
        raise _fail(RuntimeError(state_error(state)))
    return state_output(state, lambda: _study_from_storage(spec, round, storage, ledger))


def _study_from_storage(spec: str, round: str | None, storage: str | None, ledger: str | None):
    from tasks.aggregate import published_result
    from tasks.settings import resolve_site, resolve_study
    from tasks.site import published_site

    ctx = resolve_study(spec, round, storage)
    sites = []
    for site in ctx.site_ids:
        try:
            s_ctx = resolve_site(spec, site, round, None, ledger, storage)
            sites.append({"ok": True, **published_site(s_ctx)})
        except FileNotFoundError as exc:
            sites.append({"site_id": site, "ok": False, "error": str(exc)})
    found = published_result(ctx)
    if found is None:
        raise _fail(RuntimeError(f"no result of study {ctx.study_id} round {ctx.round} found"))
    return {"sites": sites, "result": {**found[1], "uri": found[0]}}


@app.command()
def demo(
    out: Path = typer.Option(  # noqa: B008
        Path("dpate-demo"), "--out", help="folder for everything the demo writes"
    ),
    seed: int = typer.Option(2026, help="seed of the synthetic data (noise is always secure)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="show Prefect's logs"),
) -> None:
    """A three-site synthetic observational study, end to end, in one folder.

    SmoothDPMatching at each site (its own ledger, budget and size), MVAgg on the reports, an
    HTML report with a forest plot. Re-running it spends nothing: the releases are recorded.
    """
    from flows.demo import TRUE_ATE, write_demo_study

    t0 = time.perf_counter()
    spec = write_demo_study(out.resolve(), seed)
    console.print(f"demo study written to {out}/ (spec {spec.name}, 3 sites' records)")
    output = _run_study(str(spec), None, None, None, verbose)
    _print_site_failures(output["sites"])
    result = output["result"]
    _print_result(result, output["sites"])
    again = [r["site_id"] for r in output["sites"] if r.get("status") == "unchanged"]
    if again:
        console.print(
            f"(already released earlier, re-published from the ledgers, nothing spent: "
            f"{', '.join(again)})"
        )
    html_path = _write_report(str(spec), None, None, out / "report.html")
    console.print(
        f"true ATE of the synthetic data: {TRUE_ATE}. Report: {html_path}. "
        f"Took {time.perf_counter() - t0:.1f} s."
    )


@app.command("run")
def run_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    storage: str = typer.Option(
        None, help="publication root URL (default: DPATE_STORAGE_URL or the spec's 'reports')"
    ),
    ledger: str = typer.Option(None, help="ledger URL for every site; may contain {site}"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a whole study here: every site's release (in parallel), then the aggregation."""
    output = _run_study(spec, round, storage, ledger, verbose)
    _print_site_failures(output["sites"])
    _print_result(output["result"], output["sites"])


@app.command("site-release")
def site_release_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    site: str = typer.Option(..., "--site", help="this site's id in the spec"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    data: str = typer.Option(None, help="the site's data (default: DPATE_DATA_PATH or the spec)"),
    ledger: str = typer.Option(
        None,
        help="ledger URL (default: DPATE_LEDGER_URL, the spec, or <spec dir>/ledgers/<site>.sqlite)",
    ),
    storage: str = typer.Option(None, help="publication root URL"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """One site's release: validate, reserve budget, draw once, commit, publish."""
    _prefect_env(verbose)
    with console.status(f"releasing site {site} ...", spinner="dots"):
        from flows.study import release_one_site

        r = release_one_site(spec, site, round, data, ledger, storage)
    if not r["ok"]:
        raise _fail(RuntimeError(r["error"]))
    verb = "published" if r["status"] == "written" else "already published (recorded release)"
    console.print(
        f"site {site}: tau {r['tau']:.4f}, variance {r['variance']:.3g}, N {r['n']}, "
        f"epsilon {r['epsilon']}, delta {r['delta']}; report {verb}: {r['report']}"
    )


@app.command("aggregate")
def aggregate_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    storage: str = typer.Option(None, help="publication root URL"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Combine the published site reports of a round (the server's step)."""
    _prefect_env(verbose)
    with console.status("aggregating ...", spinner="dots"):
        from flows.aggregate import aggregate_study

        state = aggregate_study(spec=spec, round=round, storage_url=storage, return_state=True)
    from flows.study import state_error, state_output
    from tasks.aggregate import published_result
    from tasks.settings import resolve_study

    if not state.is_completed():
        raise _fail(RuntimeError(state_error(state)))

    def from_storage() -> dict[str, Any]:
        uri, doc = published_result(resolve_study(spec, round, storage)) or ("", {})
        return {**doc, "uri": uri}

    _print_result(state_output(state, from_storage))


# -- the report -------------------------------------------------------------------------------


def _write_report(spec: str, round: str | None, storage: str | None, out: Path) -> Path:
    from tasks.aggregate import published_result
    from tasks.settings import resolve_site, resolve_study

    ctx = resolve_study(spec, round, storage)
    found = published_result(ctx)
    if found is None:
        raise _fail(
            RuntimeError(
                f"no result of study {ctx.study_id} round {ctx.round} is published under "
                f"{ctx.storage_url}: run `dpate aggregate {spec}` first"
            )
        )
    uri, result = found
    spends = {}
    for site in ctx.site_ids:
        spends[site] = _local_spend(
            resolve_site(spec, site, round, None, None, storage).ledger_url, site
        )
    from tasks.report import render_html

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(result, uri, spends), encoding="utf-8")
    return out


def _local_spend(url: str, site: str):
    """The site's lifetime spend when its ledger is reachable from here (never created)."""
    from sqlalchemy.engine import make_url

    from tasks.ledger import LedgerError, PrivacyLedger

    u = make_url(url)
    if u.get_backend_name() == "sqlite" and not (u.database and Path(u.database).exists()):
        return None
    try:
        with PrivacyLedger(url) as led:
            return led.spend(site)
    except (LedgerError, Exception):
        return None


@app.command("report")
def report_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    storage: str = typer.Option(None, help="publication root URL"),
    out: Path = typer.Option(Path("dpate-report.html"), "--out", "-o", help="HTML file to write"),  # noqa: B008
) -> None:
    """A self-contained HTML report: forest plot, chosen sites, estimate and CI, privacy spend."""
    path = _write_report(spec, round, storage, out)
    console.print(f"report written: {path}")


# -- the ledger -------------------------------------------------------------------------------


def _ledger_url(site: str | None, ledger: str | None, spec: str | None) -> str:
    from tasks.settings import resolve_site

    if ledger:
        return ledger.replace("{site}", site or "")
    if spec:
        if not site:
            raise _fail(ValueError("give the site (SITE argument) to find its ledger in the spec"))
        return resolve_site(spec, site).ledger_url
    env = os.environ.get("DPATE_LEDGER_URL")
    if env:
        return env.replace("{site}", site or "")
    raise _fail(
        ValueError("say which ledger: --ledger URL, --spec STUDY.toml, or DPATE_LEDGER_URL")
    )


_LEDGER_OPT = typer.Option(None, "--ledger", help="ledger URL (SQLAlchemy) or SQLite path")
_SPEC_OPT = typer.Option(None, "--spec", help="study spec to find the site's ledger in")


@ledger_app.command("show")
def ledger_show(
    site: str = typer.Argument(..., help="site id"),
    ledger: str = _LEDGER_OPT,
    spec: str = _SPEC_OPT,
) -> None:
    """The site's lifetime cap, spend per study and remaining budget (exact)."""
    from tasks.ledger import PrivacyLedger

    with PrivacyLedger(_ledger_url(site, ledger, spec)) as led:
        s = led.spend(site)
    if s.cap is None and not s.per_study:
        console.print(f"site {site}: no events in this ledger")
        return
    table = Table(title=f"privacy ledger of site {site}")
    for col in ("study", "epsilon spent", "delta spent", "releases reserved", "committed"):
        table.add_column(col)
    for study, p in sorted(s.per_study.items()):
        reserved, committed = s.releases.get(study, (0, 0))
        table.add_row(study, str(p.epsilon), str(p.delta), str(reserved), str(committed))
    table.add_row("[b]total[/b]", str(s.spent.epsilon), str(s.spent.delta), "", "")
    console.print(table)
    if s.cap is not None and s.remaining is not None:
        console.print(
            f"lifetime cap: epsilon {s.cap.epsilon}, delta {s.cap.delta}; remaining: "
            f"epsilon {s.remaining.epsilon} (~{float(s.remaining.epsilon):.4g}), "
            f"delta {s.remaining.delta}"
        )


@ledger_app.command("verify")
def ledger_verify(
    site: str = typer.Argument(None, help="site id (to find its ledger through --spec)"),
    ledger: str = _LEDGER_OPT,
    spec: str = _SPEC_OPT,
    expect_head: str = typer.Option(
        None, help="a head hash noted earlier (detects removed last rows)"
    ),
) -> None:
    """Recompute the hash chain and the budget rules; exit 1 on any problem."""
    from tasks.ledger import PrivacyLedger

    with PrivacyLedger(_ledger_url(site, ledger, spec)) as led:
        report = led.verify(expect_head=expect_head)
    if report.ok:
        console.print(f"ledger OK: {report.rows} rows, head {report.head_hash}")
        return
    for p in report.problems:
        err.print(f"[red]{p}[/red]", highlight=False)
    err.print(
        f"ledger FAILED verification: {len(report.problems)} problem(s) in {report.rows} rows"
    )
    raise typer.Exit(1)


@ledger_app.command("set-cap")
def ledger_set_cap(
    site: str = typer.Argument(..., help="site id"),
    epsilon: str = typer.Option(..., help="new lifetime epsilon cap (exact, e.g. '5' or '7/2')"),
    delta: str = typer.Option(..., help="new lifetime delta cap (e.g. '1e-4')"),
    reason: str = typer.Option(..., help="why (kept in the ledger for auditors)"),
    ledger: str = _LEDGER_OPT,
    spec: str = _SPEC_OPT,
) -> None:
    """Record a new lifetime cap for the site (an explicit, audited CAP event)."""
    from dpate_core.privacy import PrivacyParams
    from tasks.ledger import PrivacyLedger

    try:
        cap = PrivacyParams.of(epsilon, delta)
    except (TypeError, ValueError) as exc:
        raise _fail(exc) from None
    with PrivacyLedger(_ledger_url(site, ledger, spec)) as led:
        led.set_cap(site, cap, reason)
        s = led.spend(site)
    console.print(
        f"site {site}: lifetime cap now epsilon {cap.epsilon}, delta {cap.delta} "
        f"(spent epsilon {s.spent.epsilon}, delta {s.spent.delta})"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
