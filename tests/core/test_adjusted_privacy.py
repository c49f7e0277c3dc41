"""Empirical privacy of the adjusted release on worst-case neighbours, with the checker of
``test_release_privacy.py`` (histogram ratio test with Clopper-Pearson bounds; see there).

Each released output is a post-processing of the two noisy vectors (the cells' two-end histogram,
whose counts and centred sums are post-processing, and the squares), so its probability ratio is
bounded by ``e^eps`` of the budget parts it reads: ``tau``, ``noise_variance`` and ``usable_*``
read the histogram, the variances both. A deliberately broken variant (the histogram's Laplace at
half its scale) must be rejected.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpate_core.mechanisms.adjusted import plan_adjusted
from dpate_core.privacy import PrivacyParams
from tests.core.test_release_privacy import (
    _assert_private,
    _check_outputs,
    _expect_violation,
    _half_scale,
    _parts,
    _run,
    _statistic,
    check_privacy,
)

B = 1.0
EPS = "1"
TOTAL = PrivacyParams.of(EPS)

ADJUSTED_OUTPUTS = {
    "tau": (0,),
    "variance": (0, 1),
    "raw_variance": (0, 1),
    "sampling_variance_dp": (0, 1),
    "noise_variance": (0,),
    "usable_weight": (0,),
}
# a few values only: judged on its own histogram (the unestimated variance is 0 whenever every
# stratum is used, as on these pairs; resolved reads the counts, the histogram's)
DISCRETE_OUTPUTS = {"usable_strata": (0,), "unestimated_variance": (0,), "resolved": (0,)}
# fixed effects: tau and the variances read the same parts; whether the estimate is resolved (the
# usable_* and unestimated_variance outputs) reads the counts (the histogram) and takes two values
FE_OUTPUTS = {
    k: v for k, v in ADJUSTED_OUTPUTS.items() if k not in ("unestimated_variance", "usable_weight")
}
FE_DISCRETE = {
    "usable_strata": (0,),
    "usable_weight": (0,),
    "unestimated_variance": (0,),
    "resolved": (0,),
}


def _arrays(rows):
    w, y, x = zip(*rows, strict=True)
    return np.array(w, np.int64), np.array(y, float), np.array(x, np.int64)


def _pair(rows, index, new_row):
    changed = list(rows)
    changed[index] = new_row
    return _arrays(rows), _arrays(changed)


def _balanced(n_per_arm: int, strata: int):
    # centred outcomes that sum to about 0 in every cell: Y alternates 0 and B
    return [
        (arm, B * (j % 2), s) for s in range(strata) for arm in (0, 1) for j in range(n_per_arm)
    ]


PAIRS = {
    # a record keeps its cell, its outcome goes 0 -> B: its mass moves from the cell's lower end
    # to its upper (the histogram by its full sensitivity, 2), the squares not
    "outcome_in_cell": _pair(_balanced(200, 1), 200, (1, B, 0)),
    # a treated Y = B record of stratum 0 becomes a control Y = 0 of stratum 1: both vectors
    # move by their full sensitivity
    "cell_move_extreme": _pair(_balanced(30, 2), 31, (0, 0.0, 1)),
    # a Y = B/2 record changes arm: half its mass leaves each end of one cell for the other's
    # (the histogram by 2), its centred square is 0
    "cell_move_counts": _pair([*_balanced(30, 2), (1, B / 2, 0)], 120, (0, B / 2, 0)),
}


def _plans(name, split=None, weighting="subclassification"):
    (d, dp_) = PAIRS[name]
    strata = int(max(d[2].max(), dp_[2].max())) + 1
    return tuple(
        plan_adjusted(
            *data, bound=B, epsilon=EPS, domain_size=strata, split=split, weighting=weighting
        )
        for data in (d, dp_)
    )


def test_pairs_move_the_statistics_they_claim():
    moved = {}
    for name in PAIRS:
        plan_d, plan_dp = _plans(name)
        assert [s.name for s in plan_d.noise] == ["histogram", "squares"]
        moved[name] = [  # in the units the assembly reads: records' mass, outcome units squared
            float(np.abs(a.loc - b.loc).sum()) * a.unit
            for a, b in zip(plan_d.noise, plan_dp.noise, strict=True)
        ]
    assert moved["outcome_in_cell"] == [2.0, 0.0]
    assert moved["cell_move_extreme"] == [2.0, B * B / 2]
    assert moved["cell_move_counts"] == [2.0, 0.0]


@pytest.mark.slow
@pytest.mark.parametrize("weighting", ["subclassification", "fixed_effects"])
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_adjusted_release_is_private_on_worst_case_neighbours(name, weighting):
    plan_d, plan_dp = _plans(name, weighting=weighting)
    fe = weighting == "fixed_effects"
    _check_outputs(plan_d, plan_dp, FE_OUTPUTS if fe else ADJUSTED_OUTPUTS, TOTAL, name)
    for stat, idx in (FE_DISCRETE if fe else DISCRETE_OUTPUTS).items():
        part = _parts(TOTAL, plan_d.shares.shares, *idx)
        a = _statistic(_run(plan_d, 5), stat)
        b = _statistic(_run(plan_dp, 6), stat)
        result = check_privacy(a, b, float(part.epsilon), 0.0, np.concatenate([a, b]))
        assert result.judged_bins >= 1 and result.ok, (name, stat, result.violations[:3])


@pytest.mark.parametrize("weighting", ["subclassification", "fixed_effects"])
def test_every_released_output_is_checked(weighting):
    plan_d, _ = _plans("cell_move_extreme", weighting=weighting)
    out = _run(plan_d, 0, 10)
    assert (
        {*ADJUSTED_OUTPUTS, *DISCRETE_OUTPUTS}
        == {*FE_OUTPUTS, *FE_DISCRETE}
        == {
            "tau",
            "variance",
            "raw_variance",
            *out.diagnostics,
        }
    )


def test_checker_rejects_the_histogram_at_half_the_scale():
    # on the outcome_in_cell pair the squares do not move, so tau's privacy loss is at most
    # eps_h; at half the histogram's scale it reaches 2 eps_h, which the checker must see
    plan_d, plan_dp = _plans("outcome_in_cell")
    part = _parts(TOTAL, plan_d.shares.shares, 0)
    _assert_private(plan_d, plan_dp, "tau", part, "adjusted tau (histogram part only)")
    _expect_violation(
        _half_scale(plan_d, {"histogram"}),
        _half_scale(plan_dp, {"histogram"}),
        "tau",
        part,
        "half histogram",
    )
