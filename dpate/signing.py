"""Ed25519 signatures of site reports (docs/how-to/deploying.md, Trust).

Reports are signed by default: a study spec that does not opt out (``signing = "none"`` with an
``unsigned_reason``) needs every site's public key. A site makes its key pair once (``dpate site
keygen SITE``): the private key stays at the site (a PEM file, mode 0600, named by the site's
``DPATE_SITE_KEY``; local runs default to ``$DPATE_HOME/keys/<site>.ed25519.pem``); the public key
goes into the study spec (``[[sites]] public_key = "ed25519:<base64>"``).

What is signed: the report's canonical JSON *without* its ``signature`` field. The signature
travels inside the report as ``"signature": "ed25519:<base64>"``, so a report stays one
write-once object and the published document is canonical JSON of the signed content plus that
field. Ed25519 is deterministic, so re-publishing a committed release gives identical bytes.

The aggregator checks (:func:`signature_problems`) that the published bytes are exactly the
canonical JSON of their content (one byte changed is either not canonical or changes the signed
content) and that the signature verifies under the spec's key for that site.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dpate.errors import DpateError, ExitCode
from dpate.schemas.reports import loads_bounded
from dpate.schemas.spec import canonical_json

__all__ = [
    "SITE_KEY_ENV",
    "SigningError",
    "ensure_private_key",
    "generate_key_pair",
    "load_private_key",
    "parse_public_key",
    "public_key_text",
    "sign_bytes",
    "signature_problems",
    "site_signing_key",
    "unsigned_site_problem",
    "with_public_key",
    "write_private_key",
]

SITE_KEY_ENV = "DPATE_SITE_KEY"
_PREFIX = "ed25519:"


class SigningError(DpateError, ValueError):
    """A key or signature cannot be used; the message says what to do next."""

    exit_code = ExitCode.SETTINGS
    cause = "site signing key"


def _b64(text: str) -> bytes:
    """Strict base64: only the one canonical encoding of the bytes is accepted (the unused low
    bits of the last character must be zero), so a signature has exactly one text."""
    raw = base64.b64decode(text, validate=True)
    if base64.b64encode(raw).decode() != text:
        raise ValueError("not the canonical base64 encoding")
    return raw


def public_key_text(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """``ed25519:<base64 of the 32 raw bytes>``: the form the spec's ``public_key`` takes."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _PREFIX + base64.b64encode(raw).decode()


def parse_public_key(text: str) -> Ed25519PublicKey:
    if not text.startswith(_PREFIX):
        raise SigningError(f"public key {text[:20]!r}... must start with {_PREFIX!r}")
    try:
        return Ed25519PublicKey.from_public_bytes(_b64(text[len(_PREFIX) :]))
    except ValueError:
        raise SigningError(
            "public key is not 32 bytes of base64 after 'ed25519:'; paste the line printed by "
            "dpate site keygen"
        ) from None


def generate_key_pair(site_id: str, out_dir: str | Path) -> tuple[Path, str]:
    """Write ``<out_dir>/<site_id>.ed25519.pem`` (mode 0600, refused if it exists); returns the
    file and the public key text."""
    path = Path(out_dir) / f"{site_id}.ed25519.pem"
    return path, write_private_key(path)


