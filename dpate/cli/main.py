"""The ``dpate`` command line (typer). Heavy imports (Prefect) happen inside the commands.

Prefect runs embedded (an ephemeral server) unless ``PREFECT_API_URL`` points at a server. The
commands set quiet, offline defaults first: analytics off, a start-up timeout long enough for a
first run's database migrations, Prefect's console logs at WARNING (``--verbose`` shows them).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from dpate.cli.check import check
from dpate.cli.data import data_app
from dpate.cli.errors import (
    DEBUG,
    CliGroup,
    ExitCode,
    classify,
    print_failures,
    quiet_prefect_console,
    summary_code,
)
from dpate.cli.plan import plan
from dpate.cli.site_keys import site_app
from dpate.experiments.cli import experiments
from schemas.result import StudyResult

app = typer.Typer(
    help="Differentially private multi-site ATE estimation.", no_args_is_help=True, cls=CliGroup
)
ledger_app = typer.Typer(help="The site's privacy ledger: spend, audit, cap.", no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")
console = Console()
app.add_typer(data_app, name="data")
app.command("experiments")(experiments)
app.command("plan")(plan)
app.command("check")(check)
app.add_typer(site_app, name="site")  # dpate site keygen (dpate.cli.site_keys)
err = Console(stderr=True)


@app.callback()
def main(
    debug: bool = typer.Option(
        False, "--debug", help="show Prefect's logs and the traceback of an unexpected error"
    ),
) -> None:
    """Differentially private multi-site ATE estimation.

    Errors end with one short message and an exit code naming the cause: 3 spec, 4 site data,
    5 ledger, 6 report, 7 storage, 8 site settings, 10 partial result, 11 sites failed for
    different causes, 1 unexpected (docs/pipeline.md, "Checking before spending, and exit
    codes")."""
    DEBUG["on"] = debug or os.environ.get("DPATE_DEBUG", "").strip() in ("1", "true", "yes")


def _prefect_env(verbose: bool = False) -> None:
    """Offline, quiet defaults for Prefect; call before importing it."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if not os.environ.get("PREFECT_API_URL"):
        # the embedded server: no automations, no event feed, no vacuum (fewer SQLite writers)
        for service in ("EVENT_PERSISTER", "TRIGGERS", "DB_VACUUM"):
            os.environ.setdefault(f"PREFECT_SERVER_SERVICES_{service}_ENABLED", "false")
    if not (verbose or DEBUG["on"]):
        for handler in ("CONSOLE", "CONSOLE_FLOW_RUNS"):
            os.environ.setdefault(f"PREFECT_LOGGING_HANDLERS_{handler}_LEVEL", "WARNING")
        quiet_prefect_console()  # Prefect's console output to a log file, not stderr


def _fail(exc: BaseException, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
    return typer.Exit(code)


# -- printing ---------------------------------------------------------------------------------


def _sites_table(result: StudyResult, runs: list[dict[str, Any]] | None = None) -> Table:
    """The result's table of sites, a failed run's error in place of the published reason."""
    return result.table({r["site_id"]: r.get("error") for r in runs or [] if not r.get("ok")})


def _print_result(result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> None:
    """The table, the combined estimate and where the result is (``result["uri"]``, if given)."""
    typed = StudyResult.of(result)
    console.print(_sites_table(typed, runs))
    console.print(
        f"[bold]{typed.aggregator} estimate {typed.estimate:.4f}[/bold] "
        f"(95% CI {typed.interval_text()}; variance {typed.variance:.3g}); sites used: "
        f"{', '.join(typed.used)}"
    )
    if typed.uninformative:
        console.print(
            "[yellow]the combined interval is wider than the outcome's whole range: the study "
            "cannot answer its question at this budget (see `dpate plan`)[/yellow]"
        )
    if "uri" in result:
        console.print(f"result: {result['uri']}")


def _print_site_failures(runs: list[dict[str, Any]]) -> int:
    """Each failed site's cause, one short block each, on stderr; returns how many failed."""
    failures = [classify(r.get("error") or "", r["site_id"]) for r in runs if not r.get("ok")]
    print_failures(failures, err)
    return len(failures)


# -- running studies --------------------------------------------------------------------------


@contextmanager
def _site_settings(**values: str | None):
    """The local operator's options (``--ledger``, ``--data``, ``--storage``) as this process's
    site configuration (``DPATE_LEDGER_URL`` ...) for the duration of a command; the flows read
    nothing else (tasks/settings.py). Restored afterwards."""
    names = {
        "ledger": "DPATE_LEDGER_URL",
        "data": "DPATE_DATA_PATH",
        "storage": "DPATE_STORAGE_URL",
        "log": "DPATE_SITE_LOG",
    }
    saved = {env: os.environ.get(env) for env in names.values()}
    try:
        for key, value in values.items():
            if value:
                os.environ[names[key]] = value
        yield
    finally:
        for env, old in saved.items():
            if old is None:
                os.environ.pop(env, None)
            else:
                os.environ[env] = old


def _init_ledgers(spec: str) -> None:
    """Create each site's ledger (where the site configuration puts it) with the spec's lifetime
    cap, unless it exists; an existing ledger keeps its recorded cap (a different one is refused
    at the release, CapMismatchError)."""
    from tasks.ledger import LedgerError, PrivacyLedger, ledger_exists
    from tasks.settings import site_ledger_url

    try:
        study = _load_spec(spec)
        for site in study.sites:
            url = site_ledger_url(site.id, study.study_id)
            if ledger_exists(url):
                continue
            cap = site.lifetime_cap.params
            PrivacyLedger.init(url, site.id, cap, reason=f"dpate run --init-ledgers {spec}").close()
            console.print(
                f"site {site.id}: ledger created at {url}, lifetime cap epsilon {cap.epsilon}, "
                f"delta {cap.delta}",
                soft_wrap=True,
            )
    except (LedgerError, ValueError) as exc:
        raise _fail(exc) from None


def _load_spec(spec: str):
    from tasks.settings import load_study_spec

    return load_study_spec(spec)


def _run_study(spec: str, round: str | None, verbose: bool) -> dict[str, Any]:
    _load_spec(spec)  # a spec error ends the command here, before Prefect starts
    _prefect_env(verbose)
    with console.status("starting Prefect and running the study flow ...", spinner="dots"):
        from flows.study import state_error, state_output, study

        state = study(spec=spec, round=round, return_state=True)
    if not state.is_completed():
        raise _study_failed(state_error(state), _sites_of_failed_run(state))
    return state_output(state, lambda: _study_from_storage(spec, round))


def _sites_of_failed_run(state: Any) -> list[dict[str, Any]]:
    """The per-site outcomes a failed study run carries (flows.study; public messages)."""
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:  # no result held in this process: the study's message is all we have
        return []
    return list(getattr(exc, "sites", None) or [])


_INNER_TYPE = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception): ")


