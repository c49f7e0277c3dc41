"""Smooth sensitivity on Synth (the paper's Figures 6 and 7, ``sensitivity.csv``) and the paper's
literal smooth-sensitivity formula, computed for comparison ONLY."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpate.experiments.settings import ExperimentSettings, seed_key
from dpate_core.mechanisms.matching import (
    matching_global_sensitivity,
    matching_local_sensitivity_bound,
    matching_smooth_sensitivity,
    smooth_beta,
)

__all__ = ["paper_literal_smooth_sensitivity", "sensitivity_curves"]


def paper_literal_smooth_sensitivity(
    treated_counts: ArrayLike, control_counts: ArrayLike, n: int, bound: float, beta: float
) -> float:
    """Eq. (smooth-sens) as printed in the paper, with its ``R_x^(k)``.

    **Not a valid smooth bound** (correction 1: it is not beta-smooth, so a release calibrated
    to it is not (epsilon, delta)-DP). Computed here only to show, in the figures, how much the
    corrected bound of :func:`dpate_core.mechanisms.matching.matching_smooth_sensitivity` differs from it.
    Never use it in a release.
    """
    t = np.asarray(treated_counts, dtype=np.int64)
    c = np.asarray(control_counts, dtype=np.int64)
    present = (t + c) > 0
    big_all = np.maximum(t, c)[present]
    small_all = np.minimum(t, c)[present]
    # R_x^(k) is non-decreasing in M and non-increasing in m: only the (high M, low m) Pareto
    # front can attain the maximum over x (same argument as correction 9)
    order = np.lexsort((-big_all, small_all))
    big_all, small_all = big_all[order], small_all[order]
    prev = np.concatenate(([-1], np.maximum.accumulate(big_all)[:-1]))
    keep = big_all > prev
    big = big_all[keep][:, None]
    small = small_all[keep][:, None]
    scale = 4.0 * bound / n
    best, start, chunk = 0.0, 0, 4096
    while start <= n:
        k = np.arange(start, min(start + chunk, n + 1), dtype=np.int64)[None, :]
        denom = np.where(small > k, small - k, 1)
        r = np.where(small <= k, big + k, -((-(big + k + 1)) // denom))
        a_k = scale * (1.0 + r.max(axis=0)) * np.exp(-beta * k[0])
        best = max(best, float(a_k.max()))
        start += chunk
        # every later term is at most scale (1 + N + k) e^(-k beta), decreasing once k > 1/beta
        if start > 1.0 / beta and scale * (1.0 + n + start) * math.exp(-beta * start) <= best:
            break
    return best


def sensitivity_curves(
    settings: ExperimentSettings, synth: Callable[..., Any]
) -> list[dict[str, Any]]:
    """Smooth sensitivity of the matching ATE on Synth versus ``N`` (``|X| = 100``; ``a = 0`` and
    ``a ~ U[-1, 1]``) and versus the imbalance ``a`` (``N = 10,000``), at
    ``beta = eps / (2 ln(2/delta))`` with ``eps = 1``, ``delta = 1e-5`` as the paper states, next to
    Theorem 1's local-sensitivity bound, the paper's literal formula (comparison only) and the
    global sensitivities ``2B`` (ours) and ``B`` (the paper's).

    ``synth(n, domain_size, a, seed)`` returns ``(w, y, x)``; ``a=None`` draws ``a ~ U[-1, 1]``.
    """
    beta = smooth_beta(1.0, 1e-5)
    bound = 1.0
    domain = settings.synth_domain
    grid: list[tuple[str, int, float | None]] = [
        ("N", n, a) for n in settings.sens_sizes for a in (0.0, None)
    ]
    grid += [("a", settings.synth_n, a) for a in settings.sens_imbalances]
    rows = []
    for sweep, n, a in grid:
        for rep in range(settings.sens_seeds):
            seed = seed_key(settings.seed, "sens", n, a, rep)
            w, _, x = synth(n=n, domain_size=domain, a=a, seed=seed)
            t_counts = np.bincount(x[w == 1], minlength=domain)
            c_counts = np.bincount(x[w == 0], minlength=domain)
            rows.append(
                {
                    "sweep": sweep,
                    "N": n,
                    "a": "U[-1,1]" if a is None else a,
                    "seed": seed,
                    "beta": beta,
                    "smooth_sensitivity": matching_smooth_sensitivity(
                        t_counts, c_counts, n, bound, beta, domain
                    ),
                    "paper_literal": paper_literal_smooth_sensitivity(
                        t_counts, c_counts, n, bound, beta
                    ),
                    "local_bound": matching_local_sensitivity_bound(t_counts, c_counts, n, bound),
                    "global_ours": matching_global_sensitivity(n, bound),
                    "global_paper": bound,
                }
            )
    return rows
