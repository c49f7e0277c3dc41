"""The object store as deployments/storage/ ships it holds: only the S3 port is reachable beyond
loopback, the filer refuses requests without SeaweedFS's own signed token, and no site identity can
write, overwrite or delete another site's objects, or create keys under another site's prefix
(SeaweedFS's ``*`` also matches ``/``: the grants name the study, so the nested key
``<study>/sites/<other>/sites/<me>/x`` is outside them)."""

from __future__ import annotations

import itertools
import json
import os
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from dpate.deployments.storage.config import build_s3_config, study_sites
from tests.topology.services import PUBLIC_HOST

pytestmark = pytest.mark.services

STUDY = "storage-test"  # conftest.STORAGE_TEST_STUDY: sites site-a .. site-d
REPO = Path(__file__).resolve().parents[2]


def _code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on (from /proc)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A = LISTEN
                continue
            hexaddr, hexport = cols[1].split(":")
            raw = bytes.fromhex(hexaddr)
            if width == 8:
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, words)
            out.append((addr, int(hexport, 16)))
    return out


def _host_addresses() -> set[str]:
    """The non-loopback IPv4 addresses of this machine (from /proc/net/fib_trie), if any."""
    addrs: set[str] = set()
    try:
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
    except OSError:
        return addrs
    for prev, line in itertools.pairwise(lines):
        if "/32 host LOCAL" in line:
            addr = prev.split()[-1]
            if not addr.startswith("127."):
                addrs.add(addr)
    return addrs


def _refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) != 0


def test_only_the_s3_port_is_published(seaweed):
    listening = _listening(seaweed.service.proc.pid)
    assert listening, "found no listening socket of weed"
    for addr, port in listening:  # master, volume, filer, admin, S3 and their gRPC ports
        assert addr == "127.0.0.1", (addr, port, listening)
    ports = {port for _, port in listening}
    assert {seaweed.ports[k] for k in ("s3", "master", "volume", "filer")} <= ports
    # nothing of weed answers on the published address or on the host's own addresses
    for host in (PUBLIC_HOST, *_host_addresses()):
        for port in sorted(ports):
            assert _refused(host, port), f"weed port {port} reachable on {host}"
    # the defaults the shipped options turn off are not listening anywhere
    for default in (8181, 9101, 7333):  # Iceberg REST, Lance, WebDAV
        assert default not in ports
    assert not _refused(PUBLIC_HOST, seaweed.ports["public"])


def _filer(seaweed, method: str, path: str, data: bytes | None = None) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{seaweed.ports['filer']}{path}", data=data, method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_filer_refuses_unsigned_requests_even_on_loopback(seaweed):
    """The filer's HTTP port knows no S3 identity: with security.toml's JWT keys a request
    without SeaweedFS's own signed token is refused, so it cannot bypass the S3 policies."""
    own = f"studies/{STUDY}/sites/site-a/filer-{uuid.uuid4().hex[:8]}.json"
    seaweed.client("site-a").put_object(Bucket=seaweed.bucket, Key=own, Body=b"{}")
    victim = f"/buckets/{seaweed.bucket}/{own}"
    assert _filer(seaweed, "PUT", victim, b'{"forged": 1}') == 401
    assert _filer(seaweed, "POST", victim, b'{"forged": 1}') == 401
    assert _filer(seaweed, "DELETE", victim) == 401
    assert _filer(seaweed, "GET", victim) == 401
    assert _filer(seaweed, "GET", f"/buckets/{seaweed.bucket}/") == 401
    new = f"/buckets/{seaweed.bucket}/studies/{STUDY}/sites/site-b/filer-new.json"
    assert _filer(seaweed, "PUT", new, b"{}") == 401
    body = seaweed.client("aggregator").get_object(Bucket=seaweed.bucket, Key=own)["Body"].read()
    assert body == b"{}"