def write_private_key(path: str | Path) -> str:
    """Make a new Ed25519 key pair and write its private half to ``path`` (mode 0600, its folder
    created; refused if the file exists); returns the public key text."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SigningError(
            f"{path} already exists: a site keeps one signing key (its public half is in the "
            f"spec); remove it deliberately first if you really mean to replace it"
        ) from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(path, 0o600)
    return public_key_text(key)


def ensure_private_key(path: str | Path) -> str:
    """The public key text of the private key at ``path``, made first when the file is absent
    (the embedded runs' keys: ``dpate demo``)."""
    if not Path(path).exists():
        return write_private_key(path)
    return public_key_text(load_private_key(path))


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The site's private key; refused when others can read the file (like ssh)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        data = p.read_bytes()
    except OSError as exc:
        raise SigningError(
            f"cannot read the site signing key {p} ({exc.strerror}); set {SITE_KEY_ENV} to the "
            f"file written by dpate site keygen"
        ) from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(
            f"the site signing key {p} is readable by other users (mode {oct(mode & 0o777)}); "
            f"chmod 600 it (Kubernetes secrets: defaultMode 0400)"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise SigningError(f"{p} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{p} is not an Ed25519 key; make one with dpate site keygen")
    return key


def unsigned_site_problem(spec: Any, site_id: str) -> str | None:
    """Why reports of ``site_id`` cannot be accepted as the spec stands (None when they can):
    reports are signed by default (``signing = "required"``), and the spec lists no
    ``public_key`` for the site. The site refuses to release, ``dpate check`` and ``dpate run``
    stop before anything is spent, and the aggregator rejects such a site's report, all with
    this message."""
    if spec.signing != "required" or spec.site(site_id).public_key is not None:
        return None
    return (
        f"reports are signed by default and the spec lists no public_key for site {site_id!r}: "
        f"the site makes its key with dpate site keygen {site_id} and the coordinator adds the "
        f"printed public_key to the site's [[sites]] entry (on one machine, dpate site keygen "
        f"{site_id} --spec STUDY.toml does both), or the study opts out with "
        f'signing = "none" and an unsigned_reason'
    )


def site_signing_key(spec: Any, site_id: str, key_path: str | None) -> Ed25519PrivateKey | None:
    """The key the site signs its reports with: the private key file ``key_path`` (the site's
    ``DPATE_SITE_KEY``, :class:`dpate.settings.SiteSettings`); None when the spec lists no key
    for the site under ``signing = "none"`` (the report is published unsigned).

    Refuses, before anything is reserved or published, a site the spec gives no key in a signed
    study (:func:`unsigned_site_problem`), a missing key file, and a key whose public half is not
    the spec's.
    """
    problem = unsigned_site_problem(spec, site_id)
    if problem is not None:
        raise SigningError(problem)
    public_key = spec.site(site_id).public_key
    if public_key is None:
        return None
    if not key_path:
        raise SigningError(
            f"the study spec lists a public key for site {site_id}, so its reports must be "
            f"signed: set {SITE_KEY_ENV} (or site_key in the site config file) to the site's "
            f"private key file (dpate site keygen {site_id})"
        )
    key = load_private_key(key_path)
    if public_key_text(key) != public_key:
        raise SigningError(
            f"{SITE_KEY_ENV} holds the key {public_key_text(key)}, but the spec lists "
            f"{public_key} for site {site_id}: use the matching key or update the spec"
        )
    return key


_SITES_HEADER = re.compile(r"^\s*\[\[\s*sites\s*\]\]\s*(#.*)?$")
_OTHER_HEADER = re.compile(r"^\s*\[")
_ID_LINE = re.compile(r"""^\s*id\s*=\s*(["'])(?P<id>[^"']+)\1\s*(#.*)?$""")
_KEY_LINE = re.compile(r"^\s*public_key\s*=")


def with_public_key(spec_text: str, site_id: str, public_key: str) -> str:
    """The spec's TOML text with ``public_key = "<public_key>"`` added to site ``site_id``'s
    ``[[sites]]`` table, right after its ``id`` line; the rest of the text (comments, order)
    unchanged. Refused (:class:`SigningError`, with the line to paste by hand) when the site's
    table is not found as ``[[sites]]`` with an ``id = "..."`` line of its own, or already lists
    a key; the result is checked to read back with that key."""
    from dpate.schemas.spec import SpecError, StudySpec

    parse_public_key(public_key)
    line = f'public_key = "{public_key}"'
    lines = spec_text.splitlines(keepends=True)
    in_sites, block_start, found = False, 0, None
    for i, text in enumerate([*lines, "[end]\n"]):
        if _SITES_HEADER.match(text) or _OTHER_HEADER.match(text):
            if found is not None and in_sites:
                if any(_KEY_LINE.match(t) for t in lines[block_start:i]):
                    raise SigningError(
                        f"site {site_id!r} already lists a public_key in the spec: replace it "
                        f"by hand if you really mean to change the site's key"
                    )
                break
            in_sites, block_start = bool(_SITES_HEADER.match(text)), i
        elif in_sites and (m := _ID_LINE.match(text)) and m["id"] == site_id:
            found = i
    if found is None:
        raise SigningError(
            f"no [[sites]] table with id = {site_id!r} found in the spec's text: add the line "
            f"{line} to that site's entry by hand"
        )
    head = "".join(lines[: found + 1])
    edited = (
        head + ("" if head.endswith("\n") else "\n") + line + "\n" + "".join(lines[found + 1 :])
    )
    try:
        spec = StudySpec.from_toml_text(edited)
        listed = spec.site(site_id).public_key
    except (SpecError, KeyError):
        listed = None
    if listed != public_key:
        raise SigningError(
            f"adding the key to site {site_id!r} did not give a valid spec with that key: add "
            f"the line {line} to that site's entry by hand"
        )
    return edited


def sign_bytes(key: Ed25519PrivateKey, message: bytes) -> str:
    return _PREFIX + base64.b64encode(key.sign(message)).decode()


def signature_problems(data: bytes, public_key: str) -> list[str]:
    """Why ``data`` (a published report) is not signed by ``public_key`` (empty when it is)."""
    try:
        doc: Any = loads_bounded(data, what="report")
    except ValueError as exc:
        return [str(exc)]
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    sig = doc.pop("signature", None)
    if sig is None:
        return ["the report is unsigned, but the spec lists a public key for this site"]
    try:
        canonical = canonical_json({**doc, "signature": sig})
    except ValueError:
        return ["not canonical JSON (non-finite number)"]
    if canonical != (data.encode() if isinstance(data, str) else bytes(data)):
        return ["the report is not canonical JSON, so its bytes are not the signed ones"]
    if not isinstance(sig, str) or not sig.startswith(_PREFIX):
        return ["signature must be a string 'ed25519:<base64>'"]
    try:
        raw = _b64(sig[len(_PREFIX) :])
        parse_public_key(public_key).verify(raw, canonical_json(doc))
    except (ValueError, InvalidSignature):
        return [
            "the signature does not verify under the site's public key in the spec (forged, "
            "tampered with, or signed with another key)"
        ]
    return []


def seal_site_report(
    report: Any, spec: Any, site_id: str, committed: Any, key_path: str | None
) -> Any:
    """The site's report as published: with the ledger head of its COMMIT row
    (``committed.seq``, ``committed.row_hash``) and signed with the site's key ``key_path``
    (:func:`site_signing_key`: always, unless the study opted out). Deterministic."""
    from dpate.schemas.reports import LedgerHead

    seq = getattr(committed, "seq", None)
    if seq is not None:
        head = LedgerHead(seq=seq, row_hash=committed.row_hash)
        report = report.model_copy(update={"ledger_head": head})
    key = site_signing_key(spec, site_id, key_path)
    return report if key is None else report.signed_with(key)
