"""What a record's codes mean, and the site's groups decoded from them.

:func:`~._rules.record_codes` gives each spec column and row one small integer, its *code*; the
engine groups the rows by their codes, and :class:`RecordCodes` decodes everything else from the
groups: which rules are broken and how often, the rows kept, the stratum ``x`` and arm ``w`` of
each group. A code is:

- ``>= 0``: a valid value: the treatment's arm (1 treated, 0 control), the outcome's position
  (0 within ``[0, B]`` after the offset, 1 clipped up from below 0, 2 clipped down from above B;
  3 within but not 0 or B, for a binary outcome), a covariate's level or bin index, a numeric
  covariate's position against its public bounds when it has no bins (0 within, 1 clipped up, 2
  clipped down: its value, clipped, is the column ``_z<i>``, read on the records path only);
- :data:`MISSING`: absent, or not finite (``NaN``; an infinite outcome; an infinite covariate
  value outside an open-ended bin): ``missing = "reject"`` reports it, ``"drop"`` drops the row;
- :data:`NOT_ALLOWED`: treatment not 0/1 (or not one of its two labels), a level not declared
  (without ``other``);
- :data:`OUTSIDE`: the outcome outside ``[0, B]`` after the offset (``policy = "reject"``), a
  number outside the bin edges, or outside a covariate's bounds (its ``policy = "reject"``);
- :data:`NOT_NUMBER`: present but not a number (numbers read as text are converted), or not one
  of the outcome's ``labels``: reported whatever the missing policy;
- :data:`MAPPED`: a categorical value not declared, mapped to the covariate's ``other`` level.

A code is kept as :class:`Branches` (a CASE not yet written), so the group key can be written as
a sum of CASEs that yield each code already placed in its digit (:meth:`RecordCodes.key_expr`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "MAPPED",
    "MISSING",
    "NOT_ALLOWED",
    "NOT_NUMBER",
    "OUTSIDE",
    "Branches",
    "ColumnCodes",
    "OutcomeTerms",
    "RecordCodes",
]

MISSING, NOT_ALLOWED, OUTSIDE, NOT_NUMBER, MAPPED = -2, -1, -3, -4, -6
#: added to a code to make it non-negative (the smallest code is MAPPED)
SHIFT = 6


@dataclass(frozen=True)
class ColumnCodes:
    """What one column's codes mean: its name, the rule each problem code stands for, and (a
    categorical covariate with ``other``) the index a :data:`MAPPED` value counts as."""

    column: str
    rules: dict[int, str]
    other: int | None = None
    #: a numeric covariate with public bounds and no bins: codes 0, 1, 2 (within, clipped up,
    #: clipped down), no stratum index
    bounded: bool = False


@dataclass(frozen=True)
class OutcomeTerms:
    """The outcome's expressions a code is decided by: ``value`` (the number, null where absent
    or not a number), ``v = value - offset``, ``bad`` (present but not a number; None when no
    row can be), and the constants 0, ``B`` and the largest finite double."""

    v: Any
    value: Any
    bad: Any
    zero: Any
    bound: Any
    big: Any
    binary: bool
    reject: bool


@dataclass
class RecordCodes:
    """The spec's rules over a site's table (see the module docstring): ``table`` is the site's
    rows with a code column ``_k<i>`` per spec column (:attr:`columns`, in the spec's order:
    treatment, outcome, covariates) and ``_y``, the outcome a release uses (``Y - offset``,
    clipped under ``policy = "clip"``; meaningful where the outcome's code is valid)."""

    table: Any
    columns: list[ColumnCodes]
    sizes: list[int]
    reject: bool
    #: the site's table the codes are computed over, each column's code unbuilt, the outcome
    #: used (``_y``) and the outcome's tests, as expressions over ``base``
    base: Any = None
    branches: list[Branches] = field(default_factory=list)
    used: Any = None
    outcome: OutcomeTerms | None = None

    @property
    def keys(self) -> list[str]:
        return [f"_k{i}" for i in range(len(self.columns))]

    @property
    def radices(self) -> list[int]:
        """How many values each column's code takes (its valid values and the problem codes,
        shifted by :data:`SHIFT` to be non-negative)."""
        # treatment 0/1; outcome 0..3; covariates' indices (a bounded one: 0..2)
        top = [
            2,
            4,
            *(3 if c.bounded else s for c, s in zip(self.columns[2:], self.sizes, strict=True)),
        ]
        return [t + SHIFT for t in top]

    @property
    def values(self) -> list[str]:
        """The value columns ``_z<i>`` of the covariates with bounds and no bins, in spec order."""
        return [f"_z{j}" for j, c in enumerate(self.columns) if c.bounded]

    def key(self, table: Any) -> Any | None:
        """All the codes as one integer (a mixed-radix number of the shifted codes, so a
        ``GROUP BY`` hashes one column), or None when it would not fit 62 bits."""
        if math.prod(self.radices) >= 1 << 62:
            return None
        key: Any = None
        for name, radix in zip(self.keys, self.radices, strict=True):
            code = table[name].cast("int64") + SHIFT
            key = code if key is None else key * radix + code
        return key

    def key_expr(self, *, outcome: bool = True) -> Any | None:
        """:meth:`key` over :attr:`base` with each column's CASE yielding its code already shifted
        and scaled into its digit (a sum of a few CASEs of integer constants: no cast or
        arithmetic per code); ``outcome=False`` leaves the outcome's digit 0 (its codes then
        counted per group, :meth:`outcome_counts`). None when the key would not fit 62 bits."""
        if math.prod(self.radices) >= 1 << 62:
            return None
        key: Any = None
        scale = 1
        for j in range(len(self.columns) - 1, -1, -1):
            if j != 1 or outcome:
                digit = self.branches[j].build(lambda c, m=scale: (c + SHIFT) * m)
                key = digit if key is None else key + digit
            scale *= self.radices[j]
        return key

    def outcome_counts(self) -> dict[str, Any]:
        """Per-group counts that stand for the outcome's codes when its digit is left out of the
        key (:meth:`key_expr`), each a ``count(*) FILTER (...)`` of a few comparisons: within
        ``[0, B]`` (and, for a binary outcome, exactly 0 or B), below 0 and above B (finite),
        and not a number; the rest of a group are missing (:meth:`expand`)."""
        assert self.outcome is not None and self.base is not None
        o, t = self.outcome, self.base
        counts = {
            "_yin": t.count(where=(o.v >= o.zero) & (o.v <= o.bound)),
            "_ylow": t.count(where=(o.v < o.zero) & (o.value >= -o.big)),
            "_yhigh": t.count(where=(o.v > o.bound) & (o.value <= o.big)),
        }
        if o.binary:
            counts["_yedge"] = t.count(where=(o.v == o.zero) | (o.v == o.bound))
        if o.bad is not None:
            counts["_ybad"] = t.count(where=o.bad)
        return counts

    def expand(
        self, keys: np.ndarray, n: np.ndarray, counts: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The groups of a key without the outcome's digit (``keys``: their codes, ``n``: their
        sizes, ``counts``: :meth:`outcome_counts`) as groups by every code, the outcome's
        included: ``(keys, n, group, exact)``, ``group`` the source group of each, ``exact``
        whether no outcome is missing or not a number (then a source group's sums are its
        rows' sums, with its outcome clipped)."""
        assert self.outcome is not None
        o = self.outcome
        within = counts["_yin"]
        edge = counts.get("_yedge", within)
        bad = counts.get("_ybad", np.zeros_like(n))
        below, above = (OUTSIDE, OUTSIDE) if o.reject else (1, 2)
        parts = [
            (0, edge),
            (3, within - edge),
            (below, counts["_ylow"]),
            (above, counts["_yhigh"]),
            (NOT_NUMBER, bad),
            (MISSING, n - within - counts["_ylow"] - counts["_yhigh"] - bad),
        ]
        out_keys, out_n, group = [], [], []
        for code, count in parts:
            rows = np.flatnonzero(count > 0)
            k = keys[rows].copy()
            k[:, 1] = code
            out_keys.append(k)
            out_n.append(count[rows])
            group.append(rows)
        exact = not (bad.any() or parts[-1][1].any())
        return np.concatenate(out_keys), np.concatenate(out_n), np.concatenate(group), exact

    def codes_of(self, keys: np.ndarray) -> np.ndarray:
        """The codes (a column per spec column) of the integers :meth:`key` made."""
        out = np.empty((keys.size, len(self.columns)), dtype=np.int64)
        rest = keys.astype(np.int64)
        for j in range(len(self.columns) - 1, -1, -1):
            rest, out[:, j] = np.divmod(rest, self.radices[j])
        out -= SHIFT
        return out

    def kept(self, codes: np.ndarray) -> np.ndarray:
        """Which rows (one per row of ``codes``, a column per spec column) a release uses."""
        if self.reject:
            return np.ones(codes.shape[0], dtype=bool)
        kept: np.ndarray = ~(codes == MISSING).any(axis=1)
        return kept

    def problems(self, codes: np.ndarray) -> list[tuple[int, str, int, np.ndarray]]:
        """``(column index, rule, code, rows)`` of every rule broken by some row of ``codes``, in
        the order messages list them (the spec's columns; conversions, missing, rules)."""
        kept = self.kept(codes)
        out = []
        for j, col in enumerate(self.columns):
            for code in (NOT_NUMBER, MISSING, NOT_ALLOWED, OUTSIDE):
                rule = col.rules.get(code)
                if rule is None or (code == MISSING and not self.reject):
                    continue
                rows = codes[:, j] == code
                if code in (NOT_ALLOWED, OUTSIDE):
                    rows &= kept
                if rows.any():
                    out.append((j, rule, code, rows))
        return out

    def strata(self, codes: np.ndarray) -> np.ndarray:
        """The stratum id of each row of valid ``codes``: the covariates' indices (a
        :data:`MAPPED` value at its ``other`` level) as a mixed-radix number."""
        x = np.zeros(codes.shape[0], dtype=np.int64)
        for j, (col, size) in enumerate(zip(self.columns[2:], self.sizes, strict=True), start=2):
            if col.bounded:  # no strata (size 1)
                continue
            index = codes[:, j].astype(np.int64)
            if col.other is not None:
                index = np.where(index == MAPPED, col.other, index)
            x = x * size + index
        return x

    def stratum_expr(self, table: Any) -> Any:
        """:meth:`strata` as an expression over ``table``'s code columns (valid rows)."""
        import ibis

        x: Any = ibis.literal(0).cast("int64")
        for j, (col, size) in enumerate(zip(self.columns[2:], self.sizes, strict=True), start=2):
            if col.bounded:  # no strata (size 1)
                continue
            index = table[f"_k{j}"].cast("int64")
            if col.other is not None:
                index = (index == MAPPED).ifelse(col.other, index)
            x = x * size + index
        return x


@dataclass(frozen=True)
class Branches:
    """A code as a CASE before it is written: ``cases`` are ``(condition, value)`` pairs tested
    in order, ``else_`` the value of the rows left; a value is a code (an ``int``) or a nested
    :class:`Branches`, tested only on the rows that reach it. Kept unbuilt so the same tests can
    yield the codes themselves (:meth:`build`) or, in :meth:`RecordCodes.key_expr`, each code
    already shifted and scaled into its digit of the group key (no arithmetic per row)."""

    cases: tuple[tuple[Any, Any], ...]
    else_: Any

    def build(self, value: Any = None) -> Any:
        """The CASE, each code ``c`` written as ``value(c)`` (default: ``c`` itself; with
        ``value``, 64-bit integer constants)."""
        import ibis

        def lit(c: Any) -> Any:
            if isinstance(c, Branches):
                return c.build(value)
            if value is None:
                return ibis.literal(c)
            return ibis.literal(value(c), type="int64")

        if not self.cases:
            return lit(self.else_)
        return ibis.cases(*((cond, lit(v)) for cond, v in self.cases), else_=lit(self.else_))
