"""The fixtures start real servers: each answers on loopback and reports its database."""

from __future__ import annotations

import json
import urllib.request

import pytest

pytestmark = pytest.mark.services


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_prefect_server_on_sqlite_answers(prefect_server):
    assert _get(f"{prefect_server.api_url}/health") is True
    assert prefect_server.database_url is None
    assert (prefect_server.home / "prefect.db").exists()


def test_prefect_server_on_postgresql_answers(prefect_server_pg):
    import psycopg

    assert _get(f"{prefect_server_pg.api_url}/health") is True
    db = prefect_server_pg.database_url.rsplit("/", 1)[1]
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{db}") as conn:
        tables = {r[0] for r in conn.execute("select tablename from pg_tables")}
    assert "flow_run" in tables  # Prefect migrated its schema into the scratch database


def test_seaweed_s3_answers_with_bucket(seaweed):
    seaweed.client("aggregator").head_bucket(Bucket=seaweed.bucket)  # made by weed mini -bucket
