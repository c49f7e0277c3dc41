"""The paper's data sets: exact counts, public rescaling, strata; skipped without the data."""

from __future__ import annotations

import numpy as np
import pytest

from dpate.data.datasets import (
    DataUnavailableError,
    data_dir,
    load_dataset,
    load_ihdp,
    load_ist,
    load_lalonde,
    load_star,
)
from dpate_core.statistics import exact_matching

needs_data = pytest.mark.skipif(
    not (data_dir() / "ist" / "IST_corrected.csv").is_file(),
    reason=f"paper data sets not found in {data_dir()} (run `dpate data fetch`)",
)


def counts(d) -> tuple[int, int, int]:
    return d.n, d.n_treated, d.n_control


def check_common(d) -> None:
    assert d.w.dtype == np.int8 and d.y.dtype == np.float64 and d.x.dtype == np.int64
    assert d.y.min() >= 0.0 and d.y.max() <= d.bound == 1.0
    assert d.x.min() >= 0 and d.x.max() < d.domain_size


@needs_data
def test_ist():
    d = load_ist()
    check_common(d)
    assert counts(d) == (19_408, 9_705, 9_703)
    assert d.domain_size == 1 and set(np.unique(d.y)) == {0.0, 1.0}
    dim = d.y[d.w == 1].mean() - d.y[d.w == 0].mean()
    assert dim == pytest.approx(-0.00938, abs=5e-6)  # the trial's non-private difference


@needs_data
def test_star_and_its_four_urbanicity_sites():
    d = load_star()
    check_common(d)
    assert counts(d) == (10_329, 2_643, 7_686)
    assert d.site_names == ("rural", "suburban", "inner-city", "urban")
    assert [len(i) for i in d.site_indices()] == [4_294, 2_721, 2_426, 888]
    assert d.clipped == 0
    # the declared scale: Y = (score - 200) / 600, so the raw difference in means is +0.95 points
    dim = (d.y[d.w == 1].mean() - d.y[d.w == 0].mean()) * 600
    assert dim == pytest.approx(0.95, abs=0.005)


@needs_data
def test_ihdp_replication_1_has_full_overlap_on_16_strata():
    d = load_ihdp()
    check_common(d)
    assert counts(d) == (747, 139, 608)
    assert d.domain_size == 16 and d.clipped == 0
    t = np.bincount(d.x[d.w == 1], minlength=16)
    c = np.bincount(d.x[d.w == 0], minlength=16)
    assert (t > 0).all() and (c > 0).all()
    # the public rescaling is affine: y_factual = 20 y - 5 (rep 1 spans -1.544 .. 11.268)
    assert (20 * d.y - 5).min() == pytest.approx(-1.544, abs=1e-3)
    assert (20 * d.y - 5).max() == pytest.approx(11.268, abs=1e-3)


@needs_data
def test_ihdp_replications_share_treatment_and_clip_heavy_tails():
    one, nine = load_ihdp(1), load_dataset("ihdp", replication=9)
    np.testing.assert_array_equal(one.w, nine.w)
    np.testing.assert_array_equal(one.x, nine.x)
    assert nine.clipped > 0 and nine.y.max() == 1.0
    with pytest.raises(ValueError, match=r"1\.\.10"):
        load_ihdp(11)


@needs_data
def test_lalonde_age_strata_and_earnings_cap():
    d = load_lalonde()
    check_common(d)
    assert counts(d) == (722, 297, 425)
    assert d.domain_size == 39 and d.clipped == 1  # one re78 above US$50,000
    t = np.bincount(d.x[d.w == 1], minlength=39)
    c = np.bincount(d.x[d.w == 0], minlength=39)
    one_arm = (t > 0) != (c > 0)
    assert one_arm.sum() == 9 and (t + c)[one_arm].sum() == 23  # docs/how-to/data.md
    # unmatched strata contribute 0 to Algorithm 1's estimate: removing them and rescaling by N
    res = exact_matching(d.w, d.y, d.x)
    keep = ~one_arm[d.x]
    sub = exact_matching(d.w[keep], d.y[keep], d.x[keep])
    assert res.tau == pytest.approx(sub.tau * keep.sum() / d.n)


def test_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DPATE_DATA_DIR", str(tmp_path))
    with pytest.raises(DataUnavailableError, match="DPATE_DATA_DIR") as err:
        load_ist()
    assert "run `dpate data fetch`" in str(err.value) and "shared" not in str(err.value)
    with pytest.raises(ValueError, match="not one of"):
        load_dataset("mnist")


def test_synth_through_load_dataset():
    d = load_dataset("synth", n=1000, domain_size=10, seed=3)
    check_common(d)
    assert d.n == 1000 and d.domain_size == 10
