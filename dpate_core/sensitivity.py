"""Local and smooth sensitivities of the matching estimator and of its variance estimate.

Neighbours replace one record; N is public. ``beta``-smooth upper bounds are built as ERRATA
section 9 prescribes: a family ``A^(k)(D)`` equal to the maximum of a local-sensitivity bound over
the ball of radius ``k`` around ``D`` is automatically beta-smooth,
``S(D) = max_k e^(-k beta) A^(k)(D)`` (because ``ball_k(D)`` lies inside ``ball_(k+1)(D')``).

Both bounds here are maxima over strata of a per-stratum function ``phi(M, m)`` of the larger and
smaller arm sizes ``M = max(|T_x|, |C_x|)``, ``m = min(|T_x|, |C_x|)``, with ``phi`` non-decreasing
in ``M`` and non-increasing in ``m`` while both arms are non-empty, and a separate
``phi0(M)`` (non-decreasing) for a stratum with an empty arm. Then the maximum of ``phi`` over the
counts reachable from ``(M, m)`` with ``k`` replacements is attained at one of two corners, computed
exactly by :func:`_ball_corners`:

* both arms kept non-empty: ``m' = max(m - k, 1)``, ``M' = min(M + k, N - m')``
  (from an empty arm, ``m' = 1`` costs one replacement: ``M' = min(M + k - 1, N - 1)``);
* the smaller arm emptied (possible when ``k >= m``): ``M' = min(M + k, N)``.

A stratum absent from the data (always possible unless every stratum of the public domain is
present) is the case ``M = m = 0`` and enters only for ``k >= 1``. For the ATE this reproduces the
corrected ``R_x^(k)`` of ERRATA section 1 exactly.

Only strata on the (high ``M``, low ``m``) Pareto front, the empty-arm stratum with the largest
``M`` and one absent stratum can attain the maximum (ERRATA section 9), and the terms can stop at
``k = ln(A_max / S) / beta``: that is what makes the bound cost microseconds per front stratum
instead of O(N |X|).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "matching_global_sensitivity",
    "matching_local_sensitivity_bound",
    "matching_smooth_sensitivity",
    "matching_variance_local_sensitivity_bound",
    "matching_variance_smooth_sensitivity",
    "smooth_beta",
]

# every bound is multiplied by this before it is returned, so that float rounding in the formulas
# (relative error far below 1e-12) can never leave the returned value under the exact bound
_ROUND_UP = 1.0 + 2.0**-36

Phi = Callable[[np.ndarray, np.ndarray], np.ndarray]
Phi0 = Callable[[np.ndarray], np.ndarray]


def smooth_beta(epsilon: float, delta: float) -> float:
    """``beta = epsilon / (2 ln(2 / delta))`` for the smooth-sensitivity Laplace mechanism
    (Nissim, Raskhodnikova and Smith 2007; Algorithm 2 line 1), rounded down (safe direction)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon ({epsilon}) must be positive and finite")
    if not (0 < delta < 1):
        raise ValueError(
            f"delta ({delta}) must lie strictly between 0 and 1: the smooth-sensitivity mechanism "
            f"is (epsilon, delta)-DP and needs a positive delta"
        )
    beta = epsilon / (2.0 * math.log(2.0 / delta))
    return math.nextafter(beta, 0.0)


@dataclass(frozen=True)
class _Term:
    """One ``max_x phi`` term of a local-sensitivity bound."""

    phi: Phi  # both arms non-empty, M >= m >= 1
    phi0: Phi0  # one arm empty, M >= 1


