"""Object storage as deployed: SeaweedFS's S3 gateway with one identity per site and one for the
aggregator (deployments/storage/config.py for the policies), the layout of dpate/storage.py under
``s3://dpate/studies``: each site may write only ``<study>/sites/<site>/``; the aggregator reads
everything and writes only ``<study>/results/``; conditional writes make a publication write-once.
Identities are granted per study, so every test here works in the study ``storage-test`` and
keeps its objects apart with a fresh leaf name."""

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


STUDY = "storage-test"  # tests/topology/conftest.py: STORAGE_TEST_STUDY


@pytest.fixture
def key_suffix() -> str:
    """A fresh leaf name, so tests never see each other's objects."""
    return f"t-{uuid.uuid4().hex[:8]}"


def report_key(suffix: str, site: str, leaf: str = "report.json") -> str:
    return f"studies/{STUDY}/sites/{site}/{suffix}-{leaf}"


def result_key(suffix: str, leaf: str = "1.json") -> str:
    return f"studies/{STUDY}/results/{suffix}-{leaf}"


def test_seaweed_s3_answers_with_bucket(seaweed):
    seaweed.client("aggregator").head_bucket(Bucket=seaweed.bucket)  # made by weed mini -bucket


def test_site_cannot_write_into_or_overwrite_another_sites_reports(seaweed, key_suffix):
    a, b = seaweed.client("site-a"), seaweed.client("site-b")
    own = report_key(key_suffix, "site-a")
    a.put_object(Bucket=seaweed.bucket, Key=own, Body=b'{"tau": 1}')

    for key in (own, report_key(key_suffix, "site-a", "new.json")):
        with pytest.raises(ClientError) as e:
            b.put_object(Bucket=seaweed.bucket, Key=key, Body=b'{"tau": 666}')
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        b.delete_object(Bucket=seaweed.bucket, Key=own)
    assert _code(e.value) == "AccessDenied"
    # a look-alike folder is not the site's own folder
    with pytest.raises(ClientError) as e:
        a.put_object(Bucket=seaweed.bucket, Key=report_key(key_suffix, "site-a-x"), Body=b"{}")
    assert _code(e.value) == "AccessDenied"
    # nor are the results, the bucket root, or reading another site's folder
    for key in (result_key(key_suffix), f"{key_suffix}.json", f"studies/{STUDY}/{key_suffix}.json"):
        with pytest.raises(ClientError) as e:
            a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"{}")
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        b.get_object(Bucket=seaweed.bucket, Key=own)
    assert _code(e.value) == "AccessDenied"

    body = seaweed.client("aggregator").get_object(Bucket=seaweed.bucket, Key=own)["Body"].read()
    assert body == b'{"tau": 1}'


def test_aggregator_reads_all_reports_and_writes_only_results(seaweed, key_suffix):
    a, g = seaweed.client("site-a"), seaweed.client("aggregator")
    key = report_key(key_suffix, "site-a")
    a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"{}")

    assert g.get_object(Bucket=seaweed.bucket, Key=key)["Body"].read() == b"{}"
    listed = g.list_objects_v2(Bucket=seaweed.bucket, Prefix=f"studies/{STUDY}/")
    assert key in [o["Key"] for o in listed.get("Contents", [])]
    g.put_object(Bucket=seaweed.bucket, Key=result_key(key_suffix), Body=b"{}")

    for bad in (key, report_key(key_suffix, "site-b", "forged.json")):
        with pytest.raises(ClientError) as e:
            g.put_object(Bucket=seaweed.bucket, Key=bad, Body=b'{"forged": true}')
        assert _code(e.value) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        g.delete_object(Bucket=seaweed.bucket, Key=key)
    assert _code(e.value) == "AccessDenied"


