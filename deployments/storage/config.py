"""The object store's configuration for a dpate deployment on SeaweedFS (docs/how-to/deploying.md).

Two files, written once by the coordinator's operator into ``/etc/seaweedfs/`` (mode 0600):

``s3.json``
    The S3 identities (``weed mini -s3.config``). One per site, one for the aggregator, one for
    setup; each may do only what the study needs:

    ==========  ===================================================================================
    identity    actions
    ==========  ===================================================================================
    ``<site>``  ``Read``/``Write`` ``<bucket>/<root>/<study>/sites/<site>/*`` and ``Read``
                ``<bucket>/<root>/<study>/results/*`` for each study it is in; ``Read``
                ``<bucket>/specs/*``; ``List`` ``<bucket>``
    aggregator  ``Read`` and ``List`` ``<bucket>``; ``Write`` ``<bucket>/<root>/<study>/results/*``
                for each study
    setup       ``Read``/``Write`` ``<bucket>/specs/*`` (upload the specs; keep its key offline)
    ==========  ===================================================================================

    Every grant names its study: SeaweedFS's ``*`` also matches ``/``, so a grant such as
    ``<root>/*/sites/<site>/*`` would let a site create ``<root>/<study>/sites/<other>/sites/<site>/x``
    inside another site's folder (and ``<root>/*/results/*`` would let the aggregator write below
    a site's folder). With the study fixed, every key a site may write starts with its own
    ``<root>/<study>/sites/<site>/``. A new study therefore means regenerating this file (existing
    keys are kept) and restarting SeaweedFS. ``Write`` includes deleting one's own objects
    (SeaweedFS has no separate delete action); nobody can delete another identity's objects.
    No identity has ``Admin``: the bucket is created by ``weed mini -bucket=<bucket>``.

``security.toml``
    Random JWT signing keys for the filer and volume servers (``[jwt.filer_signing]``,
    ``[jwt.signing]``, and their ``.read`` variants): the filer's HTTP port otherwise accepts
    any read or write with no identity at all. With these keys a request straight to the filer
    or a volume server without a token signed by SeaweedFS itself is refused (401), even on
    loopback. SeaweedFS reads this file from its working directory.

    python -m dpate.deployments.storage.config s3 --bucket dpate --out /etc/seaweedfs/s3.json SPEC...
    python -m dpate.deployments.storage.config security --out /etc/seaweedfs/security.toml

Each ``s3`` run prints nothing secret; the keys are in the written file (hand each site its own
pair over a channel you trust).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "aggregator_actions",
    "build_s3_config",
    "security_toml",
    "setup_actions",
    "site_actions",
    "study_sites",
]

SETUP = "setup"
AGGREGATOR = "aggregator"


def site_actions(bucket: str, root: str, studies: Iterable[str], site: str) -> list[str]:
    """What site ``site`` may do: its own folder of each of its studies, read those studies'
    results (the heads its ledger is checked against before every reservation and by ``dpate
    ledger verify --against-reports``), the specs, list."""
    acts: list[str] = []
    for study in sorted(studies):
        scope = f"{bucket}/{root}/{study}/sites/{site}/*"
        acts += [f"Read:{scope}", f"Write:{scope}", f"Read:{bucket}/{root}/{study}/results/*"]
    return [*acts, f"Read:{bucket}/specs/*", f"List:{bucket}"]


def aggregator_actions(bucket: str, root: str, studies: Iterable[str]) -> list[str]:
    """The untrusted aggregator: reads and lists everything, writes only each study's results."""
    return [
        f"Read:{bucket}",
        f"List:{bucket}",
        *(f"Write:{bucket}/{root}/{s}/results/*" for s in sorted(studies)),
    ]


def setup_actions(bucket: str) -> list[str]:
    """The operator's setup identity: uploads the study specs, nothing else."""
    return [f"Read:{bucket}/specs/*", f"Write:{bucket}/specs/*", f"List:{bucket}"]


def study_sites(spec_path: str | Path) -> tuple[str, list[str]]:
    """(study id, site ids) of a study spec file (``study_id`` and ``[[sites]] id``)."""
    data = tomllib.loads(Path(spec_path).read_text())
    study = data.get("study_id")
    sites = [s.get("id") for s in data.get("sites", [])]
    if not isinstance(study, str) or not sites or not all(isinstance(s, str) for s in sites):
        raise ValueError(
            f"{spec_path}: a study spec needs study_id and at least one [[sites]] id;"
            " pass the spec the study is deployed with"
        )
    for name in (study, *sites):
        if "/" in name or "*" in name or name in ("", ".", ".."):
            raise ValueError(f"{spec_path}: id {name!r} may not contain '/' or '*'")
    return study, sites


