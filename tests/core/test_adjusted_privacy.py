"""Empirical privacy of the adjusted release on worst-case neighbours, with the checker of
``test_release_privacy.py`` (histogram ratio test with Clopper-Pearson bounds; see there).

Each released output is a post-processing of the three noisy vectors, so its probability ratio is
bounded by ``e^eps`` of the budget parts it reads: ``tau`` and ``noise_variance`` read the counts and
the sums, the variances all three, ``usable_*`` the counts only. A deliberately broken variant (the
sums' Laplace at half its scale) must be rejected.
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
    "tau": (0, 1),
    "variance": (0, 1, 2),
    "raw_variance": (0, 1, 2),
    "sampling_variance_dp": (0, 1, 2),
    "noise_variance": (0, 1),
    "usable_weight": (0,),
}
# a few values only: judged on its own histogram (the unestimated variance is 0 whenever every
# stratum is used, as on these pairs; resolved reads the counts only)
DISCRETE_OUTPUTS = {"usable_strata": (0,), "unestimated_variance": (0,), "resolved": (0,)}
# fixed effects: tau and the variances read the same parts; whether the estimate is resolved (the
# usable_* and unestimated_variance outputs) reads the counts only and takes two values
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
    # a record keeps its cell, its outcome goes 0 -> B: the sums move by B, counts and squares not
    "outcome_in_cell": _pair(_balanced(200, 1), 200, (1, B, 0)),
    # a treated Y = B record of stratum 0 becomes a control Y = 0 of stratum 1: all three vectors
    # move by their full sensitivity
    "cell_move_extreme": _pair(_balanced(30, 2), 31, (0, 0.0, 1)),
    # a Y = B/2 record changes arm: only the counts move (by 2)
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
        moved[name] = [
            float(np.abs(a.loc - b.loc).sum()) / (2 if a.name == "counts" else 1)
            for a, b in zip(plan_d.noise, plan_dp.noise, strict=True)
        ]
    assert moved["outcome_in_cell"][0] == 0 and moved["outcome_in_cell"][2] == 0
    assert moved["outcome_in_cell"][1] > 0
    assert all(v > 0 for v in moved["cell_move_extreme"])
    assert moved["cell_move_counts"][0] == 1 and moved["cell_move_counts"][1:] == [0, 0]


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


def test_checker_rejects_the_sums_at_half_the_scale():
    # on the outcome_in_cell pair the counts do not move, so tau's privacy loss is at most eps_s;
    # at half the sums' scale it reaches 2 eps_s, which the checker must see
    plan_d, plan_dp = _plans("outcome_in_cell")
    part = _parts(TOTAL, plan_d.shares.shares, 1)
    _assert_private(plan_d, plan_dp, "tau", part, "adjusted tau (sums part only)")
    _expect_violation(
        _half_scale(plan_d, {"sums"}), _half_scale(plan_dp, {"sums"}), "tau", part, "half sums"
    )
