"""``dpate site``: the commands a site's operator runs at the site, one module each:
:mod:`~dpate.cli.site.keygen` (``site keygen``: the site's report-signing key),
:mod:`~dpate.cli.site.worker` (``site worker``: the site's own Prefect worker) and
:mod:`~dpate.cli.site.approve` (``site approve``: a study spec approved by hash). The group is
added to ``dpate`` in :mod:`dpate.cli.main`."""

from __future__ import annotations

import typer

from dpate.cli.errors import TYPER_OPTIONS
from dpate.cli.site.approve import site_approve_cmd
from dpate.cli.site.keygen import keygen
from dpate.cli.site.worker import site_worker_cmd

__all__ = ["site_app"]

site_app = typer.Typer(
    help="A site's signing key and its worker.", no_args_is_help=True, **TYPER_OPTIONS
)
site_app.command("keygen")(keygen)
site_app.command("worker")(site_worker_cmd)
site_app.command("approve")(site_approve_cmd)
