"""``dpate check``: what a release would do at a site, before anything is spent.

It reads the study spec, validates the site's records with the same code as a release
(:func:`dpate.schemas.site_data.read_site_records`), discretises them, runs the feasibility rules
(:func:`dpate.site.feasibility.feasibility_problems`) and reads the site's privacy ledger (read-only;
a missing ledger is reported, never created). It prints the study's public facts, what a release
would publish exactly, the budget it would spend and what the ledger has left, and, for the site
operator's eyes only, the counts preparation produced (rows read, dropped, clipped): those are
**not** private and are printed to this terminal only.

It spends nothing, draws no noise and contacts no Prefect server (Prefect is never imported).
Exit status: 0 when every checked site could release; otherwise the code of the problem found
(:class:`dpate.errors.ExitCode`; several different problems: SITES_FAILED).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dpate.cli.environment import SpecArg
from dpate.cli.errors import Failure, from_exception, print_failures, summary_code
from dpate.errors import ExitCode

__all__ = ["check"]

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def check(
    spec: SpecArg,
    site: Annotated[
        str | None,
        typer.Option(
            "--site",
            help="check only this site (default: every site whose data is reachable from here)",
            show_default=False,
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="the site's data (with --site; default: the site's configuration)",
            show_default=False,
        ),
    ] = None,
    round: Annotated[
        str | None,
        typer.Option(help="round label (default: the spec's 'release')", show_default=False),
    ] = None,
) -> None:
    """Check a study spec and a site's data before any release: spends nothing, draws nothing.

    Prints the public facts of the study, what a release would publish exactly, the budget it
    would spend and what the site's ledger has left (read-only), and operator-only counts.
    Exit 4 when a site's data is not ready (whatever its ledger), else 5 when only the ledger
    state would refuse (a missing ledger: the dpate ledger init lines are printed)."""
    from dpate.settings import load_study_spec

    study = load_study_spec(spec)  # SpecError: one message, exit 3 (dpate.cli.errors)
    if data and not site:
        raise typer.BadParameter("--data needs --site (whose data it is)", param_hint="--data")
    site_ids = [study.site(site).id] if site else [s.id for s in study.sites]
    _print_study(study)
    failures: list[Failure] = _unsigned_sites(study, site_ids)
    missing: list[tuple[str, str]] = []  # (site, ledger URL) without a ledger
    checked = 0
    for site_id in site_ids:
        result = _check_site(
            spec, study, site_id, round, data=data, explicit=bool(site), missing=missing
        )
        if result is None:
            continue
        checked += 1
        failures += result
    if not checked:
        failures.append(
            Failure(
                None,
                "no site data reachable",
                "none of the study's sites has its data reachable from here: give --site and "
                "--data, or set DPATE_DATA_PATH",
                ExitCode.SETTINGS,
            )
        )
    _finish(study, checked, failures, missing)


def _finish(
    study: Any, checked: int, failures: list[Failure], missing: list[tuple[str, str]]
) -> None:
    """Data and settings problems first, then the ledger state (with the lines that create
    the missing ledgers); the exit code is the data's when the data is not ready."""
    data = [f for f in failures if f.code != ExitCode.LEDGER]
    ledger = [f for f in failures if f.code == ExitCode.LEDGER]
    if data:
        err.print("\n[bold]data and settings[/bold] (fix these first):")
        print_failures(data, err)
    if ledger:
        err.print("\n[bold]ledger state[/bold] (a run would be refused until these are fixed):")
        print_failures(ledger, err)
    if missing:
        from dpate.study_check import ledger_init_line

        out.print("create the missing ledger(s) with the spec's lifetime cap:")
        for site_id, _url in missing:
            out.print(f"  {ledger_init_line(study, site_id)}", markup=False)
        out.print("(or `dpate run --init-ledgers`; all sites' lines: `dpate ledger init-commands`)")
    if data or ledger:
        raise typer.Exit(int(summary_code(data) if data else summary_code(ledger)))
    out.print(f"\n[green]OK[/green]: {checked} site(s) checked; nothing was spent or drawn.")


