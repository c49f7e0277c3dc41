"""``dpate run``, ``dpate site-release`` and ``dpate aggregate``: a study's flows, run from here.

Heavy imports (Prefect, the tasks) happen inside the commands, after :func:`prefect_env`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dpate.cli.environment import SpecArg, load_spec, prefect_env, site_settings
from dpate.cli.errors import (
    Failure,
    classify,
    from_exception,
    print_failures,
    summary_code,
)
from dpate.cli.output import console, err, fail, print_result, print_site_failures
from dpate.errors import ExitCode, error_class

if TYPE_CHECKING:
    from dpate.study_check import StudyCheck

__all__ = [
    "aggregate_cmd",
    "init_missing_ledgers",
    "preflight",
    "run_cmd",
    "run_study",
    "site_release_cmd",
    "study_failed",
]


def init_missing_ledgers(spec: str) -> None:
    """Create each site's ledger (where the site configuration puts it) with the spec's lifetime
    cap, unless it exists; an existing ledger keeps its recorded cap (a different one is refused
    at the release, CapMismatchError)."""
    from dpate.ledger import LedgerError, PrivacyLedger, ledger_exists
    from dpate.settings import site_ledger_url

    try:
        study = load_spec(spec)
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
        raise fail(exc) from None


def run_study(spec: str, round: str | None, verbose: bool) -> dict[str, Any]:
    """Check every site before any site spends (:func:`preflight`), then the study flow
    (:func:`dpate.flows.study.study`) on the embedded or configured Prefect; its output, read
    back from storage when this process holds no result. ``output["spent"]`` says whether a
    site's ledger was debited."""
    from dpate.site.plans import shared_reads

    load_spec(spec)  # a spec error ends the command here, before Prefect starts
    with shared_reads():  # one read of each site's data: the check's, kept for the release
        checked = preflight(spec, round)
        prefect_env(verbose)
        with console.status("starting Prefect and running the study flow ...", spinner="dots"):
            from dpate.flows.study import state_error, state_output, study

            state = study(spec=spec, round=round, return_state=True)
    if not state.is_completed():
        raise study_failed(state_error(state), _sites_of_failed_run(state))
    output: dict[str, Any] = state_output(state, lambda: _study_from_storage(spec, round))
    return {**output, "spent": not checked.spends_nothing}


def preflight(spec: str, round: str | None) -> StudyCheck:
    """Every site's ledger, publication path, data and feasibility, and the round's history,
    before Prefect starts and before any site reserves (:func:`dpate.study_check.check_study`).
    This machine is every site, so a data problem is printed in full (counts and row positions:
    the operator's own), as are the counts a site's preparation clipped or dropped (operator
    only, not private: printed here, never sent anywhere). A study that cannot complete ends
    here, nothing spent anywhere."""
    from dpate.study_check import check_study

    checked = check_study(spec, round)
    for s in checked.sites:
        if s.report is not None and _changed_records(s.report):
            err.print(
                f"site {s.site_id} (operator only, not private): {_counts(s.report)}",
                soft_wrap=True,
                highlight=False,
            )
    failures = [from_exception(p, s.site_id) for s in checked.sites for p in s.problems]
    failures += [from_exception(p) for p in checked.problems]
    if not checked.can_run:
        print_failures(failures, err)
        err.print(
            "nothing was reserved or spent at any site: the study was not run "
            + (
                "(the spec requires every site)"
                if checked.require_all_sites and not checked.problems
                else ""
            ),
            soft_wrap=True,
        )
        raise typer.Exit(int(summary_code(failures)))
    if failures:  # require_all_sites = false: the study goes on without these sites
        names = ", ".join(s.site_id for s in checked.sites if not s.ok)
        err.print(
            f"site(s) {names} not ready (each cause follows the result): the study runs without "
            f"them (require_all_sites = false); they spend nothing",
            soft_wrap=True,
        )
    return checked


def _changed_records(r: Any) -> bool:
    return bool(r.dropped_missing or r.clipped_low or r.clipped_high or r.mapped_to_other)


def _counts(r: Any) -> str:
    text = (
        f"{r.n_read} rows read, {r.dropped_missing} dropped as missing, {r.clipped_low} "
        f"clipped low, {r.clipped_high} clipped high"
    )
    return text + (f", mapped to 'other': {r.mapped_to_other}" if r.mapped_to_other else "")


def _sites_of_failed_run(state: Any) -> list[dict[str, Any]]:
    """The per-site outcomes a failed study run carries (dpate.flows.study; public messages)."""
    try:
        exc = state.result(raise_on_failure=False)
    except Exception:  # no result held in this process: the study's message is all we have
        return []
    return list(getattr(exc, "sites", None) or [])


_INNER_TYPE = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception)): ")


def study_failed(error: str, sites: list[dict[str, Any]]) -> typer.Exit:
    """One line for the study, then each failed site's cause; the exit code names the cause
    (the sites' common cause, or SITES_FAILED when they differ; without a failed site, the
    innermost known error the study's message carries)."""
    study = classify(error)
    for name in reversed(_INNER_TYPE.findall(study.message)):
        inner = error_class(name)
        if inner is not None:
            study = Failure(None, study.cause, study.message, inner.exit_code)
            break
    study = Failure(None, "study failed", _INNER_TYPE.sub("", study.message), study.code)
    failures = [classify(r.get("error") or "", r["site_id"]) for r in sites if not r.get("ok")]
    print_failures([study, *failures], err)
    return typer.Exit(int(summary_code(failures) if failures else study.code))


