"""Non-private estimators: exact matching (Algorithm 1), its variance (appendix), difference in means.

Algorithm 1 matches, within each covariate stratum ``x``, the ``j``-th treated record (in record
order) to control ``C_x[j mod |C_x|]`` and the ``j``-th control to treated ``T_x[j mod |T_x|]``;
strata with an empty arm contribute 0. Everything it needs per record is its *rank* ``j`` inside its
(stratum, arm) group, and the outcomes of the first ``min(|T_x|, |C_x|)`` records of each group (the
only ones anybody is matched to). One compiled pass over the records computes the ranks with a
counter per group (O(N), no sort), a second gathers the partners' outcomes and accumulates
``tau_hat`` and ``V_hat``.

With ``L_i`` the number of records matched to record ``i``, the appendix writes
``tau_hat = (1/N) sum_x [sum_{T_x} (1 + L_i) Y_i - sum_{C_x} (1 + L_i) Y_i]`` and
``V_hat = 1/(2 N^2) sum_i (1 + L_i)^2 (Yhat_i(1) - Yhat_i(0))^2``. For a treated record of rank
``j`` in a stratum with ``T`` treated and ``C`` controls, ``L_i = C // T + [j < C % T]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = [
    "DifferenceInMeans",
    "MatchingResult",
    "MatchingStatistics",
    "difference_in_means",
    "exact_matching",
    "matching_statistics",
    "matching_variance",
    "stratum_counts",
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
    """

    tau: float
    variance: float
    treated_counts: np.ndarray
    control_counts: np.ndarray

    @property
    def n(self) -> int:
        return int(self.treated_counts.sum() + self.control_counts.sum())


@dataclass(frozen=True)
class DifferenceInMeans:
    """``tau = mean(Y | W=1) - mean(Y | W=0)`` and ``variance = s_t^2 / N_t + s_c^2 / N_c``."""

    tau: float
    variance: float
    n_treated: int
    n_control: int


def _as_inputs(w, y, x=None, domain_size: int | None = None):
    w = np.asarray(w)
    y = np.asarray(y, dtype=np.float64)
    if w.ndim != 1 or y.shape != w.shape:
        raise ValueError(f"w and y must be 1-d arrays of one length (got {w.shape} and {y.shape})")
    if w.dtype != np.bool_:
        if not np.issubdtype(w.dtype, np.integer):
            raise ValueError(f"w must be 0/1 integers or booleans (dtype {w.dtype})")
        if w.size and (w.min() < 0 or w.max() > 1):
            raise ValueError("w must hold only 0 and 1")
    w = w.astype(np.int8, copy=False)
    if x is None:
        return w, y
    x = np.asarray(x)
    if x.shape != w.shape or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x must be integer stratum ids of the same length as w (got {x.shape})")
    if x.size and x.min() < 0:
        raise ValueError("stratum ids in x must not be negative")
    top = int(x.max()) + 1 if x.size else 0
    if domain_size is None:
        domain_size = top
    elif top > domain_size:
        raise ValueError(
            f"x holds stratum ids up to {top - 1}, outside the domain of {domain_size} strata: "
            f"discretise with the study's public covariate spec"
        )
    return w, y, x, int(domain_size)


@numba.njit(cache=True, nogil=True)
def _match_kernel(w, y, x, n_strata, want_matches):  # pragma: no cover - compiled
    n = w.shape[0]
    counts = np.zeros(2 * n_strata, np.int64)  # group g = 2 x + w
    for i in range(n):
        counts[2 * x[i] + w[i]] += 1
    # table of the outcomes of the first min(T, C) records of each group: the only match partners
    offsets = np.zeros(2 * n_strata + 1, np.int64)
    for s in range(n_strata):
        keep = min(counts[2 * s], counts[2 * s + 1])
        offsets[2 * s + 1] = offsets[2 * s] + keep
        offsets[2 * s + 2] = offsets[2 * s + 1] + keep
    table = np.empty(offsets[2 * n_strata], np.float64)
    seen = np.zeros(2 * n_strata, np.int64)
    for i in range(n):
        g = 2 * x[i] + w[i]
        r = seen[g]
        seen[g] = r + 1
        if r < offsets[g + 1] - offsets[g]:
            table[offsets[g] + r] = y[i]
    matches = np.zeros(n if want_matches else 0, np.int64)
    seen[:] = 0
    tau_sum = 0.0
    var_sum = 0.0
    for i in range(n):
        wi = w[i]
        g = 2 * x[i] + wi
        other = g + 1 - 2 * wi  # the opposite arm of the same stratum
        r = seen[g]
        seen[g] = r + 1
        own = counts[g]
        opp = counts[other]
        if opp == 0:
            continue  # no match in this stratum: Yhat(1) = Yhat(0) = Y, contributes 0
        partner = table[offsets[other] + r % opp]
        d = y[i] - partner if wi == 1 else partner - y[i]
        L = opp // own + (1 if r < opp % own else 0)
        tau_sum += d
        var_sum += (1.0 + L) * (1.0 + L) * d * d
        if want_matches:
            matches[i] = L
    return tau_sum, var_sum, counts, matches


