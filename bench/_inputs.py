"""Inputs shared by the benchmark scripts: a synthetic site's arrays (``bench_core.py``,
``bench_adjusted.py``) and the one-site study spec of the file benchmarks (``bench_sources.py``,
``bench_validation.py``). Nothing heavy is imported at the top: ``bench_sources.py`` measures
its children's imports."""

from __future__ import annotations

from typing import Any

#: the text levels of the benchmarks' categorical covariate ``region``
LEVELS = ["north", "south", "east", "west", "centre"]


def site_data(n: int, strata: int, seed: int = 0):
    """A site: w int8 (40% treated), y float64 in [0, 1], x int64 stratum ids."""
    import numpy as np  # here, not at the top: bench_sources.py times its children's imports

    rng = np.random.default_rng(seed)
    x = rng.integers(0, strata, n, dtype=np.int64)
    w = (rng.random(n) < 0.4).astype(np.int8)
    y = rng.random(n)
    return w, y, x


def bench_spec(estimator: str, delta: str) -> Any:
    """The one-site spec of the file benchmarks: treatment ``w``, outcome ``y`` (bound 1, clipped),
    covariates ``region`` (:data:`LEVELS`), ``age`` and ``bmi`` cut at public edges. ``dim`` gets
    the randomized design with public arm sizes it requires."""
    from dpate.schemas.spec import StudySpec

    trial = {"design": "randomized", "arm_sizes_public": True} if estimator == "dim" else {}
    return StudySpec.from_dict(
        {
            "study_id": "bench",
            "design": "observational",
            **trial,
            "estimator": estimator,
            "reports": "file:///tmp/reports",
            "treatment": {"column": "w"},
            "outcome": {"column": "y", "bound": 1.0, "policy": "clip"},
            "covariates": [
                {"kind": "categorical", "column": "region", "levels": LEVELS},
                {"kind": "numeric", "column": "age", "edges": [0, 18, 30, 45, 60, 75, "inf"]},
                {"kind": "numeric", "column": "bmi", "edges": ["-inf", 18.5, 25, 30, "inf"]},
            ],
            "sites": [
                {
                    "id": "a",
                    "data": "a.parquet",
                    "epsilon": "1",
                    "delta": delta,
                    "lifetime_cap": {"epsilon": "1", "delta": delta},
                }
            ],
        }
    )
