"""Non-private exact matching (Algorithm 1) and its variance (appendix), in one compiled pass.

Algorithm 1 matches, within each covariate stratum ``x``, the ``j``-th treated record (in record
order) to control ``C_x[j mod |C_x|]`` and the ``j``-th control to treated ``T_x[j mod |T_x|]``;
strata with an empty arm contribute 0. Everything it needs per record is its *rank* ``j`` inside its
(stratum, arm) group. A compiled counting sort (O(N), two passes, the first also validating the
inputs) lays the outcomes out group by group in record order, so a record's rank is its position in
its group's block; then each stratum's two blocks are read sequentially to accumulate ``tau_hat``
and ``V_hat``.

``V_hat`` is computed exactly, then rounded once: the pass quantises each outcome on the grid
``B 2^-k`` (:func:`variance_bits`; for the non-private estimate without a bound, the least power
of two at or above every outcome in place of ``B``), sums the squared grid differences as int64
per (stratum, arm) and per value of ``L``, and :func:`_exact_variance` combines them in Python
integers. A float sum would round by up to ``N u`` relative, more than ``V_hat``'s smooth
sensitivity at large ``N`` (:func:`dpate_core.mechanisms.matching.matching_variance_float_error`).
``tau_hat`` is a float sum whose rounding is covered by padding instead
(:func:`dpate_core.mechanisms.matching.matching_ate_float_error`).

With ``L_i`` the number of records matched to record ``i``, the appendix writes
``tau_hat = (1/N) sum_x [sum_{T_x} (1 + L_i) Y_i - sum_{C_x} (1 + L_i) Y_i]`` and
``V_hat = 1/(2 N^2) sum_i (1 + L_i)^2 (Yhat_i(1) - Yhat_i(0))^2``. For a treated record of rank
``j`` in a stratum with ``T`` treated and ``C`` controls, ``L_i = C // T + [j < C % T]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dpate_core.compile_cache import njit

from ._records import _BAD_W, _BAD_X, _BAD_Y, _OK, check_status, record_arrays

__all__ = [
    "MatchingResult",
    "MatchingStatistics",
    "exact_matching",
    "matching_statistics",
    "matching_statistics_of_strata",
    "matching_variance",
    "stratum_counts",
    "variance_bits",
]


@dataclass(frozen=True)
class MatchingResult:
    """``tau``: the exact matching estimate; ``matches_used``: ``L_i`` for every record."""

    tau: float
    matches_used: np.ndarray


@dataclass(frozen=True)
class MatchingStatistics:
    """Everything a matching release needs from one pass over the records.

    ``treated_counts[x]`` and ``control_counts[x]`` are ``|T_x|`` and ``|C_x|`` for every stratum of
    the domain. They are private: only the sensitivities computed from them leave, through noise.
    ``bound`` is the outcome bound ``B`` the pass checked (``None``: not checked; a release refuses
    such statistics).
    """

    tau: float
    variance: float
    treated_counts: np.ndarray
    control_counts: np.ndarray
    bound: float | None = None

    @property
    def n(self) -> int:
        return int(self.treated_counts.sum() + self.control_counts.sum())


@njit(cache=True, nogil=True, inline="always")
def _match_side(
    sorted_y: Any,
    to_grid: float,
    own0: int,
    n_own: int,
    opp0: int,
    n_opp: int,
    sign: float,
    origin: Any,
    matches: Any,
    want_matches: bool,
) -> Any:  # pragma: no cover
    """One arm of a stratum: its ``j``-th record is matched to the other arm's ``j mod n_opp``-th
    and used by ``L = n_opp // n_own + [j < n_opp % n_own]`` records of the other arm. Returns
    the float sum of the differences ``d`` and the exact integer sums of the squared grid
    differences ``(a_own - a_partner)^2`` over the records with ``L = q + 1`` and ``L = q``."""
    q, rem = n_opp // n_own, n_opp % n_own
    tau_sum = 0.0
    sq_more = np.int64(0)
    sq_base = np.int64(0)
    p = 0
    for j in range(n_own):
        y_own, y_opp = sorted_y[own0 + j], sorted_y[opp0 + p]
        d = sign * (y_own - y_opp)
        da = np.int64(np.rint(y_own * to_grid)) - np.int64(np.rint(y_opp * to_grid))
        p = 0 if p + 1 == n_opp else p + 1
        tau_sum += d
        if j < rem:
            sq_more += da * da
        else:
            sq_base += da * da
        if want_matches:
            matches[origin[own0 + j]] = q + (1 if j < rem else 0)
    return tau_sum, sq_more, sq_base


@njit(cache=True, nogil=True)
def _match_kernel(
    w: Any, y: Any, x: Any, n_strata: int, want_matches: bool, y_max: float, k: int
) -> Any:  # pragma: no cover - compiled
    n = w.shape[0]
    n_groups = 2 * n_strata  # group g = 2 x + w
    counts = np.zeros(n_groups, np.int64)
    empty = np.zeros(0, np.int64)
    y_top = 0.0
    for i in range(n):
        xi, wi, yi = x[i], w[i], y[i]
        if xi < 0 or xi >= n_strata:
            return _BAD_X, 0.0, empty, empty, 0.0, empty, empty
        if wi != 0 and wi != 1:
            return _BAD_W, 0.0, empty, empty, 0.0, empty, empty
        if not (yi >= 0.0 and yi <= y_max):  # also false for NaN
            return _BAD_Y, 0.0, empty, empty, 0.0, empty, empty
        counts[2 * xi + wi] += 1
        y_top = max(y_top, yi)
    # the grid of V_hat's exact sums: B 2^-k, or (no bound: the non-private estimate) the least
    # power of two at or above every outcome, so dyadic outcomes are on it. A record's grid value
    # a = rint(Y fl(2^k / grid)) lies in [0, 2^k]: Y <= grid, and two roundings of relative size
    # 2^-53 keep the product below 2^k + 1/2
    grid = y_max
    if grid == np.inf:
        grid = math.ldexp(1.0, math.frexp(y_top)[1]) if y_top > 0.0 else 1.0
    to_grid = 2.0**k / grid
    # counting sort of the outcomes by group, record order kept inside each group: the rank of a
    # record in its group is its position in the group's block
    offsets = np.zeros(n_groups + 1, np.int64)
    for g in range(n_groups):
        offsets[g + 1] = offsets[g] + counts[g]
    sorted_y = np.empty(n, np.float64)
    origin = np.empty(n if want_matches else 0, np.int64)
    fill = offsets[:-1].copy()
    for i in range(n):
        g = 2 * x[i] + w[i]
        pos = fill[g]
        fill[g] = pos + 1
        sorted_y[pos] = y[i]
        if want_matches:
            origin[pos] = i
    # stratum by stratum, both blocks read sequentially: the j-th treated is matched to control
    # j mod |C_x|, the j-th control to treated j mod |T_x|; L = q + [j < rem] for each side
    matches = np.zeros(n if want_matches else 0, np.int64)
    sq_more = np.zeros(n_groups, np.int64)  # per group: sum of squared grid differences, L = q + 1
    sq_base = np.zeros(n_groups, np.int64)  # and L = q
    tau_sum = 0.0
    for s in range(n_strata):
        c0, t0 = offsets[2 * s], offsets[2 * s + 1]
        n_c, n_t = counts[2 * s], counts[2 * s + 1]
        if n_c == 0 or n_t == 0:
            continue  # no match in this stratum: Yhat(1) = Yhat(0) = Y, contributes 0
        # treated records (d = own - partner), then controls (d = partner - own)
        for g, own0, n_own, opp0, n_opp, sign in (
            (2 * s + 1, t0, n_t, c0, n_c, 1.0),
            (2 * s, c0, n_c, t0, n_t, -1.0),
        ):
            t_add, more, base = _match_side(
                sorted_y, to_grid, own0, n_own, opp0, n_opp, sign, origin, matches, want_matches
            )
            tau_sum += t_add
            sq_more[g] = more
            sq_base[g] = base
    return _OK, tau_sum, counts, matches, grid, sq_more, sq_base


def variance_bits(n: int) -> int:
    """``k``: the grid ``B 2^-k`` on which ``V_hat`` is summed exactly. A squared grid difference
    is at most ``4^k`` and a group holds at most ``n <= 2^ceil(log2 n)`` records, so every
    per-group sum stays below ``2^62`` (exact in int64)."""
    log_n = max(1, math.ceil(math.log2(max(n, 1))))
    k = (62 - log_n) // 2
    if k < 8:
        raise ValueError(f"n ({n}) is too large for V_hat's exact sums (at most 2^46 records)")
    return k


def _exact_variance(
    counts: npt.NDArray[np.int64],
    sq_more: npt.NDArray[np.int64],
    sq_base: npt.NDArray[np.int64],
    grid: float,
    k: int,
    n: int,
) -> float:
    """``V_hat = grid^2 / (2 N^2 4^k) sum_i (1 + L_i)^2 (a_i - a_m(i))^2``, the integer sum formed
    exactly (Python integers, one term per group with both arms: ``(2 + q)^2`` times the group's
    ``L = q + 1`` sum plus ``(1 + q)^2`` times its ``L = q`` sum, ``q`` = the other arm's size over
    its own, floored) and rounded once: with ``grid = p / r`` exactly (``r`` a power of two), one
    integer true division, which Python rounds correctly to the nearest float."""
    other = counts.reshape(-1, 2)[:, ::-1].ravel()  # the other arm of the same stratum
    used = np.flatnonzero((counts > 0) & (other > 0))
    q = other[used] // counts[used]
    total = sum(
        (qg + 2) ** 2 * more + (qg + 1) ** 2 * base
        for qg, more, base in zip(
            q.tolist(), sq_more[used].tolist(), sq_base[used].tolist(), strict=True
        )
    )
    p, r = grid.as_integer_ratio()
    return float((total * p * p) / (2 * n * n * 4**k * r * r))


def _run_matching(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    domain_size: int | None,
    want_matches: bool,
    bound: float | None = None,
) -> tuple[Any, float, npt.NDArray[np.int64], Any]:
    w, y, x = record_arrays(w, y, x, empty="matching needs at least one record")
    size = int(x.max()) + 1 if domain_size is None else int(domain_size)
    y_max = np.inf if bound is None else float(bound)
    n = w.size
    k = variance_bits(n)
    status, tau_sum, counts, matches, grid, sq_more, sq_base = _match_kernel(
        w, y, x, size, want_matches, y_max, k
    )
    check_status(status, size, bound)
    return tau_sum / n, _exact_variance(counts, sq_more, sq_base, grid, k, n), counts, matches


def exact_matching(w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike) -> MatchingResult:
    """Algorithm 1 (non-private matching at a site): ``tau_hat`` and ``L_i`` per record."""
    tau, _, _, matches = _run_matching(w, y, x, None, True)
    return MatchingResult(tau=float(tau), matches_used=matches)


def matching_variance(w: npt.ArrayLike, y: npt.ArrayLike, x: npt.ArrayLike) -> float:
    """The appendix variance estimate ``V_hat = 1/(2N^2) sum_i (1+L_i)^2 (Yhat_i(1)-Yhat_i(0))^2``."""
    return float(_run_matching(w, y, x, None, False)[1])


def matching_statistics(
    w: npt.ArrayLike,
    y: npt.ArrayLike,
    x: npt.ArrayLike,
    domain_size: int | None = None,
    bound: float | None = None,
) -> MatchingStatistics:
    """``tau_hat``, ``V_hat`` and the per-stratum arm counts in one pass (what a release needs).

    With ``bound``, outcomes outside ``[0, bound]`` are refused (checked inside the same pass).
    """
    tau, var, counts, _ = _run_matching(w, y, x, domain_size, False, bound)
    return MatchingStatistics(
        tau=float(tau),
        variance=float(var),
        treated_counts=counts[1::2].copy(),
        control_counts=counts[0::2].copy(),
        bound=None if bound is None else float(bound),
    )


@njit(cache=True, nogil=True)
def _strata_kernel(
    w: Any,
    y: Any,
    x: Any,
    n_strata: int,
    y_max: float,
    to_grid: float,
    tau_sum: float,
    counts: Any,
    sq_more: Any,
    sq_base: Any,
) -> Any:  # pragma: no cover - compiled
    """:func:`_match_kernel`'s per-stratum pass over records that arrive stratum by stratum
    (``x`` non-decreasing, each stratum whole, records in their rank order): each stratum's
    control and treated outcomes laid out in order, both sides matched by :func:`_match_side`,
    the sides' sums added to the running ``tau_sum`` in the order the one-pass kernel adds them."""
    n = w.shape[0]
    empty = np.zeros(0, np.int64)
    scratch = np.empty(n, np.float64)
    i = 0
    while i < n:
        s = x[i]
        if s < 0 or s >= n_strata:
            return _BAD_X, tau_sum
        j = i
        n_t = 0
        while j < n and x[j] == s:
            wj, yj = w[j], y[j]
            if wj != 0 and wj != 1:
                return _BAD_W, tau_sum
            if not (yj >= 0.0 and yj <= y_max):
                return _BAD_Y, tau_sum
            n_t += wj
            j += 1
        if j < n and x[j] < s:
            return _BAD_X, tau_sum
        n_c = j - i - n_t
        pc, pt = 0, n_c
        for r in range(i, j):
            if w[r] == 1:
                scratch[pt] = y[r]
                pt += 1
            else:
                scratch[pc] = y[r]
                pc += 1
        counts[2 * s] += n_c
        counts[2 * s + 1] += n_t
        if n_c > 0 and n_t > 0:
            for g, own0, n_own, opp0, n_opp, sign in (
                (2 * s + 1, n_c, n_t, 0, n_c, 1.0),
                (2 * s, 0, n_c, n_c, n_t, -1.0),
            ):
                t_add, more, base = _match_side(
                    scratch, to_grid, own0, n_own, opp0, n_opp, sign, empty, empty, False
                )
                tau_sum += t_add
                sq_more[g] = more
                sq_base[g] = base
        i = j
    return _OK, tau_sum


