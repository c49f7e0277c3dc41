"""Object storage as deployed: SeaweedFS's S3 gateway with one identity per site and one for the
aggregator (see tests/topology/services.py for the policies). Each site may write only under
``reports/<site>/``; the aggregator reads everything and writes only under ``results/``;
conditional writes make a publication write-once."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.services


def _code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


@pytest.fixture
def key_suffix() -> str:
    return uuid.uuid4().hex[:8]


def test_site_cannot_write_into_or_overwrite_another_sites_reports(seaweed, key_suffix):
    a, b = seaweed.client("site-a"), seaweed.client("site-b")
    own = f"reports/site-a/{key_suffix}/report.json"
    a.put_object(Bucket=seaweed.bucket, Key=own, Body=b'{"tau": 1}')

    for key in (own, f"reports/site-a/{key_suffix}/new.json"):
        with pytest.raises(ClientError) as e:
            b.put_object(Bucket=seaweed.bucket, Key=key, Body=b'{"tau": 666}')
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        b.delete_object(Bucket=seaweed.bucket, Key=own)
    assert _code(e.value) == "AccessDenied"
    # a look-alike prefix is not the site's own prefix
    with pytest.raises(ClientError) as e:
        a.put_object(Bucket=seaweed.bucket, Key=f"reports/site-a-x/{key_suffix}.json", Body=b"{}")
    assert _code(e.value) == "AccessDenied"
    # nor are the results, the bucket root, or another site's reading
    for key in (f"results/{key_suffix}.json", f"{key_suffix}.json"):
        with pytest.raises(ClientError) as e:
            a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"{}")
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        b.get_object(Bucket=seaweed.bucket, Key=own)
    assert _code(e.value) == "AccessDenied"

    body = seaweed.client("admin").get_object(Bucket=seaweed.bucket, Key=own)["Body"].read()
    assert body == b'{"tau": 1}'


def test_aggregator_reads_all_reports_and_writes_only_results(seaweed, key_suffix):
    a, g = seaweed.client("site-a"), seaweed.client("aggregator")
    key = f"reports/site-a/{key_suffix}/report.json"
    a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"{}")

    assert g.get_object(Bucket=seaweed.bucket, Key=key)["Body"].read() == b"{}"
    listed = g.list_objects_v2(Bucket=seaweed.bucket, Prefix="reports/")
    assert key in [o["Key"] for o in listed.get("Contents", [])]
    g.put_object(Bucket=seaweed.bucket, Key=f"results/{key_suffix}/result.json", Body=b"{}")

    for bad in (key, f"reports/site-b/{key_suffix}/forged.json"):
        with pytest.raises(ClientError) as e:
            g.put_object(Bucket=seaweed.bucket, Key=bad, Body=b'{"forged": true}')
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        g.delete_object(Bucket=seaweed.bucket, Key=key)
    assert _code(e.value) == "AccessDenied"


def test_conditional_put_is_write_once(seaweed, key_suffix):
    a = seaweed.client("site-a")
    key = f"reports/site-a/{key_suffix}/report.json"
    a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert _code(e.value) == "PreconditionFailed"
    assert a.get_object(Bucket=seaweed.bucket, Key=key)["Body"].read() == b"first"


def test_s3fs_exclusive_create_refuses_existing_object(seaweed, key_suffix):
    """s3fs sends If-None-Match: * for mode 'xb' and for pipe_file(mode='create'). SeaweedFS's
    PreconditionFailed carries no ``Condition`` field, so s3fs raises OSError(EINVAL), not
    FileExistsError: a publisher must treat both as "already there" and compare bytes."""
    fs = seaweed.filesystem("site-a")
    path = f"{seaweed.bucket}/reports/site-a/{key_suffix}/report.json"
    with fs.open(path, "xb") as f:
        f.write(b"first")

    def refused(exc: BaseException) -> bool:
        return isinstance(exc, FileExistsError) or (
            isinstance(exc, OSError) and exc.errno == errno.EINVAL
        )

    with pytest.raises(OSError) as e:
        with fs.open(path, "xb") as f:
            f.write(b"second")
    assert refused(e.value)
    with pytest.raises(OSError) as e:
        fs.pipe_file(path, b"third", mode="create")
    assert refused(e.value)
    assert fs.cat_file(path) == b"first"


def test_s3_urls_through_fsspec_with_per_process_environment(seaweed, key_suffix):
    """A site's process gets its credentials from AWS_* variables alone; ``s3://`` URLs then work
    with plain fsspec (what the flows use), and the site's identity is what the server enforces."""
    script = textwrap.dedent(
        """
        import sys, fsspec
        own, other = sys.argv[1], sys.argv[2]
        with fsspec.open(own, "wb") as f:
            f.write(b"report")
        with fsspec.open(own, "rb") as f:
            assert f.read() == b"report"
        try:
            with fsspec.open(other, "wb") as f:
                f.write(b"forged")
        except PermissionError:
            print("denied")
        """
    )
    own = f"s3://{seaweed.bucket}/reports/site-c/{key_suffix}/report.json"
    other = f"s3://{seaweed.bucket}/reports/site-d/{key_suffix}/report.json"
    env = {**os.environ, **seaweed.env_for("site-c")}
    res = subprocess.run(
        [sys.executable, "-c", script, own, other],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "denied"
    agg = seaweed.filesystem("aggregator")
    assert agg.cat_file(own.removeprefix("s3://")) == b"report"
    assert not agg.exists(other.removeprefix("s3://"))