def _study_from_storage(spec: str, round: str | None) -> dict[str, Any]:
    from dpate.settings import resolve_site, resolve_study
    from dpate.site.reports import published_site
    from dpate.tasks.aggregate import published_result

    ctx = resolve_study(spec, round)
    sites = []
    for site in ctx.site_ids:
        try:
            sites.append({"ok": True, **published_site(resolve_site(spec, site, round))})
        except FileNotFoundError as exc:
            sites.append({"site_id": site, "ok": False, "error": str(exc)})
    found = published_result(ctx)
    if found is None:
        raise fail(RuntimeError(f"no result of study {ctx.study_id} round {ctx.round} found"))
    return {"sites": sites, "result": {**found[1], "uri": found[0]}}


RoundOpt = Annotated[
    str | None, typer.Option(help="round label (default: the spec's 'release')", show_default=False)
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="show Prefect's logs")]


def run_cmd(
    spec: SpecArg,
    round: RoundOpt = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="publication root URL (over DPATE_STORAGE_URL; default: the spec's 'reports')",
            show_default=False,
        ),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(
            help="ledger URL for every site, may contain {site} (over DPATE_LEDGER_URL; "
            "default: $DPATE_HOME/ledgers/SITE.sqlite)",
            show_default=False,
        ),
    ] = None,
    init_ledgers: Annotated[
        bool,
        typer.Option(
            "--init-ledgers", help="create each missing site ledger first, with the spec's cap"
        ),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run a whole study here: every site's release (in parallel), then the aggregation.

    This machine is every site: its options are the sites' own configuration. Every site's
    ledger, data and publication path are checked before any site spends; a site's ledger must
    exist (dpate ledger init, or --init-ledgers)."""
    with site_settings(ledger=ledger, storage=storage):
        if init_ledgers:
            init_missing_ledgers(spec)
        output = run_study(spec, round, verbose)
    print_result(output["result"], output["sites"])
    if not output["spent"]:
        console.print("nothing spent: recorded release re-published")
    if print_site_failures(output["sites"]):
        err.print("partial result: the study was aggregated without the failed site(s) above")
        raise typer.Exit(int(ExitCode.PARTIAL))


def site_release_cmd(
    spec: SpecArg,
    site: Annotated[
        str, typer.Option("--site", help="this site's id in the spec", show_default=False)
    ],
    round: RoundOpt = None,
    data: Annotated[
        str | None,
        typer.Option(
            help="the site's data (over DPATE_DATA_PATH; default: the spec's, if relative and "
            "inside the spec's folder)",
            show_default=False,
        ),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(
            help="ledger URL (over DPATE_LEDGER_URL; default: $DPATE_HOME/ledgers/SITE.sqlite); "
            "it must exist (dpate ledger init)",
            show_default=False,
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="publication root URL (over DPATE_STORAGE_URL; default: the spec's 'reports')",
            show_default=False,
        ),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """One site's release: validate, reserve budget, draw once, commit, publish."""
    load_spec(spec).site(site)  # spec error or unknown site: ends here, before Prefect starts
    prefect_env(verbose)
    with (
        site_settings(ledger=ledger, data=data, storage=storage),
        console.status(f"releasing site {site} ...", spinner="dots"),
    ):
        from dpate.flows.study import release_one_site

        r = release_one_site(spec, site, round)
    if not r["ok"]:
        failure = classify(r["error"], site)
        print_failures([failure], err)
        raise typer.Exit(int(failure.code))
    verb = (
        "published"
        if r["status"] == "written"
        else "already published (nothing spent: recorded release re-published)"
    )
    if r.get("resolved", True):
        what = f"tau {r['tau']:.4f}, variance {r['variance']:.3g}"
    else:
        what = f"no estimate, unresolved at this budget ({r['unresolved_reason']})"
    console.print(
        f"site {site}: {what}, N {r['n']}, epsilon {r['epsilon']}, delta {r['delta']}; "
        f"report {verb}: {r['report']}",
        soft_wrap=True,
    )


def aggregate_cmd(
    spec: SpecArg,
    round: RoundOpt = None,
    storage: Annotated[
        str | None, typer.Option(help="publication root URL", show_default=False)
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Combine the published site reports of a round (the server's step)."""
    load_spec(spec)  # a spec error ends the command here, before Prefect starts
    prefect_env(verbose)
    with console.status("aggregating ...", spinner="dots"):
        from dpate.flows.aggregate import aggregate_study

        state = aggregate_study(spec=spec, round=round, storage_url=storage, return_state=True)
    from dpate.flows.study import state_error, state_output
    from dpate.settings import resolve_study
    from dpate.tasks.aggregate import published_result

    if not state.is_completed():
        failure = classify(state_error(state))
        print_failures([failure], err)
        raise typer.Exit(int(failure.code))

    def from_storage() -> dict[str, Any]:
        uri, doc = published_result(resolve_study(spec, round, storage)) or ("", {})
        return {**doc, "uri": uri}

    print_result(state_output(state, from_storage))