def matching_statistics_of_strata(
    chunks: Iterable[tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]],
    *,
    n: int,
    domain_size: int,
    bound: float,
) -> MatchingStatistics:
    """:func:`matching_statistics` from records read one stratum at a time: memory bounded by
    the largest chunk, never by ``N``.

    ``chunks``: ``(w, y, x)`` arrays, each holding whole strata in increasing stratum id (across
    chunks too), a stratum's records in their rank order (the data-independent order Algorithm 1
    is applied in, docs/explanation/privacy.md "Record order"). ``n``: the number of records in all chunks
    (it fixes ``V_hat``'s grid; checked). The result is :func:`matching_statistics` on the
    records in that order, bit for bit: ``tau_hat``'s float sum adds the same terms in the same
    order, and ``V_hat``'s sums are exact."""
    y_max = float(bound)
    size = int(domain_size)
    k = variance_bits(n)
    to_grid = 2.0**k / y_max
    counts = np.zeros(2 * size, np.int64)
    sq_more = np.zeros(2 * size, np.int64)
    sq_base = np.zeros(2 * size, np.int64)
    tau_sum = 0.0
    seen = 0
    last = -1
    for chunk in chunks:
        w, y, x = record_arrays(*chunk)
        if w.size == 0:
            continue
        if int(x[0]) <= last:
            raise ValueError("chunks must hold whole strata in increasing stratum id")
        status, tau_sum = _strata_kernel(
            w, y, x, size, y_max, to_grid, tau_sum, counts, sq_more, sq_base
        )
        check_status(status, size, y_max)
        seen += w.size
        last = int(x[-1])
    if seen != n:
        raise ValueError(f"the chunks hold {seen} records, not the n ({n}) the grid was chosen for")
    if n == 0:
        raise ValueError("matching needs at least one record")
    return MatchingStatistics(
        tau=float(tau_sum / n),
        variance=float(_exact_variance(counts, sq_more, sq_base, y_max, k, n)),
        treated_counts=counts[1::2].copy(),
        control_counts=counts[0::2].copy(),
        bound=y_max,
    )


def stratum_counts(
    w: npt.ArrayLike, x: npt.ArrayLike, domain_size: int | None = None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(|T_x|, |C_x|)`` for every stratum of the domain."""
    w = np.asarray(w).astype(np.int64)
    x = np.asarray(x).astype(np.int64)
    size = int(domain_size if domain_size is not None else (x.max() + 1 if x.size else 0))
    counts = np.bincount(2 * x + w, minlength=2 * size)
    return counts[1::2], counts[0::2]
