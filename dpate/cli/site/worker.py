"""``dpate site worker SITE``: the site's own Prefect worker (docs/how-to/deploying.md, "What a site
trusts the coordinator with"). Registered in :mod:`dpate.cli.site`.

It polls the pool ``site-<SITE>`` of the coordinator's Prefect server (``PREFECT_API_URL``,
``PREFECT_API_AUTH_STRING``) and runs each flow run there as the installed ``site-release`` flow
for ``SITE``, in its own environment (:mod:`dpate.deployments.site_worker`). Before polling it
checks what a release would need first: the site's ledger (``DPATE_LEDGER_URL`` or the site
config's ``ledger``) exists and holds the site's lifetime cap. It sets ``DPATE_WORKER_SITE=SITE``
in its own environment: its flow runs refuse a release for another site, and a spec its operator
did not approve (``dpate site approve``). It runs at most ``--limit`` flow runs at once (default
1). The first SIGTERM or
SIGINT stops it (a flow run still running is terminated and reported Crashed; the next run of
that release finishes it from the ledger without a second spend).
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import typer
from rich.console import Console

from dpate.errors import ExitCode

err = Console(stderr=True)


def _fail(message: str, code: ExitCode) -> typer.Exit:
    err.print(message, style="red", soft_wrap=True, highlight=False, markup=False)
    return typer.Exit(int(code))


def _api_url() -> str | None:
    """The Prefect API the worker would poll: the environment, else Prefect's profile."""
    from prefect.settings import get_current_settings

    return os.environ.get("PREFECT_API_URL", "").strip() or get_current_settings().api.url


def check_site_ledger(site: str) -> str:
    """The site's ledger URL, after checking that it is configured, exists and holds the site's
    lifetime cap (what every release checks first). Raises SettingsError or LedgerError."""
    from dpate.ledger import LedgerError, PrivacyLedger, shown_url
    from dpate.settings import SettingsError, site_config, site_ledger_url

    cfg = site_config(site, "{study}")  # "{study}" stays: per-study ledgers are checked per run
    if cfg.sites is not None and site not in cfg.sites:
        raise SettingsError(
            f"this site's configuration serves sites {list(cfg.sites)} ({cfg.source('sites')}), "
            f"not {site!r}: start the worker for one of them, or fix 'sites'"
        )
    url = site_ledger_url(site, "{study}", deployed=True, cfg=cfg)
    if "{study}" in url:
        return url
    with PrivacyLedger(url, site=site) as ledger:
        if ledger.cap(site) is None:
            raise LedgerError(
                f"site {site}: the ledger at {shown_url(url)} has no lifetime cap for this "
                f"site; pin the approved cap first: dpate ledger init {site} --epsilon E "
                f"--delta D --ledger URL"
            )
    return url


def site_worker_cmd(
    site: Annotated[str, typer.Argument(help="this site's id (as in the study spec)")],
    pool: Annotated[
        str | None, typer.Option("--pool", help="the work pool to poll (default: site-SITE)")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="the worker's name on the server (default: Prefect's)"),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=1,
            help="at most this many flow runs at once (default 1: the site runs one release at "
            "a time, so runs the coordinator piles up wait instead of each taking a process)",
        ),
    ] = 1,
) -> None:
    """Run this site's Prefect worker: only the installed site-release flow, for this site.

    It polls the pool site-SITE of the coordinator's Prefect server (PREFECT_API_URL,
    PREFECT_API_AUTH_STRING). The coordinator chooses spec, site and round; the code, the
    environment, the data, the ledger and the storage stay the site's. Refuses to start until the
    site's ledger exists (dpate ledger init). Stops on the first SIGTERM or SIGINT."""
    from dpate.deployments.site_runner import WORKER_SITE_ENV
    from dpate.ledger import LedgerError, shown_url
    from dpate.settings import IDENTIFIER, SettingsError

    if not re.fullmatch(IDENTIFIER, site):
        raise _fail(f"site id {site!r} is not a valid identifier", ExitCode.USAGE)
    if not _api_url():
        raise _fail(
            "PREFECT_API_URL is not set: a site worker polls the coordinator's Prefect server; "
            "set PREFECT_API_URL and PREFECT_API_AUTH_STRING (e.g. in /etc/dpate/worker.env)",
            ExitCode.SETTINGS,
        )
    try:
        url = check_site_ledger(site)
    except SettingsError as exc:
        raise _fail(str(exc), ExitCode.SETTINGS) from None
    except LedgerError as exc:
        raise _fail(str(exc), ExitCode.LEDGER) from None
    os.environ[WORKER_SITE_ENV] = site
    os.environ.setdefault("DO_NOT_TRACK", "1")
    pool = pool or f"site-{site}"
    err.print(
        f"site {site}: ledger {shown_url(url)}; polling pool {pool!r}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    from dpate.deployments.site_worker import serve

    serve(pool, name=name, limit=limit)
