"""The ATE's smooth bound is capped at the global sensitivity 2B (min of two beta-smooth bounds)."""

from __future__ import annotations

import math

import numpy as np

from dpate_core.mechanisms.matching import (
    matching_global_sensitivity,
    matching_smooth_sensitivity,
)


def test_tiny_imbalanced_site_is_capped_at_2b():
    # one stratum, 10 treated vs 1 control, N = 11: the ball maximum exceeds 2B long before decay
    s = matching_smooth_sensitivity([10, 0], [1, 0], 11, 3.0, 0.01, domain_size=2)
    assert s == matching_global_sensitivity(11, 3.0) == 6.0


def test_cap_keeps_beta_smoothness_on_neighbours():
    beta = 0.02
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(4, 40))
        cells = rng.multinomial(n, np.ones(6) / 6)
        t, c = cells[:3].copy(), cells[3:].copy()
        src, dst = rng.choice(6, 2, replace=False)
        if cells[src] == 0:
            continue
        moved = cells.copy()
        moved[src] -= 1
        moved[dst] += 1
        s1 = matching_smooth_sensitivity(t, c, n, 1.0, beta, 3)
        s2 = matching_smooth_sensitivity(moved[:3], moved[3:], n, 1.0, beta, 3)
        assert s1 <= math.exp(beta) * s2 * (1 + 1e-12)
        assert s1 <= 2.0