def _print_study(study: Any) -> None:
    from dpate.study_check import design_cautions, design_notes

    out.print(f"[bold]study {study.study_id}[/bold] (spec hash {study.spec_hash[:12]}), public:")
    out.print(
        f"  design {study.design}, estimator {study.estimator}, aggregator {study.aggregator}; "
        f"outcome bound B = {study.outcome.bound:g} (offset {study.outcome.offset:g}, "
        f"policy {study.outcome.policy}); missing values: {study.missing}"
    )
    bounded = [c.column for c in study.unbinned_covariates]
    out.print(
        f"  strata: |X| = {study.domain_size} from {len(study.binned_covariates)} covariate(s)"
        + (
            f", and {bounded} numeric with public bounds and no bins (their clipped values enter "
            f"the release directly)"
            if bounded
            else ""
        )
        + f"; a release splits its budget into {study.release_parts} part(s)"
    )
    exact = "N (the number of records used)"
    if study.publishes_exact_arm_sizes:
        exact += " and the arm sizes N_t, N_c (public design facts)"
    elif study.arm_sizes_public is False:
        exact += (
            "; the arm sizes are not published (arm_sizes_public = false: the arms' sizes and "
            "sums are one DP histogram)"
        )
    out.print(
        f"  a site's report publishes exactly: {exact}; the estimate and its variance are "
        f"differentially private"
    )
    choice = study.study_choice  # one for the whole study, from the spec alone
    out.print(f"  estimand (every site): {escape(study.estimand)}")
    if choice.variant is not None:
        out.print(f"  every site's release would use: {choice.variant} ({escape(choice.reason)})")
    for caution in design_cautions(study, operator=True):
        out.print(f"  [yellow]caution[/yellow]: {escape(caution)}")
    for note in design_notes(study):
        out.print(f"  [yellow]note[/yellow]: {escape(note)}")


def _reachable(location: str) -> bool:
    if "://" not in location or location.startswith("file://"):
        return Path(location.removeprefix("file://")).exists()
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(location)
        return bool(fs.exists(path))
    except Exception:  # no credentials, no network, unknown protocol: not reachable from here
        return False


def _check_site(
    spec: str,
    study: Any,
    site_id: str,
    round: str | None,
    *,
    data: str | None = None,
    explicit: bool,
    missing: list[tuple[str, str]],
) -> list[Failure] | None:
    """The site's problems (empty: it could release), or None when its data is not reachable
    from here and the site was not asked for explicitly. ``data`` (``--data``) is the site's
    data setting, over its configuration."""
    from dpate.settings import SiteSettings, resolve_site

    out.print(f"\n[bold]site {site_id}[/bold]")
    try:
        settings = SiteSettings.load()
        if data:
            settings = settings.model_copy(update={"data_path": data})
        ctx = resolve_site(spec, site_id, round, deployed=False, settings=settings)
    except Exception as exc:  # SettingsError & co.: a problem of this site's configuration
        return [from_exception(exc, site_id)]
    if not _reachable(ctx.data_location):
        if not explicit:
            out.print(
                "  data not reachable from here: skipped (give --site and --data to check it)"
            )
            return None
        return [
            Failure(
                site_id,
                "site data not found",
                f"no data at {ctx.data_location}: check --data / DPATE_DATA_PATH",
                ExitCode.SITE_DATA,
            )
        ]
    problems = _check_data(ctx, study, site_id)
    problems += _check_signing(ctx, study, site_id)
    problems += _check_budget(ctx, study, site_id, missing)
    return problems


def _unsigned_sites(study: Any, site_ids: list[str]) -> list[Failure]:
    """Reports are signed by default: each checked site the spec gives no public_key (unless
    the study opts out) could not release, whether or not its data is reachable from here."""
    from dpate.signing import unsigned_site_problem

    if study.signing == "none":
        out.print(
            f'  reports: unsigned (signing = "none": {escape(study.unsigned_reason or "")}); a '
            f"forged report of a site without a public_key would be aggregated"
        )
    else:
        out.print("  reports: signed by each site's public_key (the default)")
    return [
        Failure(s.id, "site signing key", problem, ExitCode.SETTINGS)
        for s in study.sites
        if s.id in site_ids and (problem := unsigned_site_problem(study, s.id)) is not None
    ]


def _check_signing(ctx: Any, study: Any, site_id: str) -> list[Failure]:
    """The site's private key is there and is the spec's (as the release checks it before
    reserving); a site without a public_key is reported once, by :func:`_unsigned_sites`."""
    from dpate.errors import DpateError
    from dpate.signing import site_signing_key, unsigned_site_problem

    if unsigned_site_problem(study, site_id) is not None:
        return []
    try:
        key = site_signing_key(study, site_id, ctx.key_path)
    except DpateError as exc:
        return [from_exception(exc, site_id)]
    if key is None:
        out.print("  reports: published unsigned (the study opts out; no public_key for this site)")
    else:
        out.print(f"  reports: signed with {escape(str(ctx.key_path))}, the spec's public_key")
    return []