def _keys(existing: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for ident in (existing or {}).get("identities", []):
        creds = ident.get("credentials") or []
        if creds:
            out[ident["name"]] = creds[0]
    return out


def _new_key(name: str) -> dict[str, str]:
    return {"accessKey": f"{name}-{secrets.token_hex(8)}", "secretKey": secrets.token_urlsafe(30)}


def build_s3_config(
    studies: Mapping[str, Iterable[str]],
    *,
    bucket: str = "dpate",
    root: str = "studies",
    existing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``s3.json`` for ``studies`` (study id -> site ids). Keys of identities already in
    ``existing`` (a previous ``s3.json``) are kept, so adding a study rotates nobody's key."""
    keys = _keys(existing)
    per_site: dict[str, set[str]] = {}
    for study, sites in studies.items():
        for site in sites:
            if site in (SETUP, AGGREGATOR):
                raise ValueError(f"site id {site!r} is reserved for an operator identity")
            per_site.setdefault(site, set()).add(study)
    idents = [
        (SETUP, setup_actions(bucket)),
        (AGGREGATOR, aggregator_actions(bucket, root, studies)),
        *((s, site_actions(bucket, root, per_site[s], s)) for s in sorted(per_site)),
    ]
    return {
        "identities": [
            {"name": name, "credentials": [keys.get(name) or _new_key(name)], "actions": acts}
            for name, acts in idents
        ]
    }


def security_toml(expires_after_seconds: int = 10) -> str:
    """JWT signing keys (random) for the filer and volume servers, writes and reads."""
    out = ["# SeaweedFS JWT keys (docs/how-to/deploying.md); keep secret, mode 0600"]
    for section in (
        "jwt.signing",
        "jwt.signing.read",
        "jwt.filer_signing",
        "jwt.filer_signing.read",
    ):
        out += [
            f"[{section}]",
            f'key = "{secrets.token_hex(32)}"',
            f"expires_after_seconds = {expires_after_seconds}",
            "",
        ]
    return "\n".join(out)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dpate.deployments.storage.config", description=__doc__
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    s3 = sub.add_parser("s3", help="write s3.json (identities) for the given study specs")
    s3.add_argument("specs", nargs="+", help="study spec files (TOML)")
    s3.add_argument("--bucket", default="dpate")
    s3.add_argument("--root", default="studies", help="publication root inside the bucket")
    s3.add_argument("--out", required=True, help="s3.json to write (existing keys are kept)")
    sec = sub.add_parser("security", help="write security.toml (random JWT keys)")
    sec.add_argument("--out", required=True)
    sec.add_argument("--force", action="store_true", help="replace an existing file")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.cmd == "security":
        if out.exists() and not args.force:
            print(f"{out} exists; pass --force to replace its keys", file=sys.stderr)
            return 1
        _write_private(out, security_toml())
        print(f"wrote {out}")
        return 0
    studies: dict[str, list[str]] = {}
    for spec in args.specs:
        study, sites = study_sites(spec)
        studies[study] = sites
    existing = json.loads(out.read_text()) if out.exists() else None
    if existing:  # keep the studies already configured
        for ident in existing.get("identities", []):
            if ident["name"] == AGGREGATOR:
                for act in ident.get("actions", []):
                    prefix = f"Write:{args.bucket}/{args.root}/"
                    if act.startswith(prefix) and act.endswith("/results/*"):
                        study = act.removeprefix(prefix).removesuffix("/results/*")
                        studies.setdefault(study, [])
        for ident in existing.get("identities", []):
            for act in ident.get("actions", []):
                prefix = f"Write:{args.bucket}/{args.root}/"
                if act.startswith(prefix) and "/sites/" in act:
                    study, site = act.removeprefix(prefix).removesuffix("/*").split("/sites/")
                    if site not in studies.setdefault(study, []):
                        studies[study].append(site)
    cfg = build_s3_config(studies, bucket=args.bucket, root=args.root, existing=existing)
    _write_private(out, json.dumps(cfg, indent=1) + "\n")
    names = [i["name"] for i in cfg["identities"]]
    print(f"wrote {out}: identities {', '.join(names)}; studies {', '.join(sorted(studies))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
