"""``dpate site keygen``: the site's side of the Trust rules (docs/how-to/deploying.md, Trust).
Registered in :mod:`dpate.cli.site`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)


def keygen(
    site: Annotated[str, typer.Argument(help="site id (as in the study spec)")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="folder for the private key file OUT/SITE.ed25519.pem (default: the site's "
            "DPATE_SITE_KEY, else $DPATE_HOME/keys/SITE.ed25519.pem, where local runs look)",
            show_default=False,
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            "--spec",
            help="also add the public key to this site's [[sites]] entry of the study spec "
            "file STUDY.toml (a spec of your own, run on this machine: its hash changes)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Make the site's Ed25519 report-signing key pair.

    Writes the private key (mode 0600; it never leaves the site: the site's DPATE_SITE_KEY names
    it) and prints the public key to put in the spec as the site's public_key (--spec adds it
    to a spec file of your own). Reports are signed by default: a study spec needs every
    site's public_key unless it opts out.
    """
    from dpate.errors import DpateError
    from dpate.settings import SiteSettings, site_key_path
    from dpate.signing import generate_key_pair, with_public_key, write_private_key
    from dpate.storage import check_part

    try:
        check_part(site, "site id")
        text = None if spec is None else _read(spec, site)
        if out is None:
            cfg = SiteSettings.load().for_site(site, "")
            path = Path(str(site_key_path(site, "", cfg=cfg)))
            public = write_private_key(path)
        else:
            path, public = generate_key_pair(site, out)
        if spec is not None and text is not None:
            spec.write_text(with_public_key(text, site, public), encoding="utf-8")
    except (DpateError, ValueError, OSError) as exc:  # SigningError, SettingsError, ...
        err.print(str(exc), style="red", soft_wrap=True, highlight=False, markup=False)
        raise typer.Exit(_exit_code(exc)) from None
    err.print(
        f"private key written to {path} (mode 0600): keep it at the site; set",
        soft_wrap=True,
        markup=False,
    )
    err.print(f"  DPATE_SITE_KEY={path}", soft_wrap=True, highlight=False, markup=False)
    err.print(
        "in the site's worker environment (a local run without it looks there already when "
        "--out was not given), and put this line in the site's [[sites]] entry of the spec:",
        soft_wrap=True,
        markup=False,
    )
    err.print(
        f'  public_key = "{public}"   # site {site}', highlight=False, soft_wrap=True, markup=False
    )
    if spec is not None:
        err.print(
            f"(added to site {site}'s entry in {spec})",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
    print(public)


def _exit_code(exc: Exception) -> int:
    """A refusal's exit code (docs/reference/pipeline.md): its own for dpate's errors, usage for a site id
    that cannot name a file, settings for a key file that cannot be written."""
    from dpate.errors import DpateError, ExitCode

    if isinstance(exc, DpateError):
        return int(exc.exit_code)
    return int(ExitCode.SETTINGS if isinstance(exc, OSError) else ExitCode.USAGE)


def _read(spec: Path, site: str) -> str:
    """The spec file's text; refused before any key is made when the key could not be added to
    it (the site is not in it, or already has a key)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dpate.signing import SigningError, public_key_text, with_public_key

    try:
        text = spec.read_text(encoding="utf-8")
    except OSError as exc:
        raise SigningError(f"cannot read the spec {spec}: {exc.strerror}") from None
    with_public_key(text, site, public_key_text(Ed25519PrivateKey.generate()))  # a dry run
    return text
