"""``dpate data fetch``: download (or copy from a local mirror) the public data sets, verified.

Each file of :data:`dpate.data.sources.SOURCES` is fetched from its URLs in order
(standard library ``urllib`` only) or copied from ``MIRROR/<data set>/<file>``, hashed while it
streams, and accepted only if its sha256 equals the pinned one. A data set is staged in a temporary
folder inside the destination and its files are renamed into ``DEST/<data set>/`` only once
**every** file of it has been verified: a wrong checksum, a missing mirror file or a network failure
leaves nothing behind (the staging folder is removed). Files already present with the right checksum
are kept as they are.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dpate.data.sources import SOURCES, SourceFile

__all__ = ["ChecksumError", "FetchError", "FetchedFile", "fetch_datasets", "file_sha256"]

_CHUNK = 1 << 20
_TIMEOUT_S = 60.0


class FetchError(RuntimeError):
    """A data set could not be fetched; nothing of it was written."""


class ChecksumError(FetchError):
    """A file's bytes do not match its pinned sha256; it was refused."""


@dataclass(frozen=True)
class FetchedFile:
    """One file of the result: where it is and how it got there (``downloaded``, ``copied`` or
    ``present``, the latter when a verified copy was already in place)."""

    dataset: str
    name: str
    path: Path
    status: str
    source: str


Opener = Callable[[str], BinaryIO]


def _urlopen(url: str) -> BinaryIO:
    response: BinaryIO = urllib.request.urlopen(url, timeout=_TIMEOUT_S)
    return response


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_hashing(src: BinaryIO, dst: Path) -> str:
    digest = hashlib.sha256()
    with dst.open("wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _refused(dataset: str, spec: SourceFile, source: str, got: str) -> ChecksumError:
    return ChecksumError(
        f"{dataset}/{spec.name} from {source} was refused: its sha256 is {got}, but every data "
        f"file must match its pinned sha256 {spec.sha256} (dpate/data/sources.py, SOURCES). Nothing "
        f"of {dataset} was written; fetch it again from its original source, or repair the mirror."
    )


def _stage_file(
    dataset: str, spec: SourceFile, staging: Path, mirror: Path | None, opener: Opener
) -> tuple[Path, str, str]:
    """Write ``spec`` into ``staging`` and verify it; returns (path, status, source)."""
    part = staging / spec.name
    if mirror is not None:
        src = mirror / dataset / spec.name
        if not src.is_file():
            raise FetchError(
                f"{dataset}/{spec.name} is not in the mirror {mirror} (expected "
                f"{src}); the mirror must have the layout <mirror>/{dataset}/{spec.name}"
            )
        with src.open("rb") as fh:
            got = _copy_hashing(fh, part)
        if got != spec.sha256:
            part.unlink(missing_ok=True)
            raise _refused(dataset, spec, str(src), got)
        return part, "copied", str(src)
    failures: list[str] = []
    refused = False
    for url in spec.urls:
        try:
            with opener(url) as response:
                got = _copy_hashing(response, part)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            part.unlink(missing_ok=True)
            failures.append(f"{url} ({type(exc).__name__}: {exc})")
            continue
        if got != spec.sha256:
            part.unlink(missing_ok=True)
            refused = True
            failures.append(f"{url} (refused: sha256 {got})")
            continue
        return part, "downloaded", url
    if refused:
        raise ChecksumError(
            f"{dataset}/{spec.name} was refused: every data file must match its pinned sha256 "
            f"{spec.sha256} (dpate/data/sources.py, SOURCES), and no source did: "
            f"{'; '.join(failures)}. Nothing of {dataset} was written."
        )
    raise FetchError(
        f"{dataset}/{spec.name} could not be fetched from any source: {'; '.join(failures)}. "
        f"Nothing of {dataset} was written; with a local copy, use "
        f"`dpate data fetch {dataset} --from DIR`."
    )


def _fetch_one(dataset: str, dest: Path, mirror: Path | None, opener: Opener) -> list[FetchedFile]:
    source = SOURCES[dataset]
    folder = dest / dataset
    result: list[FetchedFile] = []
    missing: list[SourceFile] = []
    for spec in source.files:
        target = folder / spec.name
        if target.is_file() and file_sha256(target) == spec.sha256:
            result.append(FetchedFile(dataset, spec.name, target, "present", str(target)))
        else:
            missing.append(spec)
    if not missing:
        return result
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dataset}.partial-", dir=dest))
    try:
        staged = [(spec, *_stage_file(dataset, spec, staging, mirror, opener)) for spec in missing]
        folder.mkdir(exist_ok=True)
        for spec, part, status, src in staged:
            target = folder / spec.name
            part.replace(target)  # atomic on one filesystem: staging is inside dest
            result.append(FetchedFile(dataset, spec.name, target, status, src))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    order = {spec.name: i for i, spec in enumerate(source.files)}
    return sorted(result, key=lambda f: order[f.name])


def fetch_datasets(
    names: Iterable[str] | None,
    dest: Path,
    *,
    mirror: Path | None = None,
    opener: Opener = _urlopen,
) -> list[FetchedFile]:
    """Fetch the data sets ``names`` (default: all of :data:`SOURCES`) into ``dest/<name>/``.

    ``mirror``: copy from ``mirror/<name>/<file>`` instead of downloading. Every file is checked
    against its pinned sha256; a data set is written whole or not at all. Raises
    :class:`ChecksumError` for a file whose bytes differ (naming the file, both digests and the
    rule), :class:`FetchError` when a file cannot be obtained, ``ValueError`` for an unknown name.
    Data sets fetched before the failing one stay (each is complete and verified).
    """
    wanted = [n.lower() for n in names] if names else list(SOURCES)
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        extra = " (synth is generated, there is nothing to fetch)" if "synth" in unknown else ""
        raise ValueError(f"data sets {unknown} are not among {list(SOURCES)}{extra}")
    out: list[FetchedFile] = []
    for name in dict.fromkeys(wanted):
        out.extend(_fetch_one(name, dest, mirror, opener))
    return out