def _study_failed(error: str, sites: list[dict[str, Any]]) -> typer.Exit:
    """One line for the study, then each failed site's cause; the exit code names the cause
    (the sites' common cause, or SITES_FAILED when they differ)."""
    study = classify(error)
    study = type(study)(None, "study failed", _INNER_TYPE.sub("", study.message), study.code)
    failures = [classify(r.get("error") or "", r["site_id"]) for r in sites if not r.get("ok")]
    print_failures([study, *failures], err)
    return typer.Exit(int(summary_code(failures) if failures else study.code))


def _study_from_storage(spec: str, round: str | None):
    from tasks.aggregate import published_result
    from tasks.settings import resolve_site, resolve_study
    from tasks.site import published_site

    ctx = resolve_study(spec, round)
    sites = []
    for site in ctx.site_ids:
        try:
            sites.append({"ok": True, **published_site(resolve_site(spec, site, round))})
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
    Each site's ledger is created under the folder (``<out>/ledgers/<site>.sqlite``, with the
    spec's lifetime cap) when absent; the operator logs go to ``<out>/logs/<site>.log``.
    """
    from dpate.cli.demo_study import TRUE_ATE, write_demo_study

    t0 = time.perf_counter()
    root = out.resolve()
    spec = write_demo_study(root, seed)
    console.print(f"demo study written to {out}/ (spec {spec.name}, 3 sites' records)")
    with _site_settings(
        ledger=str(root / "ledgers" / "{site}.sqlite"),
        storage=str(root / "published"),
        log=str(root / "logs" / "{site}.log"),
    ):
        _init_ledgers(str(spec))
        output = _run_study(str(spec), None, verbose)
        html_path = _write_report(str(spec), None, None, out / "report.html")
    failed = _print_site_failures(output["sites"])
    result = output["result"]
    _print_result(result, output["sites"])
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


@app.command("run")
def run_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    storage: str = typer.Option(
        None, help="publication root URL (sets DPATE_STORAGE_URL; default: the spec's 'reports')"
    ),
    ledger: str = typer.Option(
        None,
        help="ledger URL for every site, may contain {site} (sets DPATE_LEDGER_URL; default "
        "$DPATE_HOME/ledgers/<site>.sqlite)",
    ),
    init_ledgers: bool = typer.Option(
        False,
        "--init-ledgers",
        help="create each missing site ledger first, pinning the spec's lifetime cap",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a whole study here: every site's release (in parallel), then the aggregation.

    This machine is every site: its options are the sites' own configuration. A site's ledger
    must exist (``dpate ledger init``, or ``--init-ledgers``)."""
    with _site_settings(ledger=ledger, storage=storage):
        if init_ledgers:
            _init_ledgers(spec)
        output = _run_study(spec, round, verbose)
    _print_result(output["result"], output["sites"])
    if _print_site_failures(output["sites"]):
        err.print("partial result: the study was aggregated without the failed site(s) above")
        raise typer.Exit(int(ExitCode.PARTIAL))


