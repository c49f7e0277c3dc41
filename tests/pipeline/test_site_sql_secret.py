"""A site release computed in PostgreSQL with the password in a Prefect Secret block, configured
in the site config file (``data``, ``data_query``, ``data_secret``): the release runs through the
site flow on the session's Prefect harness, and the block's value appears nowhere (operator log,
Prefect logs, run parameters and states, the published report)."""

from __future__ import annotations

import json
import uuid

import pyarrow.parquet as pq
import pytest

from tests.pipeline.studies import Site, write_study

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.postgres,
    pytest.mark.usefixtures("prefect_harness", "api_logs"),
]

PG = "host=127.0.0.1 port=5432 user=postgres dbname=test"
SECRET_VALUE = "hunter2-block-value-5521"


def _paged(read, page=200):
    out, offset = [], 0
    while True:
        got = read(limit=page, offset=offset)
        out += got
        if len(got) < page:
            return out
        offset += page


@pytest.fixture
def pg_records(tmp_path, pg_url):
    """A 1200-record adjusted study whose site's records are a PostgreSQL table."""
    import psycopg

    st = write_study(tmp_path / "sql", [Site("solo", 1200)])
    text = st.spec.read_text(encoding="utf-8")
    st.spec.write_text(
        text.replace('estimator = "smooth_matching"', 'estimator = "adjusted"'), encoding="utf-8"
    )
    table = pq.read_table(st.root / "sites" / "solo" / "records.parquet")
    schema = f"dpate_secret_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.records (id int PRIMARY KEY, treated smallint, "
            "outcome double precision, stratum text)"
        )
        cols = table.to_pydict()
        with conn.cursor().copy(f"COPY {schema}.records FROM STDIN") as copy:
            for i, row in enumerate(
                zip(cols["treated"], cols["outcome"], cols["stratum"], strict=True)
            ):
                copy.write_row([i, *row])
    try:
        yield st, schema
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_release_from_postgres_with_a_secret_block(pg_records, tmp_path, monkeypatch):
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker

    from dpate.flows.site_release import site_release
    from dpate.schemas.site_data import site_statistics

    st, schema = pg_records
    block = f"site-db-{uuid.uuid4().hex[:8]}"
    Secret(value=SECRET_VALUE).save(block)
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        'data = "postgresql+psycopg://postgres@127.0.0.1:5432/test"\n'
        f'data_query = "SELECT treated, outcome, stratum FROM {schema}.records ORDER BY id"\n'
        f'data_secret = "{block}"\n',
        encoding="utf-8",
    )
    for k, v in st.site_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("DPATE_SITE_CONFIG", str(cfg))
    for name in ("DPATE_DATA_QUERY", "DPATE_DATA_SECRET", "DPATE_DATA_PATH"):
        monkeypatch.delenv(name, raising=False)
    st.init_ledgers()

    seen = []
    import dpate.schemas.site_data._engine as engine

    real = engine.secret_value
    monkeypatch.setattr(engine, "secret_value", lambda name: seen.append(name) or real(name))
    out = site_release(spec=str(st.spec), site="solo")
    assert out["status"] == "written" and out["estimator"] == "adjusted"
    assert block in seen  # the block was loaded at the site (trust auth ignores the password)
    want = site_statistics(st.root / "sites" / "solo" / "records.parquet", _spec(st))
    assert out["n"] == want.n == 1200

    texts = [b.decode() for b in st.snapshot().values()]
    texts.append(st.operator_log("solo").read_text())
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        texts += [log.message for log in _paged(client.read_logs)]
        for fr in _paged(client.read_flow_runs):
            texts.append(
                json.dumps(fr.parameters, default=str) + str(fr.state and fr.state.message)
            )
        for tr in _paged(client.read_task_runs):
            texts.append(str(tr.state and tr.state.message) + str(tr.name))
    blob = "\n".join(texts)
    assert "data validated against spec" in blob  # the run's logs were read
    assert SECRET_VALUE not in blob and "hunter2" not in blob


def _spec(st):
    from dpate.schemas.spec import load_spec

    return load_spec(str(st.spec))
