"""`dpate data fetch`: verified copies from a local mirror, refusal of a corrupted file with nothing
left behind, the data-directory resolution, and the download path through a fake opener (the
network is never used). The mirror is the data directory the test conftest sets."""

from __future__ import annotations

import hashlib
import io
import shutil
import urllib.error
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpate.cli.main import app
from dpate.data.datasets import data_dir, load_lalonde
from dpate.data.fetch import ChecksumError, FetchError, fetch_datasets, file_sha256
from dpate.data.sources import SOURCES

from .test_datasets import needs_data

runner = CliRunner()
MIRROR = data_dir()


def fetch(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, ["data", "fetch", *args], env={"COLUMNS": "200", **(env or {})})


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_sources_table_is_complete_and_pinned():
    assert list(SOURCES) == ["ist", "star", "ihdp", "lalonde"]
    for src in SOURCES.values():
        assert src.citation and src.licence and src.files
        for f in src.files:
            assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0
            assert f.urls and all(u.startswith("https://") for u in f.urls)
    assert len(SOURCES["ihdp"].files) == 11  # columns.txt and 10 replications


@needs_data
def test_mirror_checksums_match_the_table():
    for name, src in SOURCES.items():
        for f in src.files:
            assert file_sha256(MIRROR / name / f.name) == f.sha256, f"{name}/{f.name}"


@needs_data
def test_fetch_from_mirror_verifies_copies_and_the_loaders_read_it(tmp_path, monkeypatch):
    dest = tmp_path / "data"
    res = fetch("lalonde", "ist", "--from", str(MIRROR), "--dest", str(dest))
    assert res.exit_code == 0, res.output
    assert "nswdemo.csv" in res.output and "IST_corrected.csv" in res.output
    assert "copied" in res.output and "verified" in res.output
    assert listing(dest) == ["ist", "ist/IST_corrected.csv", "lalonde", "lalonde/nswdemo.csv"]
    for name in ("ist", "lalonde"):
        f = SOURCES[name].files[0]
        assert file_sha256(dest / name / f.name) == f.sha256
    monkeypatch.setenv("DPATE_DATA_DIR", str(dest))
    assert load_lalonde().n == 722
    # a second run keeps the verified files and copies nothing
    again = fetch_datasets(["lalonde"], dest, mirror=MIRROR)
    assert [f.status for f in again] == ["present"]


@needs_data
def test_corrupted_mirror_file_is_refused_and_nothing_is_left(tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(MIRROR / "ihdp", mirror / "ihdp")
    bad = mirror / "ihdp" / "ihdp_npci_7.csv"
    raw = bytearray(bad.read_bytes())
    raw[100] = ord("9") if raw[100] != ord("9") else ord("8")  # one byte changed
    bad.write_bytes(bytes(raw))
    dest = tmp_path / "data"
    res = fetch("ihdp", "--from", str(mirror), "--dest", str(dest))
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "ihdp/ihdp_npci_7.csv" in out and "refused" in out
    assert "must match its pinned sha256" in out  # the rule
    assert SOURCES["ihdp"].files[7].sha256 in out  # the pinned value
    assert "Nothing of ihdp was written" in out
    # not the six good files copied before it, not the bad one, not the staging folder
    assert listing(dest) == []
    with pytest.raises(ChecksumError, match=r"ihdp_npci_7\.csv"):
        fetch_datasets(["ihdp"], dest, mirror=mirror)
    assert listing(dest) == []


@needs_data
def test_missing_mirror_file_and_unknown_names(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "star").mkdir(parents=True)
    dest = tmp_path / "data"
    res = fetch("star", "--from", str(mirror), "--dest", str(dest))
    assert res.exit_code == 2 and "star/STAR.csv is not in the mirror" in " ".join(
        res.output.split()
    )
    assert listing(dest) == []
    assert fetch("synth", "--dest", str(dest)).exit_code == 2
    assert fetch("mnist", "--dest", str(dest)).exit_code == 2
    assert fetch("ist", "--from", str(tmp_path / "nowhere"), "--dest", str(dest)).exit_code == 2


class FakeWeb:
    """Serves given bytes per URL; any other URL fails like a network error."""

    def __init__(self, pages: dict[str, bytes]):
        self.pages = pages
        self.asked: list[str] = []

    def __call__(self, url: str):
        self.asked.append(url)
        if url not in self.pages:
            raise urllib.error.URLError("unreachable")
        return io.BytesIO(self.pages[url])


@needs_data
def test_download_path_tries_sources_in_order_and_checks_the_hash(tmp_path):
    spec = SOURCES["ist"].files[0]
    good = (MIRROR / "ist" / spec.name).read_bytes()
    assert hashlib.sha256(good).hexdigest() == spec.sha256
    first, second = spec.urls
    # the first source serves other bytes (refused), the second the right ones
    web = FakeWeb({first: good[:-1] + b"X", second: good})
    done = fetch_datasets(["ist"], tmp_path, opener=web)
    assert web.asked == [first, second]
    assert [(f.status, f.source) for f in done] == [("downloaded", second)]
    assert file_sha256(tmp_path / "ist" / spec.name) == spec.sha256
    # every source wrong: refused, nothing written
    dest = tmp_path / "other"
    with pytest.raises(ChecksumError, match="must match its pinned sha256"):
        fetch_datasets(["ist"], dest, opener=FakeWeb({first: b"a", second: b"b"}))
    assert listing(dest) == []
    # no network at all: a clear error naming the fallback, nothing written
    with pytest.raises(FetchError, match="--from DIR"):
        fetch_datasets(["lalonde"], dest, opener=FakeWeb({}))
    assert listing(dest) == []


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("DPATE_DATA_DIR", str(tmp_path / "explicit"))
    assert data_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DPATE_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "dpate" / "data"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "dpate" / "data"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "dpate" / "data"


def test_fresh_clone_is_told_the_one_command(tmp_path):
    env = {"DPATE_DATA_DIR": str(tmp_path / "empty")}
    for args in (["data", "describe", "lalonde"], ["experiments", "--quick", "--no-figures"]):
        res = runner.invoke(
            app,
            [*args, *(["--out", str(tmp_path / "out")] if "experiments" in args else [])],
            env={"COLUMNS": "200", **env},
        )
        assert res.exit_code == 2, res.output
        text = " ".join(res.output.split())
        assert "run `dpate data fetch`" in text and "shared" not in text