@app.command("site-release")
def site_release_cmd(
    spec: str = typer.Argument(..., help="study spec (TOML path or fsspec URL)"),
    site: str = typer.Option(..., "--site", help="this site's id in the spec"),
    round: str = typer.Option(None, help="round label (default: the spec's 'release')"),
    data: str = typer.Option(
        None,
        help="the site's data (sets DPATE_DATA_PATH; default: the spec's, if relative and "
        "inside the spec's folder)",
    ),
    ledger: str = typer.Option(
        None,
        help="ledger URL (sets DPATE_LEDGER_URL; default $DPATE_HOME/ledgers/<site>.sqlite); "
        "it must exist (dpate ledger init)",
    ),
    storage: str = typer.Option(
        None, help="publication root URL (sets DPATE_STORAGE_URL; default: the spec's 'reports')"
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """One site's release: validate, reserve budget, draw once, commit, publish."""
    _load_spec(spec).site(site)  # spec error or unknown site: ends here, before Prefect starts
    _prefect_env(verbose)
    with (
        _site_settings(ledger=ledger, data=data, storage=storage),
        console.status(f"releasing site {site} ...", spinner="dots"),
    ):
        from flows.study import release_one_site

        r = release_one_site(spec, site, round)
    if not r["ok"]:
        failure = classify(r["error"], site)
        print_failures([failure], err)
        raise typer.Exit(int(failure.code))
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
    _load_spec(spec)  # a spec error ends the command here, before Prefect starts
    _prefect_env(verbose)
    with console.status("aggregating ...", spinner="dots"):
        from flows.aggregate import aggregate_study

        state = aggregate_study(spec=spec, round=round, storage_url=storage, return_state=True)
    from flows.study import state_error, state_output
    from tasks.aggregate import published_result
    from tasks.settings import resolve_study

    if not state.is_completed():
        failure = classify(state_error(state))
        print_failures([failure], err)
        raise typer.Exit(int(failure.code))

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
            ),
            int(ExitCode.REPORT),
        )
    uri, result = found
    spends = {}
    for site in ctx.site_ids:
        try:
            url = resolve_site(spec, site, round).ledger_url
        except (ValueError, KeyError):  # no ledger configured here: not this machine's site
            spends[site] = None
            continue
        spends[site] = _local_spend(url, site)
    from tasks.report import render_html

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(StudyResult.of(result), uri, spends), encoding="utf-8")
    return out


def _local_spend(url: str, site: str):
    """The site's lifetime spend when its ledger is reachable from here (never created)."""
    from tasks.ledger import LedgerError, PrivacyLedger

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
    _load_spec(spec)  # a spec error ends the command here with its own exit code
    path = _write_report(spec, round, storage, out)
    console.print(f"report written: {path}")


# -- the ledger -------------------------------------------------------------------------------


def _ledger_url(site: str | None, ledger: str | None) -> str:
    """``--ledger``, else the site's configuration (DPATE_LEDGER_URL or DPATE_SITE_CONFIG's
    ``ledger``), else the site's default ``$DPATE_HOME/ledgers/<site>.sqlite``."""
    from tasks.ledger import as_sqlalchemy_url
    from tasks.settings import site_ledger_url

    if ledger:
        return as_sqlalchemy_url(ledger.replace("{site}", site or ""))
    if site:
        try:
            return site_ledger_url(site, "{study}")
        except ValueError as exc:
            raise _fail(exc) from None
    raise _fail(ValueError("say which ledger: SITE (its configured ledger) or --ledger URL"))


