"""``dpate ledger``: the site's privacy ledger: create it, show the spend, verify, set the cap."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from dpate.cli.environment import SpecArg
from dpate.cli.errors import TYPER_OPTIONS
from dpate.cli.output import console, err, fail, plain
from dpate.errors import ExitCode

__all__ = ["ledger_app"]

ledger_app = typer.Typer(
    help="The site's privacy ledger: spend, audit, cap.", no_args_is_help=True, **TYPER_OPTIONS
)


def _ledger_url(site: str | None, ledger: str | None) -> str:
    """``--ledger``, else the site's configuration (DPATE_LEDGER_URL or DPATE_SITE_CONFIG's
    ``ledger``), else the site's default ``$DPATE_HOME/ledgers/<site>.sqlite``."""
    from dpate.ledger import as_sqlalchemy_url
    from dpate.settings import site_ledger_url

    if ledger:
        url: str = as_sqlalchemy_url(ledger.replace("{site}", site or ""))
        return url
    if site:
        try:
            url = site_ledger_url(site, "{study}")
            return url
        except ValueError as exc:
            raise fail(exc) from None
    raise fail(
        ValueError("say which ledger: SITE (its configured ledger) or --ledger URL"),
        ExitCode.USAGE,
    )


def _open(url: str, site: str | None) -> Any:
    from dpate.ledger import LedgerError, PrivacyLedger

    try:
        return PrivacyLedger(url, site=site)
    except LedgerError as exc:
        raise fail(exc) from None


LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger",
        help="ledger URL (SQLAlchemy) or SQLite path (default: the site's DPATE_LEDGER_URL, site "
        "config, or $DPATE_HOME/ledgers/SITE.sqlite)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
SiteArg = Annotated[str, typer.Argument(help="site id", show_default=False)]


@ledger_app.command("init")
def ledger_init(
    site: SiteArg,
    epsilon: Annotated[
        str,
        typer.Option(help="lifetime epsilon cap (exact, e.g. '5' or '7/2')", show_default=False),
    ],
    delta: Annotated[
        str, typer.Option(help="lifetime delta cap (e.g. '1e-4')", show_default=False)
    ],
    ledger: LedgerOpt = None,
    reason: Annotated[
        str, typer.Option(help="kept in the ledger for auditors")
    ] = "initial lifetime cap (dpate ledger init)",
) -> None:
    """Create the site's ledger and pin its lifetime cap (a CAP event). The only way a ledger
    is created; running it again with the same cap changes nothing."""
    from dpate.ledger import LedgerError, PrivacyLedger

    url = _ledger_url(site, ledger)
    cap = _cap(epsilon, delta)
    try:
        with PrivacyLedger.init(url, site, cap, reason=reason) as led:
            s = led.spend(site)
    except LedgerError as exc:
        raise fail(exc) from None
    plain(
        f"site {site}: ledger {url}: lifetime cap epsilon {cap.epsilon}, delta {cap.delta} "
        f"(spent epsilon {s.spent.epsilon}, delta {s.spent.delta})"
    )


def _cap(epsilon: str, delta: str) -> Any:
    """The cap given on the command line (exact numbers); a bad number is a usage error."""
    from dpate_core.privacy import PrivacyParams

    try:
        return PrivacyParams.of(epsilon, delta)
    except (TypeError, ValueError) as exc:
        raise fail(exc, ExitCode.USAGE) from None


def _pair(p: Any) -> dict[str, str] | None:
    return None if p is None else {"epsilon": str(p.epsilon), "delta": str(p.delta)}


