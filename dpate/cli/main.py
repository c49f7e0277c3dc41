"""The ``dpate`` command line (typer). Heavy imports (Prefect) happen inside the commands.

Prefect runs embedded (an ephemeral server) unless ``PREFECT_API_URL`` points at a server. The
commands set quiet, offline defaults first (:func:`dpate.cli.environment.prefect_env`): analytics
off, a start-up timeout long enough for a first run's database migrations, Prefect's console logs
at WARNING (``--verbose`` shows them).

The commands, by module: :mod:`~dpate.cli.study` (``run``, ``site-release``, ``aggregate``),
:mod:`~dpate.cli.demo`, :mod:`~dpate.cli.report`, :mod:`~dpate.cli.plan`, :mod:`~dpate.cli.check`,
:mod:`~dpate.cli.ledger`, :mod:`~dpate.cli.data`, the ``site`` group (:mod:`~dpate.cli.site`: ``site
keygen``, ``site worker``, ``site approve``) and ``experiments`` (:mod:`dpate.experiments.cli`);
what they share: :mod:`~dpate.cli.output`, :mod:`~dpate.cli.environment` and
:mod:`~dpate.cli.errors` (exit codes).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from dpate.cli.check import check
from dpate.cli.data import data_app
from dpate.cli.demo import demo
from dpate.cli.errors import DEBUG, TYPER_OPTIONS, CliGroup
from dpate.cli.ledger import ledger_app
from dpate.cli.plan import plan
from dpate.cli.report import report_cmd
from dpate.cli.site import site_app
from dpate.cli.study import aggregate_cmd, run_cmd, site_release_cmd
from dpate.experiments.cli import experiments

__all__ = ["app"]

app = typer.Typer(
    help="Differentially private multi-site ATE estimation.",
    no_args_is_help=True,
    cls=CliGroup,
    **TYPER_OPTIONS,
)
# `dpate --help` lists the commands in this order, then the groups
app.command("experiments")(experiments)
app.command("plan")(plan)
app.command("check")(check)
app.command("demo")(demo)
app.command("run")(run_cmd)
app.command("site-release")(site_release_cmd)
app.command("aggregate")(aggregate_cmd)
app.command("report")(report_cmd)
app.add_typer(ledger_app, name="ledger")
app.add_typer(data_app, name="data")
app.add_typer(site_app, name="site")


@app.callback()
def main(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="show Prefect's logs and the traceback of an unexpected error"
        ),
    ] = False,
) -> None:
    """Differentially private multi-site ATE estimation.

    Errors end with one short message and an exit code naming the cause: 3 spec, 4 site data,
    5 ledger, 6 report, 7 storage, 8 site settings, 10 partial result, 11 sites failed for
    different causes, 1 unexpected (docs/reference/pipeline.md, "Checking before spending, and exit
    codes")."""
    DEBUG["on"] = debug or os.environ.get("DPATE_DEBUG", "").strip() in ("1", "true", "yes")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