def _open(url: str, site: str | None):
    from tasks.ledger import LedgerError, PrivacyLedger

    try:
        return PrivacyLedger(url, site=site)
    except LedgerError as exc:
        raise _fail(exc) from None


def _plain(text: str) -> None:
    """Print without wrapping (hashes and ids are copied whole)."""
    console.print(text, soft_wrap=True, highlight=False, markup=False)


_LEDGER_OPT = typer.Option(
    None,
    "--ledger",
    help="ledger URL (SQLAlchemy) or SQLite path (default: the site's DPATE_LEDGER_URL, site "
    "config, or $DPATE_HOME/ledgers/<site>.sqlite)",
)
_JSON_OPT = typer.Option(False, "--json", help="machine-readable output")


@ledger_app.command("init")
def ledger_init(
    site: str = typer.Argument(..., help="site id"),
    epsilon: str = typer.Option(..., help="lifetime epsilon cap (exact, e.g. '5' or '7/2')"),
    delta: str = typer.Option(..., help="lifetime delta cap (e.g. '1e-4')"),
    ledger: str = _LEDGER_OPT,
    reason: str = typer.Option(
        "initial lifetime cap (dpate ledger init)", help="kept in the ledger for auditors"
    ),
) -> None:
    """Create the site's ledger and pin its lifetime cap (a CAP event). The only way a ledger
    is created; running it again with the same cap changes nothing."""
    from dpate_core.privacy import PrivacyParams
    from tasks.ledger import LedgerError, PrivacyLedger

    url = _ledger_url(site, ledger)
    try:
        cap = PrivacyParams.of(epsilon, delta)
        with PrivacyLedger.init(url, site, cap, reason=reason) as led:
            s = led.spend(site)
    except (TypeError, ValueError, LedgerError) as exc:
        raise _fail(exc) from None
    _plain(
        f"site {site}: ledger {url}: lifetime cap epsilon {cap.epsilon}, delta {cap.delta} "
        f"(spent epsilon {s.spent.epsilon}, delta {s.spent.delta})"
    )


def _pair(p) -> dict[str, str] | None:
    return None if p is None else {"epsilon": str(p.epsilon), "delta": str(p.delta)}


@ledger_app.command("show")
def ledger_show(
    site: str = typer.Argument(..., help="site id"),
    ledger: str = _LEDGER_OPT,
    as_json: bool = _JSON_OPT,
) -> None:
    """The site's lifetime cap, spend per study and remaining budget (exact)."""
    url = _ledger_url(site, ledger)
    with _open(url, site) as led:
        s = led.spend(site)
    if as_json:
        doc = {
            "site_id": site,
            "ledger": url,
            "cap": _pair(s.cap),
            "spent": _pair(s.spent),
            "remaining": _pair(s.remaining),
            "studies": {
                study: {
                    **(_pair(p) or {}),
                    "reserved": s.releases.get(study, (0, 0))[0],
                    "committed": s.releases.get(study, (0, 0))[1],
                }
                for study, p in sorted(s.per_study.items())
            },
        }
        print(json.dumps(doc, indent=2))
        return
    if s.cap is None and not s.per_study:
        _plain(f"site {site}: no events in the ledger at {url}")
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
        _plain(
            f"lifetime cap: epsilon {s.cap.epsilon}, delta {s.cap.delta}; remaining: "
            f"epsilon {s.remaining.epsilon} (~{float(s.remaining.epsilon):.4g}), "
            f"delta {s.remaining.delta}"
        )


def _storage_root(site: str, storage: str | None) -> str:
    """``--storage``, else the site's own publication root (DPATE_STORAGE_URL or the site
    config's ``storage``): the root holding ``<study>/sites/<site>/``."""
    from tasks.settings import SettingsError, site_config

    try:
        root = storage or site_config(site, "{study}").storage
    except SettingsError as exc:
        raise _fail(exc) from None
    if not root or "{study}" in root:
        raise _fail(
            ValueError(
                f"say where site {site} publishes: --storage URL, the root holding "
                f"<study>/sites/{site}/ (default: the site's DPATE_STORAGE_URL or 'storage' in "
                f"its site config, without {{study}}); found {root!r}"
            ),
            2,
        )
    return root


