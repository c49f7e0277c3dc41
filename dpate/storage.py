"""Publication to object storage (fsspec): write-once objects under one root URL.

Layout under the root (a local folder by default; ``s3://bucket/prefix`` or any fsspec URL)::

    <root>/<study>/sites/<site>/<release_id>.json     one site report per release
    <root>/<study>/results/<round>.json               one study result per round

Keys are checked before any I/O (:func:`check_key`): no ``..`` or ``.`` segment, no leading
``/``, no empty segment, no backslash or control character, and each id that names a folder or an
object (study, site, release id, round) is one plain segment (:func:`check_part`), so no id, not
even an unvalidated round from a command line, can make a key point outside its own folder.

Every object is written once (:func:`write_once`): publishing the same bytes again is a no-op,
publishing different bytes over an existing object is refused with
:class:`PublicationConflictError`. Only public documents ever reach this module.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
from fsspec.implementations.local import LocalFileSystem

from dpate.errors import DpateError, ExitCode

__all__ = [
    "InvalidKeyError",
    "ObjectTooLargeError",
    "PublicationConflictError",
    "Store",
    "check_key",
    "check_part",
    "write_once",
]

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$")
_BAD_CHARS = re.compile(r"[\\\x00-\x1f\x7f]")


class InvalidKeyError(ValueError):
    """A storage key or one of its ids could point outside its folder; nothing was read or
    written."""


def check_part(value: str, what: str) -> str:
    """``value`` as one key segment: starts with a letter or digit, then letters, digits,
    ``_ . : -`` (no ``/``, so no ``..`` traversal), at most 256 characters."""
    if not isinstance(value, str) or not _PART.match(value):
        raise InvalidKeyError(
            f"{what} {str(value)[:80]!r} cannot name a storage object: use letters, digits and "
            f"'_', '.', ':', '-' (starting with a letter or digit; no '/' or '..')"
        )
    return value


def check_key(key: str) -> str:
    """Refuse a key that is empty, absolute, has an empty, ``.`` or ``..`` segment, or holds a
    backslash or control character."""
    if not isinstance(key, str) or not key or key.startswith("/") or _BAD_CHARS.search(key):
        raise InvalidKeyError(
            f"storage key {str(key)[:80]!r} is empty, absolute or has bad characters"
        )
    if any(seg in ("", ".", "..") for seg in key.split("/")):
        raise InvalidKeyError(
            f"storage key {key[:80]!r} has an empty, '.' or '..' segment (path traversal)"
        )
    return key


class PublicationConflictError(DpateError, RuntimeError):
    """An object already exists at the path with different bytes; it is never overwritten."""

    exit_code = ExitCode.STORAGE
    cause = "publication conflict"


class ObjectTooLargeError(ValueError):
    """An object is larger than its reader accepts; it was not read."""

    def __init__(self, key: str, size: int, limit: int):
        self.key, self.size, self.limit = key, size, limit
        super().__init__(f"{key} is {size} bytes, more than the {limit} accepted here")


def write_once(fs: Any, path: str, data: bytes) -> Literal["written", "unchanged"]:
    """Create ``path`` holding ``data`` unless it exists; the one write-once rule of dpate.

    * absent: written atomically (local: a temporary file hard-linked into place, so a reader
      never sees a partial object and a crash leaves none; S3: ``PutObject`` with
      ``If-None-Match: *``, refused by the server if another writer got there first);
    * present with identical bytes: ``"unchanged"`` (a re-run publishes nothing new);
    * present with different bytes: :class:`PublicationConflictError`.

    Other fsspec backends fall back to check-then-write (not atomic against a concurrent writer;
    document which backend a deployment uses).
    """
    try:
        _create_exclusive(fs, path, data)
        return "written"
    except FileExistsError:
        pass
    existing = fs.cat_file(path)
    if existing == data:
        return "unchanged"
    raise PublicationConflictError(
        f"{path} already exists with different content ({len(existing)} bytes, the new document "
        f"has {len(data)}): published objects are written once and never replaced. If this is a "
        f"new release, it needs a new round or spec; if the stored object is wrong, an operator "
        f"must investigate before anything is removed"
    )


def _create_exclusive(fs: Any, path: str, data: bytes) -> None:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if isinstance(fs, LocalFileSystem):
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # atomic; FileExistsError if the object is there
        finally:
            os.unlink(tmp)
    elif {"s3", "s3a"} & set(protocols):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise
        except OSError as exc:
            # 412 without a Condition field (SeaweedFS, MinIO): s3fs raises OSError(EINVAL)
            if exc.errno == errno.EINVAL or "precondition" in str(exc).lower().replace("-", ""):
                raise FileExistsError(path) from None
            raise
    else:
        if fs.exists(path):
            raise FileExistsError(path)
        fs.pipe_file(path, data)


@dataclass(frozen=True)
class Store:
    """The publication root of a study's documents."""

    url: str

    @property
    def _fs_root(self) -> tuple[Any, str]:
        fs, root = fsspec.core.url_to_fs(self.url)
        return fs, root.rstrip("/")

    def uri(self, key: str) -> str:
        """A URL naming the object (for messages and artifacts)."""
        return self.url.rstrip("/") + "/" + key

    @staticmethod
    def site_report_key(study_id: str, site_id: str, release_id: str) -> str:
        check_part(study_id, "study id")
        check_part(site_id, "site id")
        check_part(release_id, "release id")
        return f"{study_id}/sites/{site_id}/{release_id}.json"

    @staticmethod
    def result_key(study_id: str, round: str) -> str:
        check_part(study_id, "study id")
        check_part(round, "round")
        return f"{study_id}/results/{round}.json"

    def publish(self, key: str, data: bytes) -> Literal["written", "unchanged"]:
        fs, root = self._fs_root
        return write_once(fs, posixpath.join(root, check_key(key)), data)

    def read(self, key: str, *, max_bytes: int | None = None) -> bytes | None:
        """The object's bytes, or None when it does not exist.

        With ``max_bytes``, an object larger than that is not read: :class:`ObjectTooLargeError`
        (its size is checked first, and at most ``max_bytes + 1`` bytes are ever read).
        """
        fs, root = self._fs_root
        path = posixpath.join(root, check_key(key))
        try:
            if max_bytes is None:
                whole: bytes = fs.cat_file(path)
                return whole
            size = fs.size(path)
            if size is not None and size > max_bytes:
                raise ObjectTooLargeError(key, size, max_bytes)
            data: bytes = fs.cat_file(path, start=0, end=max_bytes + 1)
        except FileNotFoundError:
            return None
        if len(data) > max_bytes:
            raise ObjectTooLargeError(key, len(data), max_bytes)
        return data

    def exists(self, key: str) -> bool:
        """Whether an object is stored at ``key`` (the check before reserving a release)."""
        fs, root = self._fs_root
        return bool(fs.exists(posixpath.join(root, check_key(key))))

    def children(self, key_dir: str) -> list[str]:
        """Keys of the objects directly under ``key_dir`` (never recursive), sorted; ``""``
        lists the root (e.g. the studies)."""
        fs, root = self._fs_root
        where = posixpath.join(root, check_key(key_dir)) if key_dir else root
        try:
            names = fs.ls(where, detail=False)
        except FileNotFoundError:
            return []
        leaves = (posixpath.basename(n.rstrip("/")) for n in names)
        prefix = f"{key_dir}/" if key_dir else ""
        return sorted(f"{prefix}{leaf}" for leaf in leaves if not leaf.startswith("."))

    def site_report_keys(self, study_id: str, site_id: str) -> list[str]:
        """Keys of every report a site published in a study (any round), sorted."""
        fs, root = self._fs_root
        check_part(study_id, "study id")
        check_part(site_id, "site id")
        base = posixpath.join(root, study_id, "sites", site_id)
        try:
            names = fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            leaf = posixpath.basename(name.rstrip("/"))
            if leaf.endswith(".json") and not leaf.startswith("."):
                out.append(f"{study_id}/sites/{site_id}/{leaf}")
        return sorted(out)
