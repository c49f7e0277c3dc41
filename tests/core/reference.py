"""Independent reference implementations the core is tested against.

Nothing here imports :mod:`dpate_core`: each function is written from the paper (or
docs/explanation/corrections.md) in
the most literal form available, slow and obvious, so that agreement with the compiled and
vectorised code means something.

- :func:`literal_matching`: Algorithm 1 as printed (a loop over ``x``, then over ``T_x`` and
  ``C_x``), with ``L_i`` counted by following the matches and the appendix variance estimate.
- :func:`batch_matching`: the same estimator for a whole batch of small datasets at once (numpy,
  O(N^2) comparisons per dataset), used to enumerate every dataset of a small domain.
- :func:`brute_force_local_sensitivity`: ``LS(D)`` by enumerating every replace-one neighbour.
- :func:`stratified_difference_in_means`: the closed form the matching estimator must agree with
  in the cases named in ``test_estimators.py``.
- :func:`paper_smooth_sensitivity`: eq. (smooth-sens) with the appendix's ``R_x^(k)`` *as printed*
  (correction 1 shows it is not beta-smooth): the wrong implementation the checkers must fail.
- :func:`theorem1_local_bound` and the appendix's variance terms (correction 3 reading).
- :func:`count_space_smooth`: ``max_k e^(-k beta) max_{ball_k} f`` computed exactly by
  breadth-first search over every count vector of a small domain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

# ---------------------------------------------------------------------------------------------
# Algorithm 1, literally


def literal_matching(w: Sequence[int], y: Sequence[float], x: Sequence[int]):
    """Algorithm 1 (Non-private Matching at site) as printed, plus ``L_i`` and the appendix's
    ``V_hat = 1/(2N^2) sum_x {sum_{T_x} (1+L_i)^2 (Yhat_i(1)-Yhat_i(0))^2 + sum_{C_x} ...}``.

    Returns ``(tau_hat, L, V_hat)`` with ``L[i]`` the number of records that use ``Y_i`` as their
    imputed value (the proof of Theorem 1).
    """
    w = [int(v) for v in w]
    y = [float(v) for v in y]
    x = [int(v) for v in x]
    n = len(w)
    y1 = [0.0] * n  # placeholders Yhat_i(1)
    y0 = [0.0] * n  # placeholders Yhat_i(0)
    L = [0] * n
    for stratum in sorted(set(x)):
        T = [i for i in range(n) if w[i] == 1 and x[i] == stratum]
        C = [i for i in range(n) if w[i] == 0 and x[i] == stratum]
        if len(T) == 0 or len(C) == 0:  # when there is no match
            for i in T + C:
                y1[i], y0[i] = y[i], y[i]
        else:
            for j in range(len(T)):
                i = T[j]
                m = C[j % len(C)]
                L[m] += 1
                y1[i], y0[i] = y[i], y[m]
            for j in range(len(C)):
                i = C[j]
                m = T[j % len(T)]
                L[m] += 1
                y1[i], y0[i] = y[m], y[i]
    tau = sum(y1[i] - y0[i] for i in range(n)) / n
    var = sum((1 + L[i]) ** 2 * (y1[i] - y0[i]) ** 2 for i in range(n)) / (2 * n * n)
    return tau, np.array(L, dtype=np.int64), var


def batch_matching(W: np.ndarray, Y: np.ndarray, X: np.ndarray):
    """Algorithm 1 for a batch of datasets of one size ``N``: arrays of shape ``(n_datasets, N)``.

    For each record: its rank ``r`` among the earlier records of its (stratum, arm) group, the
    size ``opp`` of the opposite arm of its stratum, its partner (the
    record of the opposite group whose rank is ``r mod opp``) and ``L_i`` (how many records of the
    opposite group have it as partner). Returns ``(tau_hat, V_hat)``, each of shape
    ``(n_datasets,)``. O(N^2) per dataset: for the small N of exhaustive enumeration only.
    """
    W = np.asarray(W, dtype=np.int64)
    Y = np.asarray(Y, dtype=np.float64)
    X = np.asarray(X, dtype=np.int64)
    n = W.shape[1]
    same_x = X[:, :, None] == X[:, None, :]  # [d, i, j]
    same_w = W[:, :, None] == W[:, None, :]
    same_g = same_x & same_w
    opp_g = same_x & ~same_w
    earlier = np.tri(n, n, -1, dtype=bool)[None]  # earlier[0, i, j]: j < i
    rank = (same_g & earlier).sum(axis=2)  # rank of i inside its group
    opp = opp_g.sum(axis=2)
    safe_opp = np.maximum(opp, 1)
    target = rank % safe_opp  # the rank of i's partner in the opposite group
    # is_partner[d, i, j]: j is i's match
    is_partner = opp_g & (rank[:, None, :] == target[:, :, None])
    partner_y = (is_partner * Y[:, None, :]).sum(axis=2)
    L = is_partner.sum(axis=1)  # how many records have j as partner
    matched = opp > 0
    d = np.where(matched, np.where(W == 1, Y - partner_y, partner_y - Y), 0.0)
    tau = d.sum(axis=1) / n
    var = ((1.0 + L) ** 2 * d**2).sum(axis=1) / (2.0 * n * n)
    return tau, var


def brute_force_local_sensitivity(
    w, y, x, n_strata: int, y_grid: Sequence[float], stat: Callable | None = None
) -> float:
    """``LS(D) = max |f(D) - f(D')|`` over every ``D'`` that replaces one record of ``D`` by any
    ``(W, Y, X)`` of the domain ``{0, 1} x y_grid x range(n_strata)``.

    ``stat(w, y, x)`` defaults to the literal ``tau_hat``.
    """
    if stat is None:

        def stat(a, b, c):
            return literal_matching(a, b, c)[0]

    w, y, x = list(w), list(y), list(x)
    base = stat(w, y, x)
    best = 0.0
    for i in range(len(w)):
        for wv, yv, xv in itertools.product((0, 1), y_grid, range(n_strata)):
            w2, y2, x2 = w.copy(), y.copy(), x.copy()
            w2[i], y2[i], x2[i] = wv, yv, xv
            best = max(best, abs(stat(w2, y2, x2) - base))
    return best


def stratified_difference_in_means(w, y, x) -> float:
    """``(1/N) sum_{x: both arms} N_x (mean(Y | T_x) - mean(Y | C_x))``; strata with an empty arm
    contribute 0, as in Algorithm 1."""
    w = np.asarray(w)
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x)
    total = 0.0
    for s in np.unique(x):
        t = y[(x == s) & (w == 1)]
        c = y[(x == s) & (w == 0)]
        if t.size and c.size:
            total += (t.size + c.size) * (t.mean() - c.mean())
    return total / w.size


# ---------------------------------------------------------------------------------------------
# Theorem 1 and the paper's (wrong) smooth sensitivity


def theorem1_R(t: int, c: int) -> int:
    """``R_x`` of Theorem 1 for one present stratum (0 for an absent one)."""
    if t == 0 and c == 0:
        return 0
    if t == 0 or c == 0:
        return max(t, c)
    return max(math.ceil((1 + c) / t), math.ceil((1 + t) / c))


def theorem1_local_bound(t: Sequence[int], c: Sequence[int], n: int, bound: float) -> float:
    """Theorem 1: ``LS(D) <= (4B/N) (1 + max_x R_x(D))``."""
    return 4.0 * bound / n * (1 + max(theorem1_R(a, b) for a, b in zip(t, c, strict=True)))


def paper_R_k(t: int, c: int, k: int) -> int:
    """The appendix's ``R_x^(k)`` exactly as printed (the wrong one: correction 1)."""
    if t >= c and k >= c:
        return t + k
    if t >= c:
        return math.ceil((t + k + 1) / (c - k))
    if k >= t:
        return c + k
    return math.ceil((c + k + 1) / (t - k))


def paper_smooth_sensitivity(
    t: Sequence[int], c: Sequence[int], n: int, bound: float, beta: float, domain_size=None
) -> float:
    """Eq. (smooth-sens) literally: ``max_{k=0..N} e^(-k beta) (4B/N)(1 + max_x R_x^(k))`` over
    the present strata, plus ``R_x^(k) = k`` for absent ones (the appendix's last sentence)."""
    present = [(a, b) for a, b in zip(t, c, strict=True) if a + b > 0]
    has_absent = domain_size is None or domain_size > len(present)
    best = 0.0
    for k in range(n + 1):
        r = max(paper_R_k(a, b, k) for a, b in present)
        if has_absent:
            r = max(r, k)
        best = max(best, math.exp(-k * beta) * 4.0 * bound / n * (1 + r))
    return best


# ---------------------------------------------------------------------------------------------
# The appendix's variance terms (correction 3 reading: the unmatched "(" dropped)


def _cd(a: int, b: int) -> int:
    return -(-a // b)


def paper_var_ls_plus(t: int, c: int) -> int:
    """``LS+_g`` per stratum, in units of ``B^2``."""
    if t == 0 and c == 0:
        return 0
    if t == 0 or c == 0:
        big = max(t, c)
        return (1 + big) ** 2 + 4 * big
    return max(
        2 * t * (1 + _cd(c, t)) ** 2 + 2 * c * (1 + _cd(t + 1, c)) ** 2 + (1 + _cd(c, t + 1)) ** 2,
        2 * c * (1 + _cd(t, c)) ** 2 + 2 * t * (1 + _cd(c + 1, t)) ** 2 + (1 + _cd(t, c + 1)) ** 2,
    )


def paper_var_ls_minus(t: int, c: int) -> int:
    """``LS-_g`` per stratum, in units of ``B^2``."""
    if t == 0 or c == 0:
        return 0
    return max(
        2 * (1 + t) * (1 + _cd(c, t)) ** 2
        + 2 * c * (1 + _cd(t + 1, c)) ** 2
        + (1 + _cd(c, t)) ** 2,
        2 * (1 + c) * (1 + _cd(t, c)) ** 2
        + 2 * t * (1 + _cd(c + 1, t)) ** 2
        + (1 + _cd(t, c)) ** 2,
    )


def paper_var_ls_minus_after_add(t: int, c: int) -> int:
    """``max_{D'' = D + one record} LS-_g(D'')`` per stratum (the appendix's "Therefore"), in units
    of ``B^2``."""
    if t == 0 and c == 0:
        return 0
    if t == 0 or c == 0:
        big = max(t, c)
        return max(
            8 * (1 + big) + 2 * (2 + big) ** 2 + 4,
            4 * (1 + big) ** 2 + 2 * big * (1 + _cd(2, big)) ** 2 + (1 + big) ** 2,
        )
    T, C = t, c
    return max(
        2 * (1 + C) * (1 + _cd(1 + T, C)) ** 2
        + 2 * (1 + T) * (1 + _cd(1 + C, 1 + T)) ** 2
        + (1 + _cd(1 + T, C)) ** 2,
        2 * (2 + T) * (1 + _cd(C, 1 + T)) ** 2
        + 2 * C * (1 + _cd(2 + T, C)) ** 2
        + (1 + _cd(C, 1 + T)) ** 2,
        2 * (1 + T) * (1 + _cd(1 + C, T)) ** 2
        + 2 * (1 + C) * (1 + _cd(1 + T, 1 + C)) ** 2
        + (1 + _cd(1 + C, T)) ** 2,
        2 * (2 + C) * (1 + _cd(T, 1 + C)) ** 2
        + 2 * T * (1 + _cd(2 + C, T)) ** 2
        + (1 + _cd(T, 1 + C)) ** 2,
    )


def direct_ls_minus_after_add(t: int, c: int) -> int:
    """``max`` of :func:`paper_var_ls_minus` over the strata reachable by adding one record."""
    if t == 0 and c == 0:
        return 0
    return max(paper_var_ls_minus(t + 1, c), paper_var_ls_minus(t, c + 1))


# ---------------------------------------------------------------------------------------------
# Exact smooth sensitivity of a count-space function, by breadth-first search


def count_vectors(n: int, cells: int) -> np.ndarray:
    """Every vector of ``cells`` non-negative integers adding up to ``n`` (stars and bars)."""
    out = []
    for bars in itertools.combinations(range(n + cells - 1), cells - 1):
        prev = -1
        v = []
        for b in (*bars, n + cells - 1):
            v.append(b - prev - 1)
            prev = b
        out.append(v)
    return np.array(out, dtype=np.int64)


def count_space_neighbours(vectors: np.ndarray) -> list[np.ndarray]:
    """For each count vector, the indices of the vectors one replacement away (one record moved
    from one cell to another)."""
    index = {tuple(v): i for i, v in enumerate(vectors)}
    cells = vectors.shape[1]
    nbrs = []
    for v in vectors:
        out = []
        for a in range(cells):
            if v[a] == 0:
                continue
            for b in range(cells):
                if b == a:
                    continue
                u = v.copy()
                u[a] -= 1
                u[b] += 1
                out.append(index[tuple(u)])
        nbrs.append(np.array(out, dtype=np.int64))
    return nbrs


def ball_maxima(values: np.ndarray, nbrs: list[np.ndarray], k_max: int) -> np.ndarray:
    """``A[k, i] = max of values over the ball of radius k around vector i`` for ``k <= k_max``."""
    a = [values.astype(np.float64)]
    for _ in range(k_max):
        prev = a[-1]
        a.append(
            np.array([max(prev[i], prev[nb].max(initial=-np.inf)) for i, nb in enumerate(nbrs)])
        )
    return np.array(a)


def smooth_from_ball_maxima(a: np.ndarray, beta: float) -> np.ndarray:
    """``S(D) = max_k e^(-k beta) A[k, D]``."""
    k = np.arange(a.shape[0])[:, None]
    return (np.exp(-beta * k) * a).max(axis=0)


# ---------------------------------------------------------------------------------------------
# Every ordered dataset of a small domain, and exact local / smooth sensitivities over it

Y_GRID = (0.0, 0.5, 1.0)  # {0, B/2, B} with B = 1


def enumerate_datasets(n: int, n_strata: int, chunk: int = 1 << 17):
    """Every ordered dataset of ``n`` records from the domain ``{0,1} x Y_GRID x range(n_strata)``.

    A record is coded ``r = w + 2 (y_index + 3 x)`` in ``range(d)``, ``d = 6 n_strata``; the
    dataset with records ``r_0 .. r_(n-1)`` sits at position ``(r_0, .., r_(n-1))`` of an array of
    shape ``(d,) * n``, so that replacing record ``i`` moves along axis ``i`` only.

    Returns ``(tau, var, cells)``: ``tau_hat`` and ``V_hat`` as arrays of shape ``(d,) * n``
    (from :func:`batch_matching`) and, per dataset in C order, the counts of each cell
    ``2 x + w`` (shape ``(d**n, 2 n_strata)``).
    """
    d = 6 * n_strata
    total = d**n
    code = np.arange(d, dtype=np.int64)
    code_w, code_y, code_x = code % 2, (code // 2) % 3, code // 6
    grid = np.asarray(Y_GRID)
    tau = np.empty(total)
    var = np.empty(total)
    cells = np.empty((total, 2 * n_strata), dtype=np.int8)
    for start in range(0, total, chunk):
        idx = np.arange(start, min(total, start + chunk), dtype=np.int64)
        rec = np.stack([(idx // d ** (n - 1 - i)) % d for i in range(n)], axis=1)
        W, Y, X = code_w[rec], grid[code_y[rec]], code_x[rec]
        tau[idx], var[idx] = batch_matching(W, Y, X)
        g = 2 * X + W
        for cell in range(2 * n_strata):
            cells[idx, cell] = (g == cell).sum(axis=1)
    return tau.reshape((d,) * n), var.reshape((d,) * n), cells


def decode_dataset(index: int, n: int, n_strata: int):
    """``(w, y, x)`` lists of the dataset at C-order position ``index`` of
    :func:`enumerate_datasets`."""
    d = 6 * n_strata
    rec = [(index // d ** (n - 1 - i)) % d for i in range(n)]
    return ([r % 2 for r in rec], [Y_GRID[(r // 2) % 3] for r in rec], [r // 6 for r in rec])


def local_sensitivity_over_axes(f: np.ndarray) -> np.ndarray:
    """``LS(D) = max over replace-one neighbours |f(D) - f(D')|`` for every dataset at once: the
    neighbours of ``D`` that replace record ``i`` are the entries along axis ``i``."""
    out = np.zeros_like(f)
    for axis in range(f.ndim):
        hi = f.max(axis=axis, keepdims=True)
        lo = f.min(axis=axis, keepdims=True)
        np.maximum(out, np.maximum(hi - f, f - lo), out=out)
    return out


def dataset_ball_maxima(a0: np.ndarray, k_max: int) -> list[np.ndarray]:
    """``[A^(0), .., A^(k_max)]`` with ``A^(k)(D) = max of a0 over datasets within k replacements``
    (``A^(k+1)(D) = max over D and its neighbours of A^(k)``)."""
    out = [a0]
    for _ in range(k_max):
        prev = out[-1]
        nxt = prev.copy()
        for axis in range(prev.ndim):
            np.maximum(nxt, prev.max(axis=axis, keepdims=True), out=nxt)
        out.append(nxt)
    return out


def true_smooth_sensitivity(ball: list[np.ndarray], beta: float) -> np.ndarray:
    """``S*(D) = max_k e^(-k beta) A^(k)(D)``; ``k`` up to ``N`` reaches every dataset of size N."""
    best = np.zeros_like(ball[0])
    for k, a in enumerate(ball):
        np.maximum(best, math.exp(-k * beta) * a, out=best)
    return best


# ---------------------------------------------------------------------------------------------
# The monotone per-stratum variance bounds, re-typed from the comments of
# dpate_core/mechanisms/matching/_sensitivity.py


def variance_g(big: int, small: int) -> float:
    """``g(M, m) = 2 M u + 34 M + (u + 2)^2``, ``u = M / m``: claimed ``>= LS+_x`` (units of B^2)."""
    u = big / small
    return 2 * big * u + 34 * big + (u + 2) ** 2


def variance_h(big: int, small: int) -> float:
    """``h(M, m) = 2 M u + 34 M + 3 (u + 2)^2``: claimed ``>= LS-_x`` (units of B^2)."""
    u = big / small
    return 2 * big * u + 34 * big + 3 * (u + 2) ** 2


def variance_plus_term(t: int, c: int) -> float:
    """Per-stratum first term of the variance bound: ``g(M, m)``, ``(1+M)^2 + 4M`` with an empty
    arm, 0 for an absent stratum."""
    big, small = max(t, c), min(t, c)
    if big == 0:
        return 0.0
    if small == 0:
        return float((1 + big) ** 2 + 4 * big)
    return variance_g(big, small)


def variance_minus_term(t: int, c: int) -> float:
    """Per-stratum second term: ``h(M + 1, m)`` (one record added, then removed), ``h(M, 1)`` with
    an empty arm (the added record fills it), 0 for an absent stratum."""
    big, small = max(t, c), min(t, c)
    if big == 0:
        return 0.0
    if small == 0:
        return variance_h(big, 1)
    return variance_h(big + 1, small)


def paper_ate_ls_plus(t: int, c: int) -> int:
    """The proof of Theorem 1: ``LS+_f`` per stratum (one record added), in units of ``B``
    (``f = N tau_hat``)."""
    if t == 0 and c == 0:
        return 0
    return 2 * (1 + max(_cd(c, t + 1), _cd(t, c + 1)))


def paper_ate_ls_minus(t: int, c: int) -> int:
    """The proof of Theorem 1: ``LS-_f`` per stratum (one record removed), in units of ``B``."""
    if t == 0 or c == 0:
        return 0
    return 2 * (1 + max(_cd(c, t), _cd(t, c)))