def test_conditional_put_is_write_once(seaweed, key_suffix):
    a = seaweed.client("site-a")
    key = report_key(key_suffix, "site-a")
    a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        a.put_object(Bucket=seaweed.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert _code(e.value) == "PreconditionFailed"
    assert a.get_object(Bucket=seaweed.bucket, Key=key)["Body"].read() == b"first"


def test_s3fs_exclusive_create_refuses_existing_object(seaweed, key_suffix):
    """s3fs sends If-None-Match: * for mode 'xb' and for pipe_file(mode='create'). SeaweedFS's
    PreconditionFailed carries no ``Condition`` field, so s3fs raises OSError(EINVAL) whose text
    is "At least one of the pre-conditions you specified did not hold", not FileExistsError: a
    publisher must treat both as "already there" and compare bytes."""
    fs = seaweed.filesystem("site-a")
    path = f"{seaweed.bucket}/{report_key(key_suffix, 'site-a')}"
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
    own = f"s3://{seaweed.bucket}/{report_key(key_suffix, 'site-c')}"
    other = f"s3://{seaweed.bucket}/{report_key(key_suffix, 'site-d')}"
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


def test_pipeline_write_once_on_seaweedfs(seaweed, key_suffix):
    """dpate/storage.py's Store on s3://: first publication written, the same bytes again
    "unchanged", different bytes refused, another site's folder denied."""
    storage = pytest.importorskip("dpate.storage")
    env = seaweed.env_for("site-a")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        import fsspec

        fsspec.filesystem("s3").clear_instance_cache()
        store = storage.Store(seaweed.storage_url)
        key = storage.Store.site_report_key(STUDY, "site-a", f"rid-{key_suffix}")
        assert store.publish(key, b"first") == "written"
        assert store.publish(key, b"first") == "unchanged"
        with pytest.raises(storage.PublicationConflictError):
            store.publish(key, b"second")
        assert store.read(key) == b"first"
        with pytest.raises(PermissionError):
            store.publish(storage.Store.site_report_key(STUDY, "site-b", f"rid-{key_suffix}"), b"x")
        fsspec.filesystem("s3").clear_instance_cache()


_OUTAGE_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from prefect import flow, task
    from dpate.tasks.common import IO_TASK
    from dpate.storage import Store

    @task(name="publish-through-outage", **IO_TASK)
    def publish(url, key, data):
        return Store(url).publish(key, data)

    @flow
    def outage(url, key, go):
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.2)
        t0 = time.monotonic()
        status = publish(url, key, b"published-after-the-outage")
        print(status, round(time.monotonic() - t0), flush=True)

    outage(sys.argv[1], sys.argv[2], sys.argv[3])
    """
)


def test_publication_outlasts_a_storage_outage_longer_than_the_clients_retries(
    seaweed, key_suffix, tmp_path, prefect_test_server
):
    """SeaweedFS stopped for ~20 s while a site publishes: botocore's EndpointConnectionError is
    transient (dpate.tasks.common.is_transient) and the I/O task's retries (2+5+10+20+30 s) outlast
    the outage, so the publication succeeds once the store is back."""
    import time

    storage = pytest.importorskip("dpate.storage")
    key = storage.Store.site_report_key(STUDY, "site-a", f"rid-{key_suffix}")
    go = tmp_path / "go"
    env = {
        **os.environ,
        **seaweed.env_for("site-a"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        **prefect_test_server.env,  # the session's server, not an embedded one of its own
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _OUTAGE_SCRIPT, seaweed.storage_url, key, str(go)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        seaweed.stop()
        try:
            go.touch()
            time.sleep(20)  # longer than s3fs's and botocore's own retries
            assert proc.poll() is None, "the publication gave up during the outage"
        finally:
            seaweed.start()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    status, seconds = out.split()
    assert status == "written" and int(seconds) >= 20
    assert "Retry 1/5 will start" in err, err[-2000:]  # our retries, not only the client's
    body = seaweed.client("aggregator").get_object(Bucket=seaweed.bucket, Key=f"studies/{key}")
    body = body["Body"]
    assert body.read() == b"published-after-the-outage"
