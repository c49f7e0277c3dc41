"""The bands of a released propensity model, as the covariate-balance table reads them
(:func:`dpate_core.mechanisms.propensity.balance_bands`): from the noisy model vector a release
keeps (:class:`DrawnRelease`, a DP output) and the estimate's public fields only, the
band of every stratum, or of every record when numeric covariates with bounds and no bins enter
the model, is the band the release itself put it in (its second stage's cell counts, from the
compiled pass over records or the sums over strata)."""

from __future__ import annotations

import numpy as np
import pytest

from dpate_core.mechanisms import BandInputs, PlanInputs, StatisticsInputs
from dpate_core.mechanisms.propensity import PROPENSITY, balance_bands
from dpate_core.privacy import PrivacyParams
from dpate_core.release import draw_once
from dpate_core.statistics import cell_statistics

SIZES = (4, 3)


def _records(seed: int, n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    z1, z2, age = rng.integers(0, 4, n), rng.integers(0, 3, n), rng.uniform(10, 90, n)
    p = 1 / (1 + np.exp(-(-1 + 0.5 * z1 - 0.4 * z2 + 0.03 * (age - 50))))
    w = (rng.uniform(size=n) < p).astype(np.int8)
    y = np.clip(0.3 + 0.05 * z1 + 0.002 * age + 0.1 * w + rng.normal(0, 0.1, n), 0, 1)
    return w, y, z1 * 3 + z2, age


def _inputs(w, y, x, age) -> PlanInputs:
    return PlanInputs(
        w, y, x, 12, 1.0, PrivacyParams.of(1, 0), None, PROPENSITY.make_options({"bands": 5}),
        covariate_sizes=SIZES, covariate_values=None if age is None else age[:, None],
        covariate_bounds=() if age is None else ((0.0, 100.0),),
    )  # fmt: skip


def _stage_counts(plan, model) -> np.ndarray:
    """The band cells' counts the release noises: its two-end histogram's two ends' sum."""
    h = plan.stages[0].locs({"model": np.asarray(model)})["histogram"].astype(np.int64)
    site = plan.stages[0].sites[0]
    total = h[: h.size // 2] + h[h.size // 2 :]  # each record's mass is 1 / unit grid units
    return total // np.int64(round(1.0 / site.unit))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_record_bands_are_the_bands_the_release_counted(seed: int) -> None:
    w, y, x, age = _records(seed, 3000)
    inputs = _inputs(w, y, x, age)
    plan = PROPENSITY.plan(inputs)  # the compiled pass over records
    drawn = plan.drawn(draw_once(plan, np.random.default_rng(seed)))
    record = {"estimate": drawn.estimate.public_fields(), "released": dict(drawn.kept)}
    assert set(drawn.kept) == {"model"} and "released" not in record["estimate"]
    options = inputs.options
    banded = balance_bands(record, options, BandInputs(SIZES, x, age[:, None], ((0.0, 100.0),)))
    assert banded is not None
    bands, k = banded
    assert k == 5 and bands.shape == (3000,) and len(np.unique(bands)) >= 2
    counted = np.bincount(2 * bands + w, minlength=2 * k)
    assert np.array_equal(counted, _stage_counts(plan, drawn.kept["model"]))


def test_strata_bands_are_the_bands_the_release_counted() -> None:
    w, y, x, _ = _records(4, 2000)
    inputs = _inputs(w, y, x, None)
    cells = cell_statistics(w, y, x, domain_size=12, bound=1.0)
    stats = StatisticsInputs(
        cells, None, 12, 1.0, PrivacyParams.of(1, 0), None, inputs.options, covariate_sizes=SIZES
    )
    assert PROPENSITY.plan_from_statistics is not None
    plan = PROPENSITY.plan_from_statistics(stats)
    drawn = plan.drawn(draw_once(plan, np.random.default_rng(5)))
    record = {"estimate": drawn.estimate.public_fields(), "released": dict(drawn.kept)}
    banded = balance_bands(record, inputs.options, BandInputs(SIZES))
    assert banded is not None
    of_stratum, k = banded
    assert of_stratum.shape == (12,)
    counted = np.bincount(2 * of_stratum[x] + w, minlength=2 * k)
    assert np.array_equal(counted, _stage_counts(plan, drawn.kept["model"]))
    # the same bands from the records' strata
    again = balance_bands(record, inputs.options, BandInputs(SIZES, x))
    assert again is not None and np.array_equal(again[0], of_stratum[x])


def test_no_recorded_model_no_bands() -> None:
    fields = {"n": 10, "epsilon": "1", "budget_split": ["1/4", "27/40", "3/40"]}
    assert balance_bands({"estimate": fields}, None, BandInputs(SIZES)) is None
    assert balance_bands({"estimate": fields, "released": {}}, None, BandInputs(SIZES)) is None
