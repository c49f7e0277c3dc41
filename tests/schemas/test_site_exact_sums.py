"""The engine's cell statistics are the core kernel's, integer for integer, on values chosen to
break a careless SQL translation: ties at rounding (half to even, not away from zero), outcomes at
and beyond the bounds (clipped), an offset, a bound that is not a power of two, and squares that
land exactly on a half. DuckDB here (in memory and from Parquet), PostgreSQL below (marked);
Spark in tests/tasks/test_site_spark.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpate.schemas.site_data import site_statistics
from dpate_core.statistics import cell_statistics, grid_bits

from .test_site_data import make_spec

N = 40_000  # N in (2^15, 2^16]: grids below the 40-bit cap with m odd (squares can tie)


def adversarial(bound: float, offset: float, centred: bool, seed: int = 3) -> pd.DataFrame:
    """``N`` records whose outcomes (before the offset) sit on the ties of the grid, at and beyond
    the bounds, and elsewhere at random."""
    rng = np.random.default_rng(seed)
    k, m = grid_bits(N, centred=centred)
    assert (k, m) == ((37, 38) if centred else (37, 37))  # centred: the two-end histogram's 2^53
    t = rng.random(N)
    quarter = N // 4
    # t 2^k exactly halfway between two integers, both parities
    j = rng.integers(0, 2**k, quarter)
    t[:quarter] = (2 * j + 1) / 2.0 ** (k + 1)
    # (t - c)^2 2^m exactly a half (c = 1/2 centred, 0 not): t - c = +-2^-((m + 1) / 2)
    c = 0.5 if centred else 0.0
    a = (m + 1) / 2
    if a == int(a):
        t[quarter : quarter + 100] = c + 2.0**-a
        if centred:
            t[quarter + 100 : quarter + 200] = c - 2.0**-a
    y = t * bound + offset
    # the bounds, and beyond them (clipped)
    y[quarter + 200 : quarter + 300] = offset
    y[quarter + 300 : quarter + 400] = offset + bound
    y[quarter + 400 : quarter + 500] = offset + bound * (1 + rng.random(100))
    y[quarter + 500 : quarter + 600] = offset - bound * rng.random(100)
    y[quarter + 600 : quarter + 700] = np.nextafter(offset + bound, math.inf)
    y[quarter + 700 : quarter + 800] = np.nextafter(offset, -math.inf)
    return pd.DataFrame(
        {
            "w": rng.integers(0, 2, N),
            "y": y,
            "sex": rng.choice(["f", "m"], N),
            "age": rng.uniform(0, 100, N),
        }
    )


def core_cells(frame: pd.DataFrame, bound: float, offset: float, centred: bool):
    """The core's kernel on the records as the release validates them (clip policy)."""
    y = np.minimum(np.maximum(frame["y"].to_numpy() - offset, 0.0), bound)
    sex = (frame["sex"] == "m").to_numpy().astype(np.int64)
    x = sex * 3 + np.digitize(frame["age"].to_numpy(), [40, 65])
    return cell_statistics(frame["w"].to_numpy(), y, x, domain_size=6, bound=bound, centred=centred)


CASES = [
    (1.0, 0.0),  # ties exact in t = y / B
    (2.0**-3, 5.0),  # a power of two with an offset
    (1.0 / 3.0, -1.25),  # not a power of two: y / B rounds
    (1e6, 40.0),
    (0.1, 0.0),
]


def assert_engine_equals_core(source, frame, bound, offset, estimator, **kw) -> None:
    centred = estimator != "dim"
    spec = make_spec(
        estimator=estimator,
        outcome={"column": "y", "bound": bound, "offset": offset, "policy": "clip"},
        **kw,
    )
    got = site_statistics(source, spec, matching=False).cells
    want = core_cells(frame, bound, offset, centred)
    assert (got.k, got.m, got.centred) == (want.k, want.m, want.centred)
    for name in ("counts", "sums", "squares"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


@pytest.mark.parametrize(("bound", "offset"), CASES)
@pytest.mark.parametrize("estimator", ["adjusted", "dim"])
def test_engine_sums_equal_the_core_kernel_on_adversarial_values(
    tmp_path, bound, offset, estimator
):
    frame = adversarial(bound, offset, estimator != "dim")
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    kw = {}
    if estimator == "dim":  # a trial with public arm sizes: two budget parts
        sites = make_spec().model_dump(mode="json")["sites"]
        sites[1]["budget_split"] = ["1/2", "1/2"]
        kw = {"design": "randomized", "arm_sizes_public": True, "sites": sites}
    assert_engine_equals_core(path, frame, bound, offset, estimator, **kw)


def test_round_half_away_from_zero_would_fail():
    """The ties above are real: rounding them away from zero changes the sums."""
    frame = adversarial(1.0, 0.0, True)
    k, _ = grid_bits(N)
    v = frame["y"].to_numpy()[: N // 4] * 2.0**k
    assert np.all(v - np.floor(v) == 0.5)
    assert np.any(np.rint(v) != np.floor(v + 0.5))


@pytest.mark.postgres
@pytest.mark.parametrize(("bound", "offset"), [CASES[0], CASES[2]])
def test_postgres_sums_equal_the_core_kernel_on_adversarial_values(bound, offset):
    import uuid

    psycopg = pytest.importorskip("psycopg")
    pg = "host=127.0.0.1 port=5432 user=postgres dbname=test"
    try:
        with psycopg.connect(pg, connect_timeout=3):
            pass
    except Exception as exc:
        pytest.skip(f"PostgreSQL unreachable ({type(exc).__name__})")
    frame = adversarial(bound, offset, True)
    table = f"dpate_exact_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int, w int, y float8, sex text, age float8)")
        with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
            for i, row in enumerate(frame.itertuples(index=False)):
                copy.write_row([i, *row])
    try:
        spec = make_spec(
            estimator="adjusted",
            outcome={"column": "y", "bound": bound, "offset": offset, "policy": "clip"},
        )
        got = site_statistics(
            "postgresql+psycopg://postgres@127.0.0.1:5432/test",
            spec,
            query=f"SELECT * FROM {table} ORDER BY id",
            matching=False,
        ).cells
        want = core_cells(frame, bound, offset, True)
        for name in ("counts", "sums", "squares"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