def _run_matching(w, y, x, domain_size, want_matches):
    w, y, x, size = _as_inputs(w, y, x, domain_size)
    if w.size == 0:
        raise ValueError("matching needs at least one record")
    xi = x.astype(np.int64, copy=False)
    tau_sum, var_sum, counts, matches = _match_kernel(w, y, xi, size, want_matches)
    n = w.size
    return tau_sum / n, var_sum / (2.0 * n * n), counts, matches


def exact_matching(w, y, x) -> MatchingResult:
    """Algorithm 1 (non-private matching at a site): ``tau_hat`` and ``L_i`` per record."""
    tau, _, _, matches = _run_matching(w, y, x, None, True)
    return MatchingResult(tau=float(tau), matches_used=matches)


def matching_variance(w, y, x) -> float:
    """The appendix variance estimate ``V_hat = 1/(2N^2) sum_i (1+L_i)^2 (Yhat_i(1)-Yhat_i(0))^2``."""
    return float(_run_matching(w, y, x, None, False)[1])


def matching_statistics(w, y, x, domain_size: int | None = None) -> MatchingStatistics:
    """``tau_hat``, ``V_hat`` and the per-stratum arm counts in one pass (what a release needs)."""
    tau, var, counts, _ = _run_matching(w, y, x, domain_size, False)
    return MatchingStatistics(
        tau=float(tau),
        variance=float(var),
        treated_counts=counts[1::2].copy(),
        control_counts=counts[0::2].copy(),
    )


def stratum_counts(w, x, domain_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(|T_x|, |C_x|)`` for every stratum of the domain."""
    w = np.asarray(w).astype(np.int64)
    x = np.asarray(x).astype(np.int64)
    size = int(domain_size if domain_size is not None else (x.max() + 1 if x.size else 0))
    counts = np.bincount(2 * x + w, minlength=2 * size)
    return counts[1::2], counts[0::2]


def arm_sums(w, y) -> tuple[int, int, float, float, float, float]:
    """``(N_t, N_c, sum_t Y, sum_c Y, sum_t Y^2, sum_c Y^2)``."""
    w, y = _as_inputs(w, y)
    t = w.astype(bool)
    yt, yc = y[t], y[~t]
    return (
        int(yt.size),
        int(yc.size),
        float(yt.sum()),
        float(yc.sum()),
        float(yt @ yt),
        float(yc @ yc),
    )


def difference_in_means(w, y) -> DifferenceInMeans:
    """Difference in means and its sampling variance ``s_t^2/N_t + s_c^2/N_c``.

    ``s^2 = sum Y^2 / n - (sum Y / n)^2`` as in section 3.1.1 of the paper (the divisor is ``n``,
    matching the private version, which estimates exactly these sums).
    """
    n_t, n_c, s_t, s_c, q_t, q_c = arm_sums(w, y)
    if n_t == 0 or n_c == 0:
        raise ValueError(
            f"difference in means needs both arms (treated {n_t}, control {n_c} records)"
        )
    var_t = q_t / n_t - (s_t / n_t) ** 2
    var_c = q_c / n_c - (s_c / n_c) ** 2
    return DifferenceInMeans(
        tau=s_t / n_t - s_c / n_c,
        variance=max(var_t, 0.0) / n_t + max(var_c, 0.0) / n_c,
        n_treated=n_t,
        n_control=n_c,
    )