# ---------------------------------------------------------------------------------------------
# The ATE: Theorem 1, LS(D) <= (4B/N) (1 + max_x R_x(D))


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -((-a) // b)


def _ate_phi(big: np.ndarray, small: np.ndarray) -> np.ndarray:
    # R_x = max(ceil((1+|C|)/|T|), ceil((1+|T|)/|C|)) = ceil((1 + M) / m) when M >= m >= 1
    return _ceil_div(1 + big, small).astype(np.float64)


def _ate_phi0(big: np.ndarray) -> np.ndarray:
    return big.astype(np.float64)  # R_x = max(|T_x|, |C_x|) when one arm is empty


_ATE_TERMS = (_Term(_ate_phi, _ate_phi0),)

# ---------------------------------------------------------------------------------------------
# The variance estimate (appendix): LS(V_hat) <= B^2/(2N^2) (max_x LS+_x + max_x LS-''_x).
# The appendix's per-stratum bounds are replaced by monotone upper bounds derived in
# docs/privacy.md ("variance bound"): for M >= m >= 1, with u = M / m,
#   LS+_x  <= g(M, m) = 2 M u + 34 M + (u + 2)^2
#   LS-_g  <= h(M, m) = 2 M u + 34 M + 3 (u + 2)^2   (so LS-''_x <= h(M + 1, m))
# and for a stratum with an empty arm LS+_x = (1 + M)^2 + 4M, LS-''_x <= h(M, 1).


def _var_g(big: np.ndarray, small: np.ndarray) -> np.ndarray:
    big = big.astype(np.float64)
    u = big / small
    return 2.0 * big * u + 34.0 * big + (u + 2.0) ** 2


def _var_h(big: np.ndarray, small: np.ndarray) -> np.ndarray:
    big = big.astype(np.float64)
    u = big / small
    return 2.0 * big * u + 34.0 * big + 3.0 * (u + 2.0) ** 2


_VAR_TERMS = (
    _Term(_var_g, lambda big: (1.0 + big) ** 2 + 4.0 * big),
    _Term(lambda big, small: _var_h(big + 1, small), lambda big: _var_h(big, np.ones_like(big))),
)

# ---------------------------------------------------------------------------------------------
# The engine


def _as_counts(treated_counts, control_counts, n: int, domain_size: int | None):
    t = np.asarray(treated_counts, dtype=np.int64)
    c = np.asarray(control_counts, dtype=np.int64)
    if t.shape != c.shape or t.ndim != 1:
        raise ValueError("treated_counts and control_counts must be 1-d arrays of one length")
    if t.size and (t.min() < 0 or c.min() < 0):
        raise ValueError("stratum counts must not be negative")
    total = int(t.sum() + c.sum())
    if total != n:
        raise ValueError(f"the stratum counts add up to {total}, not n ({n})")
    if n < 2:
        raise ValueError(f"n ({n}) must be at least 2")
    present = (t + c) > 0
    n_present = int(present.sum())
    if domain_size is not None and domain_size < n_present:
        raise ValueError(
            f"domain_size ({domain_size}) is smaller than the number of strata present "
            f"({n_present}): it must count every stratum of the public covariate domain"
        )
    # with no domain size, a neighbour may always carry a covariate value not seen here
    has_absent = domain_size is None or domain_size > n_present
    big = np.maximum(t, c)[present]
    small = np.minimum(t, c)[present]
    return big, small, has_absent


def _candidates(big: np.ndarray, small: np.ndarray, has_absent: bool):
    """Strata that can attain the ball maximum: the Pareto front (high M, low m) of strata with
    both arms, the empty-arm stratum with the largest M, and one absent stratum (0, 0)."""
    both = small > 0
    bb, sb = big[both], small[both]
    parts_big, parts_small = [], []
    if bb.size:
        order = np.lexsort((-bb, sb))  # m ascending, then M descending
        bb, sb = bb[order], sb[order]
        prev_max = np.concatenate(([-1], np.maximum.accumulate(bb)[:-1]))
        keep = bb > prev_max
        parts_big.append(bb[keep])
        parts_small.append(sb[keep])
    if (~both).any():
        parts_big.append(np.array([big[~both].max()]))
        parts_small.append(np.array([0]))
    if has_absent:
        parts_big.append(np.array([0]))
        parts_small.append(np.array([0]))
    return np.concatenate(parts_big), np.concatenate(parts_small)


def _ball_corners(big, small, k, n):
    """Per candidate (rows) and radius (columns): the two corners of the reachable counts.

    Returns ``(M_both, m_both, ok_both, M_empty, ok_empty)``.
    """
    M = big[:, None]
    m = small[:, None]
    kk = k[None, :]
    # both arms non-empty after k replacements
    from_empty = m == 0
    m_both = np.where(from_empty, 1, np.maximum(m - kk, 1))
    M_both = np.where(from_empty, np.minimum(M + kk - 1, n - 1), np.minimum(M + kk, n - m_both))
    ok_both = np.where(from_empty, (kk >= 1) & (M_both >= 1), True)
    # the smaller arm emptied
    M_empty = np.minimum(M + kk, n)
    ok_empty = (kk >= m) & (M_empty >= 1)
    return M_both, m_both, ok_both, M_empty, ok_empty


def _ball_max(term: _Term, big, small, k, n) -> np.ndarray:
    """``max_x max_{counts reachable with k replacements} phi`` for each k (vector over k)."""
    M_both, m_both, ok_both, M_empty, ok_empty = _ball_corners(big, small, k, n)
    v_both = np.where(ok_both, term.phi(M_both, np.maximum(m_both, 1)), 0.0)
    v_empty = np.where(ok_empty, term.phi0(np.maximum(M_empty, 1)), 0.0)
    return np.maximum(v_both, v_empty).max(axis=0)


def _smooth_bound(terms, scale, offset, big, small, has_absent, n, beta, chunk=512) -> float:
    """``max_k e^(-k beta) scale (offset + sum_t ballmax_k phi_t)`` with early stopping."""
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"beta ({beta}) must be positive and finite")
    cb, cs = _candidates(big, small, has_absent)
    cap = np.array([n])
    # no A^(k) exceeds a_max: every phi is monotone, M' <= N and m' >= 1
    a_max = scale * (
        offset
        + sum(max(float(t.phi(cap, np.ones(1, np.int64))[0]), float(t.phi0(cap)[0])) for t in terms)
    )
    best = 0.0
    start = 0
    while start <= n:
        k = np.arange(start, min(start + chunk, n + 1), dtype=np.int64)
        a_k = scale * (offset + sum(_ball_max(t, cb, cs, k, n) for t in terms))
        best = max(best, float(np.max(a_k * np.exp(-beta * k))))
        start = int(k[-1]) + 1
        # terms past k_stop are at most a_max e^(-k beta) <= best: stop
        if best > 0 and a_max * math.exp(-beta * start) <= best:
            break
    return best * _ROUND_UP


