"""``dpate site keygen``: the site's side of the Trust rules (docs/deploying.md, Trust).
Registered in :mod:`dpate.cli.main` (with ``site worker``: :mod:`dpate.cli.site_worker`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from dpate.cli.errors import TYPER_OPTIONS

site_app = typer.Typer(
    help="A site's signing key and its worker.", no_args_is_help=True, **TYPER_OPTIONS
)
console = Console()
err = Console(stderr=True)


@site_app.command("keygen")
def keygen(
    site: str = typer.Argument(..., help="site id (as in the study spec)"),
    out: Path = typer.Option(  # noqa: B008
        ..., "--out", help="folder for the private key file (stays at the site)"
    ),
) -> None:
    """Make the site's Ed25519 report-signing key pair.

    Writes OUT/SITE.ed25519.pem (mode 0600; never leaves the site: point DPATE_SITE_KEY
    at it) and prints the public key to put in the spec as the site's public_key.
    """
    from dpate.schemas.signing import SigningError, generate_key_pair
    from dpate.storage import InvalidKeyError, check_part

    try:
        check_part(site, "site id")
        path, public = generate_key_pair(site, out)
    except (SigningError, InvalidKeyError) as exc:
        err.print(str(exc), style="red", soft_wrap=True, highlight=False, markup=False)
        raise typer.Exit(1) from None
    err.print(
        f"private key written to {path} (mode 0600): keep it at the site; set", soft_wrap=True
    )
    err.print(f"  DPATE_SITE_KEY={path}", soft_wrap=True, highlight=False)
    err.print("in the site's worker environment, and put this line in the study spec:")
    err.print(f'  [[sites]] id = "{site}" ... public_key = "{public}"', highlight=False)
    print(public)
