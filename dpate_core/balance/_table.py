"""The balance release and its post-processing (:mod:`dpate_core.balance`).

**The query.** For ``p`` covariates, covariate ``j`` with levels ``l`` (a category, or a numeric
covariate's bin), bands ``b`` (a public function of the stratum, or of the record's covariates
when they are not all strata, fixed before this release's noise, e.g. the bands of a released
propensity model; one band when none is given) and arms ``a``: ``c_j[b, l, a]``, the number of
records of arm ``a`` in band ``b`` whose covariate ``j`` is at level ``l``. Each record is
counted in exactly one cell of each covariate's table, so under replace-one neighbours (one
record's ``W``, ``Y`` and ``X`` may all change) the vector of all ``p`` tables moves by at most
``2 p`` in L1 norm (``p`` cells lose one, ``p`` gain one), and one discrete Laplace vector query
of scale ``2 p / eps_b`` is ``(eps_b, 0)``-DP (:func:`balance_sensitivity`,
:func:`balance_scale`).

**The table** (post-processing of the noisy counts, each clipped at 0): per covariate, the
standardized mean difference ``SMD = (m_t - m_c) / sqrt((s2_t + s2_c) / 2)`` of its public level
values (a numeric covariate with finite bins: each bin's midpoint; a categorical one, or a
numeric one with an open-ended bin: one row per level, the level's indicator, ``m_a`` its share
in arm ``a`` and ``s2_a = m_a (1 - m_a)``), **before** (over all records) and **within bands**
(``sum_b w_b (m_bt - m_bc) / sqrt((s2_t + s2_c) / 2)`` over the bands with both noisy arms
positive, ``w_b`` their noisy sizes' shares, the pooled sd the one before, as Rosenbaum and
Rubin (1984) compare subclasses). When the estimator's strata are the covariates'
cross-classification (the adjusted estimator, the matching ones), every covariate is constant
within a stratum, so the within-strata SMD is 0 by construction and nothing is released for it
(``within = "by construction"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpate_core.noise import Rng, integer_laplace_vector
from dpate_core.privacy import Number, PrivacyParams, exact

__all__ = [
    "BALANCE_SCHEMA",
    "BalanceLayout",
    "BalancePlan",
    "BalanceRow",
    "BalanceTable",
    "balance_scale",
    "balance_sensitivity",
    "balance_table",
    "dp_balance",
    "level_counts",
    "plan_balance",
    "smd_noise_sd",
]

BALANCE_SCHEMA: Literal["dpate.balance"] = "dpate.balance"
#: how the within-strata column is obtained: released from band counts, 0 by construction (the
#: strata fix every covariate), or not applicable (an estimator that does not stratify)
Within = Literal["released", "by construction", "none"]


@dataclass(frozen=True)
class BalanceLayout:
    """The public description of the covariates (the study spec's, in its order: the stratum id
    is their mixed-radix number, the first most significant). ``values[j]``: the public value
    of each of covariate ``j``'s levels (a numeric bin's midpoint), or None for indicator rows
    (a category, or a numeric covariate with an open-ended bin)."""

    names: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    values: tuple[tuple[float, ...] | None, ...]

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a balance table needs at least one covariate")
        if not len(self.names) == len(self.labels) == len(self.values):
            raise ValueError("names, labels and values must give one entry per covariate")
        for name, lab, val in zip(self.names, self.labels, self.values, strict=True):
            if len(lab) < 1 or (val is not None and len(val) != len(lab)):
                raise ValueError(f"covariate {name!r}: one label (and value) per level")
            if val is not None and not all(math.isfinite(v) for v in val):
                raise ValueError(f"covariate {name!r}: level values must be finite (midpoints)")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(lab) for lab in self.labels)

    @property
    def domain_size(self) -> int:
        return math.prod(self.sizes)

    def levels_of(self) -> list[npt.NDArray[np.int64]]:
        """Per covariate, the level of every stratum ``x`` (mixed radix, first most
        significant)."""
        x = np.arange(self.domain_size, dtype=np.int64)
        out: list[npt.NDArray[np.int64]] = []
        for j in range(len(self.sizes)):
            inner = math.prod(self.sizes[j + 1 :])
            out.append((x // inner) % self.sizes[j])
        return out


def balance_sensitivity(layout: BalanceLayout) -> int:
    """The L1 sensitivity of the vector of all covariates' level-by-arm(-by-band) counts under
    replace-one neighbours: ``2 p`` (each record is in one cell of each of the ``p`` tables)."""
    return 2 * len(layout.names)


def balance_scale(layout: BalanceLayout, epsilon: Number) -> float:
    """The discrete Laplace scale ``2 p / eps_b`` (exact, rounded up)."""
    return PrivacyParams(exact(epsilon, "epsilon"), Fraction(0)).laplace_scale(
        balance_sensitivity(layout)
    )


def level_counts(
    cell_counts: npt.ArrayLike,
    layout: BalanceLayout,
    bands: npt.ArrayLike | None = None,
    n_bands: int = 1,
) -> npt.NDArray[np.int64]:
    """The exact query: for each covariate ``j`` (in order), the counts ``c_j[b, l, a]``
    flattened (band, then level, then arm: control 0, treated 1), from the per-cell counts
    ``g = 2 x + w``. ``bands``: the public band of every stratum (None: one band)."""
    counts = np.asarray(cell_counts, dtype=np.int64).reshape(layout.domain_size, 2)
    band = (
        np.zeros(layout.domain_size, dtype=np.int64)
        if bands is None
        else np.asarray(bands, dtype=np.int64)
    )
    if band.shape != (layout.domain_size,) or band.min() < 0 or band.max() >= n_bands:
        raise ValueError(f"bands must give every stratum a band in [0, {n_bands})")
    parts = []
    for level, size in zip(layout.levels_of(), layout.sizes, strict=True):
        idx = band * size + level
        table = np.zeros((n_bands * size, 2), dtype=np.int64)
        np.add.at(table, idx, counts)
        parts.append(table.ravel())
    return np.concatenate(parts)


@dataclass(frozen=True)
class BalancePlan:
    """The balance release before its one draw: the exact counts (private), their public noise
    scale and what the post-processing reads."""

    layout: BalanceLayout
    epsilon: Fraction
    counts: npt.NDArray[np.int64] = field(repr=False)
    scale: float
    n_bands: int
    within: Within

    def draw(self, rng: Rng = None) -> BalanceTable:
        """The one draw (secure discrete Laplace when ``rng`` is None) and its table."""
        noisy = integer_laplace_vector(self.counts.astype(np.float64), self.scale, rng)
        return balance_table(
            noisy, self.layout, self.scale, self.epsilon, self.n_bands, self.within
        )


def plan_balance(
    cell_counts: npt.ArrayLike,
    layout: BalanceLayout,
    epsilon: Number,
    *,
    bands: npt.ArrayLike | None = None,
    n_bands: int = 1,
    within: Within = "none",
) -> BalancePlan:
    """The balance release of a site's per-cell counts at ``epsilon`` (pure DP). With ``bands``
    (a public band per stratum, e.g. propensity bands) the within-bands SMD is released
    (``within = "released"``); without, ``within`` says whether it is 0 by construction."""
    eps, within = _checked(epsilon, bands is not None, within)
    counts = level_counts(cell_counts, layout, bands, n_bands)
    return BalancePlan(
        layout, eps, counts, balance_scale(layout, eps), n_bands if bands is not None else 1, within
    )


def _checked(epsilon: Number, banded: bool, within: Within) -> tuple[Fraction, Within]:
    eps = exact(epsilon, "epsilon")
    if not eps > 0:
        raise ValueError(f"the balance epsilon ({eps}) must be positive")
    if banded:
        return eps, "released"
    if within == "released":
        raise ValueError("a released within-bands SMD needs the bands")
    return eps, within


def dp_balance(
    cell_counts: npt.ArrayLike,
    layout: BalanceLayout,
    epsilon: Number,
    *,
    bands: npt.ArrayLike | None = None,
    n_bands: int = 1,
    within: Within = "none",
    rng: Rng = None,
) -> BalanceTable:
    """Plan and draw once (:func:`plan_balance`)."""
    plan = plan_balance(cell_counts, layout, epsilon, bands=bands, n_bands=n_bands, within=within)
    return plan.draw(rng)


@dataclass(frozen=True)
class BalanceRow:
    """One row: a covariate (``level`` None: its mean over the level values) or one level's
    indicator, with its SMD before and within strata (None: not released or undefined)."""

    covariate: str
    level: str | None
    mean_treated: float | None
    mean_control: float | None
    smd_before: float | None
    smd_within: float | None


@dataclass(frozen=True)
class BalanceTable:
    """A site's DP balance table (post-processing of one noisy count vector)."""

    epsilon: Fraction
    scale: float
    within: Within
    rows: tuple[BalanceRow, ...]
    #: the number of public bands the within column compares arms in (``within = "released"``)
    bands: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The published form (exact epsilon as a string; NaN never: undefined is null;
        ``bands`` only with a released within column)."""
        banded = {} if self.within != "released" else {"bands": self.bands}
        return {
            "schema": BALANCE_SCHEMA,
            "epsilon": str(self.epsilon),
            "noise_scale": self.scale,
            "sensitivity": "2 p (replace-one)",
            "within": self.within,
            **banded,
            "rows": [
                {
                    "covariate": r.covariate,
                    "level": r.level,
                    "mean_treated": r.mean_treated,
                    "mean_control": r.mean_control,
                    "smd_before": r.smd_before,
                    "smd_within": r.smd_within,
                }
                for r in self.rows
            ],
        }


def smd_noise_sd(
    values: npt.ArrayLike,
    mean_treated: float,
    mean_control: float,
    pooled_var: float,
    scale: float,
    n: int,
) -> float | None:
    """The least noise sd, by the delta method, of a table row's SMD before at a site of ``n``
    records, from public values (post-processing): the row's level ``values`` ``x_l`` (a level's
    indicator: 1 at the level, 0 at the others; a numeric covariate's bins' midpoints), its arm
    means ``m_a``, the pooled variance ``s^2`` its SMD divides by, and the table's discrete
    Laplace ``scale``. An arm mean is ``m_a = sum_l c_al x_l / n_a``, so the counts' noise ``e``
    (variance ``v`` each) moves it by ``sum_l (x_l - m_a) e_l / n_a``, and ``Var SMD = (A /
    n_t^2 + C / n_c^2) / s^2`` with ``A = v sum_l (x_l - m_t)^2`` and ``C`` likewise; its least
    over the unknown arm split ``n_t + n_c = n`` (Lagrange: ``n_a`` proportional to ``A^(1/3)``)
    is ``(A^(1/3) + C^(1/3))^3 / n^2``. The pooled variance's own noise is left out. None when
    ``n``, ``scale`` or ``pooled_var`` is not positive.

    >>> round(smd_noise_sd([1.0, 0.0], 0.5, 0.5, 0.25, 10.0, 1000), 3)  # a level held by half
    0.057
    """
    if not (n > 0 and scale > 0 and pooled_var > 0):
        return None
    x = np.asarray(values, dtype=np.float64)
    q = math.exp(-1.0 / scale)
    v = 2.0 * q / (1.0 - q) ** 2  # the discrete Laplace variance at this scale
    a, c = (v * math.fsum((x - m) ** 2) for m in (mean_treated, mean_control))
    return math.sqrt((a ** (1 / 3) + c ** (1 / 3)) ** 3 / (n * n) / pooled_var)


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _smd(diff: float, var_t: float, var_c: float) -> float:
    pooled = math.sqrt(max((var_t + var_c) / 2.0, 0.0))
    if pooled > 0:
        return diff / pooled
    return 0.0 if diff == 0 else math.nan


def balance_table(
    noisy: npt.ArrayLike,
    layout: BalanceLayout,
    scale: float,
    epsilon: Number,
    n_bands: int = 1,
    within: Within = "none",
) -> BalanceTable:
    """The SMD table from the noisy counts of :func:`level_counts` (post-processing: each count
    clipped at 0; see the module docstring for the formulas)."""
    v = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)
    rows: list[BalanceRow] = []
    start = 0
    for name, labels, values in zip(layout.names, layout.labels, layout.values, strict=True):
        size = len(labels)
        table = v[start : start + n_bands * size * 2].reshape(n_bands, size, 2)
        start += n_bands * size * 2
        if values is None:
            for lev, label in enumerate(labels):
                ind = np.zeros(size)
                ind[lev] = 1.0
                rows.append(_row(name, str(label), table, ind, within, indicator=True))
        else:
            rows.append(_row(name, None, table, np.asarray(values), within, indicator=False))
    bands = n_bands if within == "released" else None
    return BalanceTable(exact(epsilon, "epsilon"), float(scale), within, tuple(rows), bands)


def _row(
    name: str,
    level: str | None,
    table: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    within: Within,
    *,
    indicator: bool,
) -> BalanceRow:
    total = table.sum(axis=0)  # (levels, arms)
    means, variances = [], []
    for arm in (1, 0):
        n = total[:, arm].sum()
        if n <= 0:
            means.append(math.nan)
            variances.append(math.nan)
            continue
        m = float((total[:, arm] * values).sum() / n)
        means.append(m)
        if indicator:
            variances.append(m * (1.0 - m))
        else:
            variances.append(float((total[:, arm] * (values - m) ** 2).sum() / n))
    (m_t, m_c), (s_t, s_c) = means, variances
    before = _smd(m_t - m_c, s_t, s_c) if math.isfinite(m_t - m_c) else math.nan
    smd_within: float | None = None
    if within == "by construction":
        smd_within = 0.0
    elif within == "released":
        diffs, weights = [], []
        for band in table:
            nt, nc = band[:, 1].sum(), band[:, 0].sum()
            if nt > 0 and nc > 0:
                diffs.append((band[:, 1] * values).sum() / nt - (band[:, 0] * values).sum() / nc)
                weights.append(nt + nc)
        if weights and math.isfinite(s_t + s_c):
            w = np.asarray(weights) / sum(weights)
            smd_within = _num(_smd(float((w * np.asarray(diffs)).sum()), s_t, s_c))
    return BalanceRow(name, level, _num(m_t), _num(m_c), _num(before), smd_within)