@ledger_app.command("verify")
def ledger_verify(
    site: str = typer.Argument(None, help="site id (to find its configured ledger)"),
    ledger: str = _LEDGER_OPT,
    expect_head: str = typer.Option(
        None, help="a head hash noted earlier (detects removed last rows)"
    ),
    against_reports: bool = typer.Option(
        False,
        "--against-reports",
        help="also check every ledger head the site has published (its reports, and the "
        "results that used them): detects removed last rows, and rows rewritten with a "
        "recomputed chain; needs SITE",
    ),
    storage: str = typer.Option(
        None,
        "--storage",
        help="with --against-reports: the publication root (default: the site's configured "
        "storage)",
    ),
    study: list[str] = typer.Option(  # noqa: B008
        None, "--study", help="with --against-reports: only these studies (default: all)"
    ),
    as_json: bool = _JSON_OPT,
) -> None:
    """Recompute the hash chain and the budget rules; exit 1 on any problem.

    With ``--against-reports`` the ledger is also compared with every head the site has
    published (each report carries its COMMIT row's number and hash): a removed last row, a
    removed middle row, an edited amount or reordered rows no longer match a published head,
    even when the whole chain was recomputed to hide them. No other input is needed."""
    from tasks.anchors import verify_against_reports
    from tasks.storage import Store

    if against_reports and not site:
        raise _fail(ValueError("--against-reports needs the SITE whose reports to read"), 2)
    url = _ledger_url(site, ledger)
    root = _storage_root(site, storage) if against_reports else None
    with _open(url, site) as led:
        if root is None:
            plain = led.verify(expect_head=expect_head)
            ok, rows, head, problems = plain.ok, plain.rows, plain.head_hash, plain.problems
            anchored = None
        else:
            anchored = verify_against_reports(
                led, Store(root), site, study or None, expect_head=expect_head
            )
            ok, rows, head, problems = (
                anchored.ok,
                anchored.rows,
                anchored.head_hash,
                anchored.problems,
            )
    if as_json:
        doc: dict[str, Any] = {
            "ledger": url,
            "ok": ok,
            "rows": rows,
            "head_hash": head,
            "problems": problems,
        }
        if anchored is not None:
            doc.update(
                storage=root,
                heads=[h.__dict__ for h in anchored.heads],
                reports_without_head=anchored.unanchored,
                unreadable=anchored.unreadable,
            )
        print(json.dumps(doc, indent=2))
        if not ok:
            raise typer.Exit(1)
        return
    if ok:
        _plain(f"ledger OK: {rows} rows, head {head}")
        if anchored is not None and anchored.heads:
            newest = anchored.heads[-1]
            _plain(
                f"matches all {len(anchored.heads)} published head(s) under {root}; newest: row "
                f"{newest.seq} {newest.row_hash}"
            )
        elif anchored is not None:
            _plain(f"no published head under {root} yet (the ledger has no committed release)")
        return
    for p in problems:
        err.print(p, style="red", soft_wrap=True, highlight=False, markup=False)
    what = "verification against the published heads" if anchored is not None else "verification"
    err.print(f"ledger FAILED {what}: {len(problems)} problem(s) in {rows} rows", soft_wrap=True)
    err.print(
        "Stop this site's releases until the cause is found: a ledger missing rows would refund "
        "budget already spent. Restore the newest backup that passes this check "
        "(docs/ledger.md, Backups).",
        soft_wrap=True,
    )
    raise typer.Exit(1)


@ledger_app.command("set-cap")
def ledger_set_cap(
    site: str = typer.Argument(..., help="site id"),
    epsilon: str = typer.Option(..., help="new lifetime epsilon cap (exact, e.g. '5' or '7/2')"),
    delta: str = typer.Option(..., help="new lifetime delta cap (e.g. '1e-4')"),
    reason: str = typer.Option(..., help="why (kept in the ledger for auditors)"),
    ledger: str = _LEDGER_OPT,
) -> None:
    """Record a new lifetime cap for the site (an explicit, audited CAP event)."""
    from dpate_core.privacy import PrivacyParams
    from tasks.ledger import LedgerError

    try:
        cap = PrivacyParams.of(epsilon, delta)
    except (TypeError, ValueError) as exc:
        raise _fail(exc) from None
    with _open(_ledger_url(site, ledger), site) as led:
        try:
            led.set_cap(site, cap, reason)
        except LedgerError as exc:
            raise _fail(exc) from None
        s = led.spend(site)
    _plain(
        f"site {site}: lifetime cap now epsilon {cap.epsilon}, delta {cap.delta} "
        f"(spent epsilon {s.spent.epsilon}, delta {s.spent.delta})"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