@ledger_app.command("show")
def ledger_show(
    site: SiteArg,
    ledger: LedgerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The site's lifetime cap, spend per study and remaining budget (exact)."""
    from dpate.ledger import LedgerError, read_site_spend

    url = _ledger_url(site, ledger)
    try:
        s = read_site_spend(url, site, site=site)
    except LedgerError as exc:
        raise fail(exc) from None
    if as_json:
        print(json.dumps(_spend_doc(site, url, s), indent=2))
        return
    if s.cap is None and not s.per_study:
        plain(f"site {site}: no events in the ledger at {url}")
        return
    table = Table(title=f"privacy ledger of site {site}")
    for col in ("study", "epsilon spent", "delta spent", "releases reserved", "committed"):
        table.add_column(col, overflow="fold")  # piped: wrap, never cut
    for study, p in sorted(s.per_study.items()):
        reserved, committed = s.releases.get(study, (0, 0))
        table.add_row(study, str(p.epsilon), str(p.delta), str(reserved), str(committed))
    table.add_row("[b]total[/b]", str(s.spent.epsilon), str(s.spent.delta), "", "")
    console.print(table)
    if s.cap is not None and s.remaining is not None:
        plain(
            f"lifetime cap: epsilon {s.cap.epsilon}, delta {s.cap.delta}; remaining: "
            f"epsilon {s.remaining.epsilon} (~{float(s.remaining.epsilon):.4g}), "
            f"delta {s.remaining.delta}"
        )


def _spend_doc(site: str, url: str, s: Any) -> dict[str, Any]:
    """``dpate ledger show --json``: the spend as exact strings."""
    return {
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


def _storage_root(site: str, storage: str | None, spec: str | None) -> str:
    """``--storage``, else the site's publication root found the way ``dpate run`` finds it:
    the site's DPATE_STORAGE_URL or site config ``storage``, else (with ``--spec``) the spec's
    ``reports``: the root holding ``<study>/sites/<site>/``."""
    from dpate.settings import resolve_site, site_config

    if storage:
        return storage
    if spec:  # as a run of this spec at this site publishes
        return resolve_site(spec, site, None, deployed=False).storage_url
    root = site_config(site, "{study}").storage_url
    if not root or "{study}" in root:
        why = "it is not configured" if not root else f"its setting {root} names one study"
        raise fail(
            ValueError(
                f"say where site {site} publishes ({why}): --spec STUDY.toml (the root a run of "
                f"that spec uses), --storage URL (the root holding <study>/sites/{site}/), or "
                f"the site's DPATE_STORAGE_URL / 'storage' in its site config"
            ),
            ExitCode.USAGE,
        )
    return str(root)


@ledger_app.command("verify")
def ledger_verify(
    site: Annotated[
        str | None,
        typer.Argument(help="site id (to find its configured ledger)", show_default=False),
    ] = None,
    ledger: LedgerOpt = None,
    expect_head: Annotated[
        str | None,
        typer.Option(
            help="a head hash noted earlier (detects removed last rows)", show_default=False
        ),
    ] = None,
    against_reports: Annotated[
        bool,
        typer.Option(
            "--against-reports",
            help="also check every ledger head the site has published (its reports, and the "
            "results that used them): detects removed last rows, and rows rewritten with a "
            "recomputed chain; needs SITE",
        ),
    ] = False,
    spec: Annotated[
        str | None,
        typer.Option(
            "--spec",
            help="with --against-reports: find the publication root as a run of this study "
            "spec does, and check its study",
            show_default=False,
        ),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            help="with --against-reports: the publication root (default: the site's configured "
            "storage, else --spec's)",
            show_default=False,
        ),
    ] = None,
    study: Annotated[
        list[str] | None,
        typer.Option(
            "--study",
            metavar="ID",
            help="with --against-reports: only these studies (default: all)",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recompute the hash chain and the budget rules; exit 5 on any problem.

    With --against-reports the ledger is also compared with every head the site has
    published (each report carries its COMMIT row's number and hash): a removed last row, a
    removed middle row, an edited amount or reordered rows no longer match a published head,
    even when the whole chain was recomputed to hide them. No other input is needed."""
    if against_reports and not site:
        raise fail(
            ValueError("--against-reports needs the SITE whose reports to read"), ExitCode.USAGE
        )
    url = _ledger_url(site, ledger)
    root = _storage_root(site, storage, spec) if against_reports and site else None
    studies = study or None
    if spec and against_reports and not studies:
        from dpate.settings import load_study_spec

        studies = [load_study_spec(spec).study_id]
    check = _verify(url, site, root, studies, expect_head)
    if as_json:
        print(json.dumps(check.doc(), indent=2))
        if not check.ok:
            raise typer.Exit(int(ExitCode.LEDGER))
        return
    if check.ok:
        check.print_ok()
        return
    check.print_problems()
    raise typer.Exit(int(ExitCode.LEDGER))


class _Verification:
    """The outcome of ``dpate ledger verify``: the plain check, or the check against the
    published heads (``anchored``, with ``root``)."""

    def __init__(self, url: str, outcome: Any, anchored: bool, root: str | None) -> None:
        self.url, self.root = url, root
        self.anchored = outcome if anchored else None
        self.ok, self.rows, self.problems = outcome.ok, outcome.rows, outcome.problems
        self.head = outcome.head_hash

    def doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ledger": self.url,
            "ok": self.ok,
            "rows": self.rows,
            "head_hash": self.head,
            "problems": self.problems,
        }
        if self.anchored is not None:
            doc.update(
                storage=self.root,
                heads=[h.__dict__ for h in self.anchored.heads],
                reports_without_head=self.anchored.unanchored,
                unreadable=self.anchored.unreadable,
            )
        return doc

    def print_ok(self) -> None:
        plain(f"ledger OK: {self.rows} rows, head {self.head}")
        if self.anchored is not None and self.anchored.heads:
            newest = self.anchored.heads[-1]
            plain(
                f"matches all {len(self.anchored.heads)} published head(s) under {self.root}; "
                f"newest: row {newest.seq} {newest.row_hash}"
            )
        elif self.anchored is not None:
            plain(f"no published head under {self.root} yet (the ledger has no committed release)")

    def print_problems(self) -> None:
        for p in self.problems:
            err.print(p, style="red", soft_wrap=True, highlight=False, markup=False)
        what = (
            "verification against the published heads"
            if self.anchored is not None
            else "verification"
        )
        err.print(
            f"ledger FAILED {what}: {len(self.problems)} problem(s) in {self.rows} rows",
            soft_wrap=True,
        )
        err.print(
            "Stop this site's releases until the cause is found: a ledger missing rows would "
            "refund budget already spent. Restore the newest backup that passes this check "
            "(docs/how-to/ledger.md, Backups).",
            soft_wrap=True,
        )


def _verify(
    url: str,
    site: str | None,
    root: str | None,
    studies: list[str] | None,
    expect_head: str | None,
) -> _Verification:
    """Verify the ledger at ``url``, against the heads published under ``root`` when given."""
    from dpate.ledger import verify_against_reports
    from dpate.storage import Store

    with _open(url, site) as led:
        if root is None or site is None:  # --against-reports needs SITE (checked before)
            return _Verification(url, led.verify(expect_head=expect_head), False, None)
        outcome = verify_against_reports(led, Store(root), site, studies, expect_head=expect_head)
        return _Verification(url, outcome, True, root)


@ledger_app.command("set-cap")
def ledger_set_cap(
    site: SiteArg,
    epsilon: Annotated[
        str,
        typer.Option(
            help="new lifetime epsilon cap (exact, e.g. '5' or '7/2')", show_default=False
        ),
    ],
    delta: Annotated[
        str, typer.Option(help="new lifetime delta cap (e.g. '1e-4')", show_default=False)
    ],
    reason: Annotated[
        str, typer.Option(help="why (kept in the ledger for auditors)", show_default=False)
    ],
    ledger: LedgerOpt = None,
) -> None:
    """Record a new lifetime cap for the site (an explicit, audited CAP event)."""
    from dpate.ledger import LedgerError

    cap = _cap(epsilon, delta)
    with _open(_ledger_url(site, ledger), site) as led:
        try:
            led.set_cap(site, cap, reason)
        except LedgerError as exc:
            raise fail(exc) from None
        s = led.spend(site)
    plain(
        f"site {site}: lifetime cap now epsilon {cap.epsilon}, delta {cap.delta} "
        f"(spent epsilon {s.spent.epsilon}, delta {s.spent.delta})"
    )


@ledger_app.command("init-commands")
def ledger_init_commands(
    spec: SpecArg,
) -> None:
    """Print the dpate ledger init line of every site of a study spec, with its lifetime cap.

    Creates nothing: each site's operator runs its own line (on this machine: all of them, or
    dpate run --init-ledgers)."""
    from dpate.settings import load_study_spec
    from dpate.study_check import ledger_init_line

    study = load_study_spec(spec)
    for s in study.sites:
        plain(ledger_init_line(study, s.id))
