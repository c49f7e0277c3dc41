"""``dpate site approve SPEC --site SITE``: the site's operator approves a study spec by hash
(docs/how-to/deploying.md, "What a site trusts the coordinator with"). Registered in
:mod:`dpate.cli.site`.

The spec is read (a local path or a URL the operator names), validated, checked to name the site
and to list the site's own signing key (reports are signed by default), and copied into the
site's approved specs folder as ``<spec_hash>.toml`` (:mod:`dpate.site.approvals`). The site's
worker runs only specs approved so, named by that hash; approving the same spec again changes
nothing. Run ``dpate check SPEC --site SITE`` first: it says what a release would publish and
spend.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from dpate.cli.environment import SpecArg

err = Console(stderr=True)


def site_approve_cmd(
    spec: SpecArg,
    site: Annotated[
        str,
        typer.Option("--site", help="this site's id (as in the study spec)", show_default=False),
    ],
) -> None:
    """Approve a study spec for this site's worker: it then runs this spec, by its hash.

    Copies the checked spec into the site's approved specs folder (DPATE_SPECS, or 'specs' in
    the site config; default $DPATE_HOME/specs) and prints its hash: the coordinator's runs name
    the spec by this hash. Nothing else the coordinator names is run."""
    from dpate.site.approvals import approve_spec

    approved = approve_spec(spec, site=site)
    s = approved.spec
    p = s.site(site).privacy
    err.print(
        f"site {site}: study {s.study_id} round {s.release}, estimator {s.estimator}, each release "
        f"spends epsilon {p.epsilon}, delta {p.delta}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    key = s.site(site).public_key
    err.print(
        f"site {site}: reports signed with your key {key} (the spec's public_key for {site})"
        if key is not None
        else f'site {site}: reports unsigned (the study opts out: signing = "none", '
        f"{s.unsigned_reason}): anyone who can write to the bucket can publish in your name",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    err.print(
        f"{'approved' if approved.new else 'already approved'}: {approved.path}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    print(approved.spec_hash)
