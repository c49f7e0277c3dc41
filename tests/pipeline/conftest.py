"""Fixtures of the pipeline tests: ledgers on SQLite and PostgreSQL (the Prefect server their flows
use: ``prefect_harness`` in tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=test", connect_timeout=3
        ):
            return None
    except Exception as exc:  # the reason is shown in the skip message
        return f"PostgreSQL at 127.0.0.1:5432/test is unreachable ({type(exc).__name__}: {exc})"


@pytest.fixture(scope="session")
def pg_url() -> str:
    why = _pg_reachable()
    if why:
        pytest.skip(why)
    return PG_URL


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger_factory(request, tmp_path):
    """Opens ledgers on one backend; PostgreSQL tables get a unique prefix and are dropped after."""
    from dpate.ledger import PrivacyLedger

    opened: list[PrivacyLedger] = []
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        prefix = "dpate_"
    else:
        url = request.getfixturevalue("pg_url")
        prefix = f"t{uuid.uuid4().hex[:10]}_"

    def make() -> PrivacyLedger:
        led = PrivacyLedger(url, table_prefix=prefix, create=True)
        opened.append(led)
        return led

    make.url = url  # type: ignore[attr-defined]
    make.prefix = prefix  # type: ignore[attr-defined]
    yield make
    if request.param == "postgres" and opened:
        opened[0].table.drop(opened[0]._engine, checkfirst=True)
    for led in opened:
        led.close()


@pytest.fixture(scope="session", autouse=True)
def dpate_home(tmp_path_factory) -> Iterator[None]:
    """Default ledgers and operator logs under a temporary DPATE_HOME, never the user's; and no
    site configuration inherited from the environment running the tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPATE_HOME", str(tmp_path_factory.mktemp("dpate-home")))
        for name in (
            "DPATE_LEDGER_URL",
            "DPATE_DATA_PATH",
            "DPATE_STORAGE_URL",
            "DPATE_SITE_LOG",
            "DPATE_SITE_CONFIG",
            "DPATE_ALLOW_SPEC_DATA",
            "DPATE_SITES",
        ):
            mp.delenv(name, raising=False)
        yield
