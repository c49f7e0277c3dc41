"""Write-once publication on the local filesystem (S3 specifics: tests/topology)."""

from __future__ import annotations

import pytest

from tasks.storage import PublicationConflictError, Store


def test_write_once_is_idempotent_for_identical_bytes_and_refuses_others(tmp_path):
    store = Store(str(tmp_path / "root"))
    key = Store.site_report_key("study", "site", "abc")
    assert store.publish(key, b'{"a":1}') == "written"
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