def _check_data(ctx: Any, study: Any, site_id: str) -> list[Failure]:
    from dpate.schemas.site_data import SiteDataError, read_site_records
    from dpate.site.feasibility import feasibility_problems

    try:  # as the release reads them (in the site's engine; its query and secret), without
        # Algorithm 1's ordered pass: the counts suffice for the feasibility rules
        data = read_site_records(
            study,
            site_id,
            ctx.data_location,
            query=ctx.data_query,
            secret=ctx.data_secret,
            matching=False,
        )
    except SiteDataError as exc:
        # the full message (counts, row positions) is for this terminal: the operator's own
        return [from_exception(exc, site_id)]
    r = data.report
    out.print(f"  data: {escape(ctx.data_location)} validated against the spec")
    out.print(
        f"  N after the missing-value policy: {data.n} (published exactly in the site's report)"
    )
    if study.variant is not None:  # the study's one choice, from the spec alone
        out.print(f"  the release would use: {study.variant} (the study's, as every site's)")
        declared = study.site(site_id).n
        if declared is not None and declared != data.n:
            out.print(
                f"  the spec declares n = {declared} for this site (its N here: {data.n}): the "
                f"study's choice reads the declared n, so this release still uses "
                f"{study.variant}; update n in the spec if the study should choose again"
            )
    out.print(
        f"  [yellow]operator only, not private, do not share:[/yellow] {r.n_read} rows read, "
        f"{r.dropped_missing} dropped as missing"
        + (f" {r.missing_by_column}" if r.missing_by_column else "")
        + f", {r.clipped_low} clipped low, {r.clipped_high} clipped high"
        + (f", mapped to 'other': {r.mapped_to_other}" if r.mapped_to_other else "")
    )
    found = feasibility_problems(data, study)
    del data
    if found:
        return [Failure(site_id, "release not feasible", "; ".join(found), ExitCode.SITE_DATA)]
    out.print("  feasible: the estimator's rules hold on these records")
    return []


def _check_budget(
    ctx: Any, study: Any, site_id: str, missing_ledgers: list[tuple[str, str]]
) -> list[Failure]:
    from dpate.ledger import LedgerError, LedgerNotFoundError, open_reader, sqlite_file_missing
    from dpate_core.privacy import check_budget

    s = study.site(site_id)
    cost = study.release_cost(site_id)  # a pure mechanism charges no delta
    split = ", ".join(str(x) for x in study.budget_split(site_id).shares)
    out.print(
        f"  this release would spend: epsilon {cost.epsilon}, delta {cost.delta} (split {split}); "
        f"lifetime cap in the spec: epsilon {s.lifetime_cap.epsilon}, "
        f"delta {s.lifetime_cap.delta}"
    )
    if study.balance is not None:  # a release of its own, charged on top
        out.print(
            f"  the covariate-balance table ({escape('[balance]')}) would spend: epsilon "
            f"{study.balance.epsilon}, delta 0 (a release of its own in the ledger)"
        )
        cost = cost + study.balance_cost()
    url = ctx.ledger_url
    missing = Failure(
        site_id,
        "no privacy ledger",
        f"no ledger at {url} yet: a release would be refused until it is created",
        ExitCode.LEDGER,
    )
    if sqlite_file_missing(url):
        missing_ledgers.append((site_id, url))
        return [missing]  # never created by a check
    try:
        with open_reader(url) as led:
            spend = led.spend(site_id)
            recorded = led.committed(ctx.rid)
    except LedgerNotFoundError:
        missing_ledgers.append((site_id, url))
        return [missing]
    except LedgerError as exc:
        return [from_exception(exc, site_id)]
    if recorded is not None:
        out.print(
            f"  ledger {url}: this release was committed at {recorded.committed_at}: a run "
            f"re-publishes the recorded value and spends nothing"
        )
        return []
    # the ledger's own rule (dpate_core.privacy): what this check predicts is what a run does
    budget = None if spend.cap is None else check_budget(spend.cap, spend.spent, cost)
    out.print(
        f"  ledger {url}: spent epsilon {spend.spent.epsilon}, delta {spend.spent.delta}; "
        + (
            f"cap epsilon {budget.cap.epsilon}, delta {budget.cap.delta}; remaining epsilon "
            f"{budget.remaining.epsilon}, delta {budget.remaining.delta}"
            if budget is not None
            else "no cap recorded"
        )
    )
    return _budget_problems(site_id, spend, budget, cost, s.lifetime_cap.params)


def _budget_problems(
    site_id: str, spend: Any, budget: Any, cost: Any, spec_cap: Any
) -> list[Failure]:
    """What a run would refuse: a ledger cap that is not the spec's, a release past the cap."""
    problems = []
    if spend.cap is not None and spend.cap != spec_cap:
        problems.append(
            Failure(
                site_id,
                "privacy ledger cap",
                f"the ledger's cap (epsilon {spend.cap.epsilon}, delta {spend.cap.delta}) is not "
                f"the spec's lifetime cap: a release would be refused; change one of them "
                f"(`dpate ledger set-cap` is audited)",
                ExitCode.LEDGER,
            )
        )
    if budget is not None and not budget.fits:
        rem = budget.remaining
        problems.append(
            Failure(
                site_id,
                "privacy budget refused",
                f"this release (epsilon {cost.epsilon}, delta {cost.delta}) exceeds what the ledger has "
                f"left (epsilon {rem.epsilon}, delta {rem.delta}): lower the release budget or "
                f"raise the cap with `dpate ledger set-cap`",
                ExitCode.LEDGER,
            )
        )
    return problems
