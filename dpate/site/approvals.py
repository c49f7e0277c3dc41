"""The specs a site's operator approved: the only ones its worker runs (docs/how-to/deploying.md, "What
a site trusts the coordinator with").

A deployed run names its spec by hash (``spec`` = the 64 hex digits of
:attr:`dpate.schemas.spec.StudySpec.spec_hash`), never by a path or URL: the coordinator cannot
point a site at a file of its own (``/etc/dpate/site.toml``, the data file, a loopback port) and
learn from the failure. The site reads the spec from its own *approved specs* folder, the site
config's ``specs`` (``DPATE_SPECS``; default ``$DPATE_HOME/specs``), where ``dpate site approve
SPEC`` put a copy named ``<spec_hash>.toml`` after the operator read and checked it. The folder is
content-addressed: a copy whose content no longer hashes to its name is refused, so an approved
spec cannot be swapped after the fact, on the server or here.

A run for an unapproved hash is refused before anything is read, with a message that names the
hash and what to do, and no local path.

API::

    approved = approve_spec("star.toml", site="rural")     # -> ApprovedSpec(hash, path, spec)
    spec = load_approved_spec(spec_hash, site="rural")      # or SettingsError (no path named)
    is_spec_hash(text)                                      # the run parameter's form
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from dpate.schemas.spec import SpecError, StudySpec
from dpate.settings import SettingsError, SiteSettings, dpate_home

__all__ = [
    "SPEC_HASH",
    "ApprovedSpec",
    "approve_spec",
    "approved_specs_dir",
    "is_spec_hash",
    "load_approved_spec",
    "read_spec_text",
]

#: A spec named by hash: the 64 lowercase hex digits of its ``spec_hash``.
SPEC_HASH = r"^[0-9a-f]{64}$"
#: An approved spec copy is a few kilobytes; a larger file is not read.
MAX_SPEC_BYTES = 256 * 1024


def is_spec_hash(text: str) -> bool:
    return re.fullmatch(SPEC_HASH, text) is not None


@dataclass(frozen=True)
class ApprovedSpec:
    spec_hash: str
    path: Path
    spec: StudySpec
    new: bool


def approved_specs_dir(site: str, settings: SiteSettings | None = None) -> Path:
    """The site's approved specs folder: ``specs`` of its configuration (``settings``, else
    :meth:`SiteSettings.load`: ``DPATE_SPECS``), else ``$DPATE_HOME/specs``."""
    cfg = (settings or SiteSettings.load()).for_site(site, "{study}")
    return Path(cfg.specs).expanduser() if cfg.specs else dpate_home() / "specs"


def read_spec_text(source: str) -> str:
    """The text of the spec at ``source`` (a local path or an fsspec URL), for the operator's own
    commands (``dpate site approve``): never called with a run parameter."""
    if "://" not in source or source.startswith("file://"):
        path = Path(source.removeprefix("file://"))
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError([("(file)", f"cannot read the spec: {exc}")], source) from None
    import fsspec

    try:
        with fsspec.open(source, "rt", encoding="utf-8") as f:
            return str(f.read())
    except (OSError, ValueError) as exc:
        raise SpecError([("(file)", f"cannot read the spec: {exc}")], source) from None


def approve_spec(source: str, *, site: str) -> ApprovedSpec:
    """Check the spec at ``source`` and copy it into ``site``'s approved specs folder as
    ``<spec_hash>.toml`` (write-once: an existing copy is kept). A source named like a
    content-addressed key (``<64 hex>.toml``) must hash to its name, and the spec's public_key
    for ``site`` must be the site's own (:func:`_check_site_key`). Raises SpecError (not a
    valid spec, or not naming ``site``), SigningError (the key) or SettingsError (the folder)."""
    text = read_spec_text(source)
    spec = StudySpec.from_toml_text(text, source)
    try:
        spec.site(site)
    except KeyError:
        raise SpecError(
            [("sites", f"site {site!r} is not one of the spec's sites")],
            source,
        ) from None
    name = source.rstrip("/").rsplit("/", 1)[-1].removesuffix(".toml")
    if is_spec_hash(name) and name != spec.spec_hash:
        raise SpecError(
            [
                (
                    "(file)",
                    f"the spec's hash is {spec.spec_hash}, not the {name} its name says: "
                    "the object was replaced after it was published; do not approve it",
                )
            ],
            source,
        )
    _check_site_key(spec, site)
    folder = approved_specs_dir(site)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec.spec_hash}.toml"
    new = not path.exists()
    if new:
        tmp = folder / f".{spec.spec_hash}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    return ApprovedSpec(spec.spec_hash, path, spec, new)


def _check_site_key(spec: StudySpec, site: str) -> None:
    """The spec's key for ``site`` is the one the site's worker signs with (its ``DPATE_SITE_KEY``
    / ``site_key``, as a deployed run reads it), or the study opts out and lists none: approving
    a spec attests the site's own key. Raises SigningError saying what to fix."""
    from dpate.settings import site_config, site_key_path
    from dpate.signing import site_signing_key

    cfg = site_config(site, spec.study_id)
    site_signing_key(spec, site, site_key_path(site, spec.study_id, deployed=True, cfg=cfg))


def load_approved_spec(spec_hash: str, *, site: str) -> StudySpec:
    """The spec ``site``'s operator approved under ``spec_hash``.

    Refused (SettingsError, naming the hash and what to do, never a path) when ``spec_hash`` is
    not a hash, when no copy was approved, when the copy does not hash to its name, or when the
    spec does not name ``site``."""
    if not is_spec_hash(spec_hash):
        raise SettingsError(
            f"site {site}: a deployed run names its study spec by hash (64 hex digits, as "
            f"printed by dpate site approve), not by a path or URL: refused before anything was "
            f"read"
        )
    path = approved_specs_dir(site) / f"{spec_hash}.toml"
    how = f"the site's operator approves a spec with: dpate site approve SPEC --site {site}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SettingsError(
            f"site {site}: spec {spec_hash[:12]}... is not approved at this site: refused ({how})"
        ) from None
    except OSError as exc:
        raise SettingsError(
            f"site {site}: the approved copy of spec {spec_hash[:12]}... cannot be read "
            f"({exc.strerror}); see the site's approved specs folder"
        ) from None
    try:
        if len(raw) > MAX_SPEC_BYTES:
            raise SpecError([("(file)", "larger than an approved spec may be")])
        spec = StudySpec.from_toml_text(raw.decode("utf-8"), f"approved spec {spec_hash[:12]}")
    except (SpecError, UnicodeDecodeError):
        raise SettingsError(
            f"site {site}: the approved copy of spec {spec_hash[:12]}... is no longer a valid "
            f"spec: refused ({how})"
        ) from None
    if spec.spec_hash != spec_hash:
        raise SettingsError(
            f"site {site}: the approved copy of spec {spec_hash[:12]}... no longer hashes to its "
            f"name (it was edited): refused ({how})"
        )
    try:
        spec.site(site)
    except KeyError:
        raise SettingsError(
            f"site {site}: the approved spec {spec_hash[:12]}... does not name this site"
        ) from None
    return spec
