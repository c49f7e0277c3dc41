"""Write-once publication on the local filesystem (S3 specifics: tests/topology)."""

from __future__ import annotations

import pytest

from dpate.storage import PublicationConflictError, Store


def test_write_once_is_idempotent_for_identical_bytes_and_refuses_others(tmp_path):
    store = Store(str(tmp_path / "root"))
    key = Store.site_report_key("study", "site", "abc")
    assert not store.exists(key)
    assert store.publish(key, b'{"a":1}') == "written"
    assert store.exists(key)
    assert store.publish(key, b'{"a":1}') == "unchanged"
    with pytest.raises(PublicationConflictError, match="never replaced"):
        store.publish(key, b'{"a":2}')
    assert store.read(key) == b'{"a":1}'
    assert store.read("study/sites/site/none.json") is None
    # no temporary files are left behind, and listings are direct children only
    assert [p.name for p in (tmp_path / "root" / "study" / "sites" / "site").iterdir()] == [
        "abc.json"
    ]
    assert store.site_report_keys("study", "site") == ["study/sites/site/abc.json"]
    assert store.children("study/results") == []


def test_store_accepts_file_urls(tmp_path):
    store = Store(f"file://{tmp_path}/pub")
    assert store.publish("s/results/1.json", b"x") == "written"
    assert (tmp_path / "pub" / "s" / "results" / "1.json").read_bytes() == b"x"
    assert store.uri("s/results/1.json") == f"file://{tmp_path}/pub/s/results/1.json"


@pytest.mark.parametrize(
    "key",
    ["", "/abs/x.json", "s/../other/x.json", "s//x.json", "s/./x.json", "s/x\\y.json", "s/\x00"],
)
def test_store_keys_refuse_path_traversal(tmp_path, key):
    from dpate.storage import InvalidKeyError

    store = Store(str(tmp_path / "root"))
    for op in (
        lambda: store.publish(key, b"x"),
        lambda: store.read(key),
        lambda: store.exists(key),
    ):
        with pytest.raises(InvalidKeyError):
            op()
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*"))


@pytest.mark.parametrize("round_", ["../sites/other/x", "a/b", "..", "", ".hidden", "x" * 300])
def test_ids_that_name_objects_are_one_plain_segment(round_):
    from dpate.storage import InvalidKeyError

    with pytest.raises(InvalidKeyError, match="round"):
        Store.result_key("study", round_)
    with pytest.raises(InvalidKeyError, match="site id"):
        Store.site_report_key("study", round_, "rid")
    assert Store.result_key("study", "2026-q1") == "study/results/2026-q1.json"


def test_read_refuses_an_object_larger_than_asked_before_reading_it(tmp_path):
    from dpate.storage import ObjectTooLargeError

    store = Store(str(tmp_path / "root"))
    store.publish("s/sites/a/big.json", b"x" * 1000)
    assert store.read("s/sites/a/big.json", max_bytes=1000) == b"x" * 1000
    with pytest.raises(ObjectTooLargeError, match="1000 bytes, more than the 999"):
        store.read("s/sites/a/big.json", max_bytes=999)
    assert store.read("s/sites/a/none.json", max_bytes=10) is None


def test_storage_clients_connection_errors_are_transient():
    import aiohttp
    import botocore.exceptions as bx

    from dpate.ledger import LedgerError
    from dpate.storage import InvalidKeyError, PublicationConflictError
    from dpate.tasks.common import IO_RETRY_DELAYS, IO_TASK, is_transient

    transient = [
        bx.EndpointConnectionError(endpoint_url="http://127.0.0.1:8333"),
        bx.ConnectTimeoutError(endpoint_url="http://127.0.0.1:8333"),
        bx.ReadTimeoutError(endpoint_url="http://127.0.0.1:8333"),
        bx.ConnectionClosedError(endpoint_url="http://127.0.0.1:8333"),
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ServerDisconnectedError(),
        ConnectionResetError(),
        TimeoutError(),
    ]
    for exc in transient:
        assert is_transient(exc), type(exc).__name__
    # wrapped by another layer (s3fs/aiobotocore re-raise): still transient
    try:
        try:
            raise bx.EndpointConnectionError(endpoint_url="http://x")
        except Exception as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as outer:
        assert is_transient(outer)
    final = [
        bx.NoCredentialsError(),
        PublicationConflictError("x"),
        InvalidKeyError("x"),
        LedgerError("x"),
        FileNotFoundError("x"),
        PermissionError("x"),
        ValueError("x"),
    ]
    for exc in final:
        assert not is_transient(exc), type(exc).__name__
    # the I/O tasks' retries outlast a storage outage of about a minute
    assert IO_TASK["retries"] == len(IO_RETRY_DELAYS) and sum(IO_RETRY_DELAYS) > 60
