"""``dpate site keygen`` and ``dpate ledger anchor-check``: the site's side of the Trust rules
(docs/deploying.md, Trust). Registered in :mod:`flows.cli`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.console import Console

site_app = typer.Typer(help="A site's signing key.", no_args_is_help=True)
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

    Writes ``<out>/<site>.ed25519.pem`` (mode 0600; never leaves the site: point DPATE_SITE_KEY
    at it) and prints the public key to put in the spec as the site's ``public_key``.
    """
    from schemas.signing import SigningError, generate_key_pair
    from tasks.storage import InvalidKeyError, check_part

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


def anchor_check(
    site: str = typer.Argument(..., help="site id"),
    ledger: str = typer.Option(None, "--ledger", help="ledger URL (default: the site's config)"),
    storage: str = typer.Option(
        None, "--storage", help="publication root (default: DPATE_STORAGE_URL)"
    ),
    study: list[str] = typer.Option(  # noqa: B008
        None, "--study", help="only these studies (default: every study under the root)"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Check the ledger against every head the site has published: exit 1 on any problem.

    Each report carries the sequence number and hash of its COMMIT row; a removed last row, a
    removed middle row, an edited amount or reordered rows no longer match a published head
    (even if the hash chain was recomputed to hide it).
    """
    from flows.cli import _ledger_url, _open
    from tasks.anchors import check_anchors, published_heads
    from tasks.storage import Store

    root = storage or os.environ.get("DPATE_STORAGE_URL", "").strip()
    if not root or "{study}" in root:
        err.print(
            "say where the site publishes: --storage URL (the root holding <study>/sites/...)",
            style="red",
        )
        raise typer.Exit(2)
    url = _ledger_url(site, ledger)
    heads, bare, unreadable = published_heads(Store(root), site, study or None)
    with _open(url, site) as led:
        report = check_anchors(led, heads)
    problems = report.problems + [f"unreadable report {u}" for u in unreadable]
    if not heads:
        problems.append(
            f"no report of site {site} under {root} carries a ledger head: nothing anchors "
            f"this ledger (check --storage)"
        )
    if as_json:
        doc = {
            "ledger": url,
            "storage": root,
            "ok": not problems,
            "rows": report.rows,
            "head_hash": report.head_hash,
            "heads": [h.__dict__ for h in heads],
            "reports_without_head": bare,
            "problems": problems,
        }
        print(json.dumps(doc, indent=2))
        if problems:
            raise typer.Exit(1)
        return
    if not problems:
        newest = heads[-1]
        print(
            f"ledger OK against {len(heads)} published head(s): {report.rows} rows; newest "
            f"published head row {newest.seq} {newest.row_hash}"
        )
        return
    for p in problems:
        err.print(p, style="red", soft_wrap=True, highlight=False, markup=False)
    err.print(f"ledger FAILED the anchor check: {len(problems)} problem(s)", soft_wrap=True)
    raise typer.Exit(1)