def _local_bound(terms, scale, offset, big, small, n) -> float:
    k = np.zeros(1, np.int64)
    return scale * (offset + sum(float(_ball_max(t, big, small, k, n)[0]) for t in terms))


def matching_local_sensitivity_bound(treated_counts, control_counts, n: int, bound: float) -> float:
    """Theorem 1: ``LS(D) <= (4B/N) (1 + max_x R_x(D))``."""
    big, small, _ = _as_counts(treated_counts, control_counts, n, None)
    return _local_bound(_ATE_TERMS, 4.0 * bound / n, 1.0, big, small, n) * _ROUND_UP


def matching_smooth_sensitivity(
    treated_counts,
    control_counts,
    n: int,
    bound: float,
    beta: float,
    domain_size: int | None = None,
) -> float:
    """``beta``-smooth upper bound on the local sensitivity of the matching ATE.

    Eq. (smooth-sens) **as corrected in ERRATA section 1**: ``R_x^(k)`` is the exact maximum over
    the ball of radius k (``min(M + k + 1, N)`` once the smaller arm can be reduced to one record,
    ``min(M + k, N)`` for an empty arm, ``min(k, N)`` for an absent stratum), so that
    ``S(D) <= e^beta S(D')`` for every pair of neighbours. ``domain_size`` is ``|X|``, the number of
    strata of the public covariate domain; ``None`` assumes a neighbour can always bring a stratum
    not present in the data (the conservative choice).
    """
    big, small, has_absent = _as_counts(treated_counts, control_counts, n, domain_size)
    _check_bound(bound)
    return _smooth_bound(_ATE_TERMS, 4.0 * bound / n, 1.0, big, small, has_absent, n, beta)


def matching_variance_local_sensitivity_bound(
    treated_counts, control_counts, n: int, bound: float
) -> float:
    """The appendix bound ``LS(V_hat) <= (LS+_g + max LS-_g(D'')) / (2 N^2)``, in the monotone
    form used for its smooth version (see the module notes)."""
    big, small, _ = _as_counts(treated_counts, control_counts, n, None)
    scale = bound * bound / (2.0 * n * n)
    return _local_bound(_VAR_TERMS, scale, 0.0, big, small, n) * _ROUND_UP


def matching_variance_smooth_sensitivity(
    treated_counts,
    control_counts,
    n: int,
    bound: float,
    beta: float,
    domain_size: int | None = None,
) -> float:
    """``beta``-smooth upper bound on the local sensitivity of ``V_hat`` (ERRATA section 3): the
    ball maxima of the two terms ``max_x LS+_x`` and ``max_x LS-''_x``, each exact for its monotone
    per-stratum bound, added (ERRATA section 9)."""
    big, small, has_absent = _as_counts(treated_counts, control_counts, n, domain_size)
    _check_bound(bound)
    scale = bound * bound / (2.0 * n * n)
    return _smooth_bound(_VAR_TERMS, scale, 0.0, big, small, has_absent, n, beta)


def matching_global_sensitivity(n: int, bound: float) -> float:
    """Global sensitivity used by GlobalDPMatching: ``2B``.

    ``|tau_hat| <= B`` for every dataset, so no pair of datasets differs by more than ``2B``; the
    paper's ``B`` is too small (ERRATA section 2: a neighbour pair differing by ``(N+1)B/N``).
    """
    if n < 2:
        raise ValueError(f"n ({n}) must be at least 2")
    _check_bound(bound)
    return 2.0 * bound


def _check_bound(bound: float) -> None:
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"outcome bound B ({bound}) must be positive and finite")
