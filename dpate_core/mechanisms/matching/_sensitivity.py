"""Local and smooth sensitivities of the matching estimator and of its variance estimate.

Neighbours replace one record; N is public. ``beta``-smooth upper bounds are built as correction
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
corrected ``R_x^(k)`` of correction 1 exactly.

Only strata on the (high ``M``, low ``m``) Pareto front, the empty-arm stratum with the largest
``M`` and one absent stratum can attain the maximum (correction 9), and the terms can stop at
``k = ln(A_max / S) / beta``: one compiled loop over radii and front strata, no temporaries,
instead of O(N |X|).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.compile_cache import njit
from dpate_core.privacy import to_float
from dpate_core.release import check_bound

__all__ = [
    "matching_ate_float_error",
    "matching_global_sensitivity",
    "matching_local_sensitivity_bound",
    "matching_smooth_sensitivity",
    "matching_variance_float_error",
    "matching_variance_local_sensitivity_bound",
    "matching_variance_smooth_sensitivity",
    "smooth_beta",
]

# every bound is multiplied by this before it is returned, so that float rounding in the formulas
# (relative error far below 1e-12) can never leave the returned value under the exact bound
_ROUND_UP = 1.0 + 2.0**-36


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


# ---------------------------------------------------------------------------------------------
# The per-stratum functions. ``phi(kind, term, M, m)`` for both arms non-empty (M >= m >= 1),
# ``phi0(kind, term, M)`` for one empty arm (M >= 1).
#
# kind _ATE (Theorem 1): LS(D) <= (4B/N) (1 + max_x R_x(D)), one term:
#   R_x = max(ceil((1+|C|)/|T|), ceil((1+|T|)/|C|)) = ceil((1 + M) / m);  R_x = M with an empty arm.
# kind _VAR (appendix): LS(V_hat) <= B^2/(2N^2) (max_x LS+_x + max_x LS-''_x), two terms. The
# appendix's per-stratum bounds are replaced by monotone upper bounds derived in docs/explanation/privacy.md
# ("variance bound"): for M >= m >= 1, with u = M / m,
#   LS+_x  <= g(M, m) = 2 M u + 34 M + (u + 2)^2
#   LS-_g  <= h(M, m) = 2 M u + 34 M + 3 (u + 2)^2   (so LS-''_x <= h(M + 1, m))
# and for a stratum with an empty arm LS+_x = (1 + M)^2 + 4M, LS-''_x <= h(M, 1).

_ATE, _VAR = 0, 1
_TERMS = {_ATE: 1, _VAR: 2}
_TERMS_OF = np.array([_TERMS[_ATE], _TERMS[_VAR]], dtype=np.int64)  # for the compiled loop


@njit(cache=True)
def _h(big: Any, small: Any) -> Any:  # pragma: no cover - compiled
    u = big / small
    return 2.0 * big * u + 34.0 * big + 3.0 * (u + 2.0) ** 2


@njit(cache=True)
def _phi(kind: int, term: int, big: Any, small: Any) -> Any:  # pragma: no cover - compiled
    if kind == _ATE:
        return float(-((-(1 + big)) // small))
    big_f = float(big)
    if term == 0:
        u = big_f / small
        return 2.0 * big_f * u + 34.0 * big_f + (u + 2.0) ** 2
    return _h(big_f + 1.0, float(small))


@njit(cache=True)
def _phi0(kind: int, term: int, big: Any) -> Any:  # pragma: no cover - compiled
    big_f = float(big)
    if kind == _ATE:
        return big_f
    if term == 0:
        return (1.0 + big_f) ** 2 + 4.0 * big_f
    return _h(big_f, 1.0)


@njit(cache=True)
def _smooth_kernel(  # pragma: no cover
    kind: int,
    big: Any,
    small: Any,
    n: int,
    beta: float,
    scale: float,
    offset: float,
    a_max: float,
    k_last: int,
) -> Any:
    """``max_{k <= k_last} e^(-k beta) scale (offset + sum_t max_x ballmax_k phi_t)``.

    For each radius ``k`` and candidate stratum ``(M, m)``, the maximum of ``phi`` over the counts
    reachable with ``k`` replacements is at one of two corners (module notes): both arms kept,
    ``m' = max(m - k, 1)``, ``M' = min(M + k, N - m')`` (from an empty arm ``m' = 1`` costs one
    replacement: ``M' = min(M + k - 1, N - 1)``); or the smaller arm emptied (``k >= m``),
    ``M' = min(M + k, N)``. Stops once ``a_max e^(-k beta)`` cannot beat the best term so far.
    """
    best = 0.0
    for k in range(k_last + 1):
        decay = math.exp(-beta * k)
        if best > 0.0 and a_max * decay <= best:
            break
        total = offset
        for term in range(_TERMS_OF[kind]):
            r = 0.0
            for j in range(big.size):
                M = big[j]
                m = small[j]
                if m == 0:
                    if k >= 1:
                        mb = min(M + k - 1, n - 1)
                        if mb >= 1:
                            r = max(r, _phi(kind, term, mb, 1))
                else:
                    lo = max(m - k, 1)
                    r = max(r, _phi(kind, term, min(M + k, n - lo), lo))
                if k >= m:
                    me = min(M + k, n)
                    if me >= 1:
                        r = max(r, _phi0(kind, term, me))
            total += r
        best = max(best, scale * total * decay)
    return best


# ---------------------------------------------------------------------------------------------
# The engine


_Counts = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], bool]  # big, small, has_absent


def _as_counts(
    treated_counts: npt.ArrayLike, control_counts: npt.ArrayLike, n: int, domain_size: int | None
) -> _Counts:
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


def _candidates(
    big: npt.NDArray[np.int64], small: npt.NDArray[np.int64], has_absent: bool
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
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
    return (
        np.ascontiguousarray(np.concatenate(parts_big), dtype=np.int64),
        np.ascontiguousarray(np.concatenate(parts_small), dtype=np.int64),
    )


def _terms(kind: int, bound: float, n: int) -> tuple[float, float]:
    """``(scale, offset)`` of a kind's bound: ``4B/N`` and 1 for the ATE (Theorem 1),
    ``B^2/(2N^2)`` and 0 for the variance (appendix)."""
    if kind == _ATE:
        return 4.0 * bound / n, 1.0
    return bound * bound / (2.0 * n * n), 0.0


def _smooth_bound(kind: int, bound: float, n: int, beta: float, counts: _Counts) -> float:
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"beta ({beta}) must be positive and finite")
    scale, offset = _terms(kind, bound, n)
    cb, cs = _candidates(*counts)
    # no A^(k) exceeds a_max: every phi is monotone, M' <= N and m' >= 1
    a_max = scale * (
        offset + sum(max(_phi(kind, t, n, 1), _phi0(kind, t, n)) for t in range(_TERMS[kind]))
    )
    # terms are constant once k >= N (all counts saturate), so k = N is the last that matters
    return float(_smooth_kernel(kind, cb, cs, n, beta, scale, offset, a_max, n) * _ROUND_UP)


def _local_bound(kind: int, bound: float, n: int, counts: _Counts) -> float:
    scale, offset = _terms(kind, bound, n)
    cb = np.ascontiguousarray(counts[0], dtype=np.int64)
    cs = np.ascontiguousarray(counts[1], dtype=np.int64)
    return float(_smooth_kernel(kind, cb, cs, n, 1.0, scale, offset, np.inf, 0) * _ROUND_UP)


def matching_local_sensitivity_bound(
    treated_counts: npt.ArrayLike, control_counts: npt.ArrayLike, n: int, bound: float
) -> float:
    """Theorem 1: ``LS(D) <= (4B/N) (1 + max_x R_x(D))``."""
    return _local_bound(_ATE, bound, n, _as_counts(treated_counts, control_counts, n, None))


def matching_smooth_sensitivity(
    treated_counts: npt.ArrayLike,
    control_counts: npt.ArrayLike,
    n: int,
    bound: float,
    beta: float,
    domain_size: int | None = None,
) -> float:
    """``beta``-smooth upper bound on the local sensitivity of the matching ATE.

    Eq. (smooth-sens) **as corrected in correction 1**: ``R_x^(k)`` is the exact maximum over
    the ball of radius k (``min(M + k + 1, N)`` once the smaller arm can be reduced to one record,
    ``min(M + k, N)`` for an empty arm, ``min(k, N)`` for an absent stratum), so that
    ``S(D) <= e^beta S(D')`` for every pair of neighbours. ``domain_size`` is ``|X|``, the number of
    strata of the public covariate domain; ``None`` assumes a neighbour can always bring a stratum
    not present in the data (the conservative choice). Capped at the global sensitivity ``2B``.
    """
    counts = _as_counts(treated_counts, control_counts, n, domain_size)
    check_bound(bound)
    smooth = _smooth_bound(_ATE, bound, n, beta, counts)
    # LS <= GS = 2B everywhere, and a constant is beta-smooth: the minimum of two beta-smooth upper
    # bounds on LS is one too (for tiny sites the ball maximum can pass 2B)
    return min(smooth, matching_global_sensitivity(n, bound))


def matching_variance_local_sensitivity_bound(
    treated_counts: npt.ArrayLike, control_counts: npt.ArrayLike, n: int, bound: float
) -> float:
    """The appendix bound ``LS(V_hat) <= (LS+_g + max LS-_g(D'')) / (2 N^2)``, in the monotone
    form used for its smooth version (see the module notes)."""
    return _local_bound(_VAR, bound, n, _as_counts(treated_counts, control_counts, n, None))


def matching_variance_smooth_sensitivity(
    treated_counts: npt.ArrayLike,
    control_counts: npt.ArrayLike,
    n: int,
    bound: float,
    beta: float,
    domain_size: int | None = None,
) -> float:
    """``beta``-smooth upper bound on the local sensitivity of ``V_hat`` (correction 3): the
    ball maxima of the two terms ``max_x LS+_x`` and ``max_x LS-''_x``, each exact for its monotone
    per-stratum bound, added (correction 9)."""
    counts = _as_counts(treated_counts, control_counts, n, domain_size)
    check_bound(bound)
    return _smooth_bound(_VAR, bound, n, beta, counts)


def matching_global_sensitivity(n: int, bound: float) -> float:
    """Global sensitivity used by GlobalDPMatching: ``2B``.

    ``|tau_hat| <= B`` for every dataset, so no pair of datasets differs by more than ``2B``; the
    paper's ``B`` is too small (correction 2: a neighbour pair differing by ``(N+1)B/N``).
    """
    if n < 2:
        raise ValueError(f"n ({n}) must be at least 2")
    check_bound(bound)
    return 2.0 * bound


def matching_ate_float_error(n: int, bound: float) -> float:
    """An upper bound on ``|fl(tau_hat) - tau_hat|``, the rounding error of Algorithm 1's estimate
    as :func:`dpate_core.statistics.matching_statistics` computes it, for *any* ``n`` records
    with outcomes in ``[0, B]``: ``gamma_(n+2) B`` with ``gamma_k = k u / (1 - k u)``,
    ``u = 2^-53`` (rounded up).

    The pass sums ``n`` or fewer terms ``d_i = +-(Y_a - Y_b)``, each ``|d_i| <= B`` and each
    computed with one rounding (relative error ``u``), in some order of pairwise additions (each
    term takes part in at most ``n - 1``: error at most ``gamma_(n-1) sum |d_i|``, Higham 2002,
    section 4.2), then divides by ``n`` (one more rounding, ``|tau_hat| <= B``). So two
    neighbours' *computed* estimates differ by at most the proved sensitivity plus twice this:
    the release adds that to the smooth (or global) bound, a constant, which keeps a smooth bound
    smooth. It is about ``n 10^-16 B``: 2% of the smooth bound at ``10^7`` records in the worst
    case, nothing at the sizes of the paper's data."""
    if n < 1:
        raise ValueError(f"n ({n}) must be at least 1")
    check_bound(bound)
    ku = Fraction(n + 2, 2**53)
    return to_float(ku / (1 - ku) * Fraction(bound), round_up=True)


def matching_variance_float_error(bound: float) -> float:
    """An upper bound on ``|fl(V_hat) - V_hat|`` for *any* records with outcomes in ``[0, B]``,
    ``V_hat`` as :func:`dpate_core.statistics.matching_statistics` computes it: ``2 u B^2``
    plus the smallest subnormal, ``u = 2^-53`` (rounded up).

    The pass quantises each outcome on the public grid ``B 2^-k`` (a record-wise map into
    ``[0, B]``, so neighbours stay neighbours and the smooth bound ``S_V``, a function of the
    counts, still bounds the local sensitivity), forms the appendix's sum of
    ``(1 + L_i)^2 (a_i - a_m(i))^2`` as an exact integer and rounds ``V_hat`` once to the
    nearest float: relative error at most ``u``, or an absolute ``2^-1075`` below the normal
    range. And ``V_hat <= 2 B^2`` for every dataset (``sum (1 + L_i)^2 <= (sum (1 + L_i))^2
    <= (2N)^2``, each squared difference at most ``B^2``). Two neighbours' computed values
    therefore differ by at most ``S_V`` plus twice this: the release adds that constant to
    ``S_V`` (a smooth bound plus a constant is smooth). About ``2.2 10^-16 B^2``; the smooth bound
    is about ``B^2 / N^2``, so it adds under 2% up to ``N = 10^6`` (measured in the tests)."""
    check_bound(bound)
    err = Fraction(2, 2**53) * Fraction(bound) ** 2 + Fraction(1, 2**1074)
    return to_float(err, round_up=True)