def test_a_site_cannot_touch_another_sites_objects_or_prefix(seaweed):
    a, b = seaweed.client("site-a"), seaweed.client("site-b")
    tag = uuid.uuid4().hex[:8]
    theirs = f"studies/{STUDY}/sites/site-b/{tag}.json"
    b.put_object(Bucket=seaweed.bucket, Key=theirs, Body=b"b", IfNoneMatch="*")
    forbidden = [
        theirs,  # overwrite
        f"studies/{STUDY}/sites/site-b/{tag}-new.json",  # a new key in its folder
        f"studies/{STUDY}/sites/site-b/sites/site-a/{tag}.json",  # nested under its prefix
        f"studies/{STUDY}/sites/site-b/x/sites/site-a/{tag}.json",
        f"studies/{STUDY}/results/sites/site-a/{tag}.json",  # the results
        f"studies/{STUDY}/results/{tag}.json",
        f"studies/other-study/sites/site-a/{tag}.json",  # a study it is not in
        f"specs/{tag}.toml",  # the specs every site runs
        f"{tag}.json",
    ]
    for key in forbidden:
        with pytest.raises(ClientError) as e:
            a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"forged")
        assert _code(e.value) == "AccessDenied", key
    for op in (
        lambda: a.delete_object(Bucket=seaweed.bucket, Key=theirs),
        lambda: a.delete_objects(Bucket=seaweed.bucket, Delete={"Objects": [{"Key": theirs}]}),
        lambda: a.copy_object(
            Bucket=seaweed.bucket, Key=theirs, CopySource={"Bucket": seaweed.bucket, "Key": theirs}
        ),
        lambda: a.create_multipart_upload(Bucket=seaweed.bucket, Key=theirs),
        lambda: a.create_bucket(Bucket=f"dpate-{tag}"),
    ):
        try:
            res = op()
        except ClientError as exc:
            assert _code(exc) == "AccessDenied"
        else:  # DeleteObjects answers 200 and lists per-key errors
            assert res.get("Errors") and not res.get("Deleted"), res
    body = seaweed.client("aggregator").get_object(Bucket=seaweed.bucket, Key=theirs)["Body"]
    assert body.read() == b"b"
    listed = seaweed.client("aggregator").list_objects_v2(
        Bucket=seaweed.bucket, Prefix=f"studies/{STUDY}/sites/site-b/"
    )
    assert [o["Key"] for o in listed.get("Contents", []) if tag in o["Key"]] == [theirs]


def test_aggregator_setup_and_anonymous_are_confined(seaweed):
    tag = uuid.uuid4().hex[:8]
    g, setup = seaweed.client("aggregator"), seaweed.client("setup")
    for key in (
        f"studies/{STUDY}/sites/site-a/{tag}.json",
        f"studies/{STUDY}/sites/site-a/results/{tag}.json",  # `*/results/*` would allow this
        f"specs/{tag}.toml",
    ):
        with pytest.raises(ClientError) as e:
            g.put_object(Bucket=seaweed.bucket, Key=key, Body=b"forged")
        assert _code(e.value) == "AccessDenied", key
    setup.put_object(Bucket=seaweed.bucket, Key=f"specs/{tag}.toml", Body=b"spec")
    for key in (f"studies/{STUDY}/sites/site-a/{tag}.json", f"studies/{STUDY}/results/{tag}"):
        with pytest.raises(ClientError) as e:
            setup.put_object(Bucket=seaweed.bucket, Key=key, Body=b"forged")
        assert _code(e.value) == "AccessDenied", key
    with pytest.raises(ClientError) as e:
        setup.create_bucket(Bucket=f"dpate-{tag}")
    assert _code(e.value) == "AccessDenied"
    anon = urllib.request.Request(
        f"{seaweed.endpoint}/{seaweed.bucket}/specs/{tag}.toml", data=b"x", method="PUT"
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(anon, timeout=10)
    assert err.value.code == 403
    names = {
        i["name"] for i in json.loads((seaweed.root / "etc" / "s3.json").read_text())["identities"]
    }
    assert "admin" not in names
    for ident in seaweed.identities.values():
        assert not any(a.split(":")[0] == "Admin" for a in ident.actions), ident.name


def test_storage_config_grants_per_study_and_keeps_keys(tmp_path):
    """No server: dpate.deployments.storage.config from the shipped example spec."""
    study, sites = study_sites(REPO / "deployments" / "examples" / "star.toml")
    assert study == "star-small-classes" and sites == ["rural", "suburban", "inner-city", "urban"]
    cfg = build_s3_config({study: sites})
    acts = {i["name"]: i["actions"] for i in cfg["identities"]}
    assert acts["rural"] == [
        "Read:dpate/studies/star-small-classes/sites/rural/*",
        "Write:dpate/studies/star-small-classes/sites/rural/*",
        "Read:dpate/studies/star-small-classes/results/*",  # the heads it checks its ledger by
        "Read:dpate/specs/*",
        "List:dpate",
    ]
    for name, actions in acts.items():
        for act in actions:  # no wildcard before the last path segment
            assert "*" not in act.split(":", 1)[1].rstrip("*"), (name, act)
    again = build_s3_config({study: sites, "second": ["rural", "north"]}, existing=cfg)
    keys = {i["name"]: i["credentials"][0] for i in again["identities"]}
    for ident in cfg["identities"]:
        assert keys[ident["name"]] == ident["credentials"][0]  # nobody's key rotated
    assert "north" in keys
    with pytest.raises(ValueError, match="reserved"):
        build_s3_config({"s": ["aggregator"]})


def test_the_shipped_options_name_every_port_and_socket_the_tests_set():
    """The tests override only host-specific values the shipped file already names: a guide
    followed literally sets the same listeners (no server needed)."""
    from tests.topology.services import STORAGE_DIR

    shipped = {
        line.split("=", 1)[0].strip()
        for line in (STORAGE_DIR / "weed-mini.options").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }
    for key in ("master.port", "volume.port", "filer.port", "admin.port", "s3.port"):
        assert key in shipped, key
    for key in ("filer.localSocket", "s3.localSocket"):
        assert key in shipped, key
    text = (STORAGE_DIR / "weed-mini.options").read_text()
    assert "/tmp/" not in text
