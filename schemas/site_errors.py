"""The errors a site's records can raise, and the redaction that keeps record values out of them.

A :class:`SiteDataError` names columns, rules (the ``_R_*`` texts below), counts and 0-based row
positions only; **never a data value**. pandera's failure cases (which hold the raw values) are
reduced to counts and positions here (:func:`_redact`) before anything else touches them, and the
problems found while converting (:class:`_Collector`) and by pandera are merged per column and
rule (:func:`_merge`). Reading and preparation (``dpate.schemas.site_reading``,
``dpate.schemas.site_preparation``) replace any exception whose text may quote a value by one built here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pandera.pandas as pda

__all__ = ["MAX_ROWS_LISTED", "Problem", "SiteDataError"]

#: How many row positions a problem lists (the count is always complete).
MAX_ROWS_LISTED = 10

Mask = npt.NDArray[np.bool_]

_R_MISSING = "missing or not finite"
_R_NOT_NUMBER = "not a number"
_R_TREATMENT_01 = "not 0/1 (or true/false)"
_R_TREATMENT_LABEL = "not one of the two treatment labels in the spec"
_R_OUTCOME_LABEL = "not one of the outcome labels in the spec"
_R_OUT_OF_BOUNDS = "outside [0, B] after the offset (outcome policy 'reject')"
_R_LEVEL = "not one of the declared levels (and no 'other' level is declared)"
_R_EDGES = "outside the declared bin edges"
_R_NOT_FINITE = "not finite"


@dataclass(frozen=True)
class Problem:
    """One group of failures: a column, the rule broken, how many rows, the first positions."""

    column: str
    rule: str
    count: int
    rows: tuple[int, ...] = ()

    def describe(self) -> str:
        where = ""
        if self.rows:
            more = ", ..." if self.count > len(self.rows) else ""
            where = f" (rows {', '.join(map(str, self.rows))}{more})"
        return f"column {self.column!r}: {self.count} row(s) {self.rule}{where}"


class SiteDataError(ValueError):
    """The site's data does not satisfy the study spec. Names columns, rules, counts, row
    positions (0-based, in file order) and what to do; never a data value."""

    def __init__(self, problems: list[Problem], *, n_rows: int | None = None, hint: str = ""):
        self.problems = list(problems)
        self.n_rows = n_rows
        of = f" of {n_rows} rows" if n_rows is not None else ""
        if self.problems:
            n_problems = len(self.problems)
            lines = [f"site data does not satisfy the study spec ({n_problems} problem(s){of}):"]
        else:
            lines = ["site data could not be used:"]
        lines += [f"  - {p.describe()}" for p in self.problems]
        if self.problems:
            lines.append("(row positions count data rows from 0, in file order, header excluded)")
        lines.append(
            hint
            or "fix the extract, or change the spec's declared levels/bins or its "
            "'missing' / outcome 'policy' settings if the data is right"
        )
        super().__init__("\n".join(lines))

    def __repr__(self) -> str:
        return f"SiteDataError({len(self.problems)} problem(s))"

    def __reduce__(  # picklable (Prefect may serialise exceptions) without extra state
        self,
    ) -> tuple[object, tuple[list[Problem], int | None, str]]:
        return (_rebuild_error, (self.problems, self.n_rows, str(self).rsplit("\n", 1)[-1]))


def _rebuild_error(problems: list[Problem], n_rows: int | None, hint: str) -> SiteDataError:
    return SiteDataError(problems, n_rows=n_rows, hint=hint)


class _Redacted(Exception):
    """Internal: carries a redacted SiteDataError out of an ``except`` block."""


def _missing_columns(missing: list[str]) -> SiteDataError:
    return SiteDataError(
        [],
        hint=f"the data lacks the column(s) {missing} that the study spec names: rename the "
        f"columns in the extract or fix the spec's column mapping",
    )


class _Collector:
    """The problems found while converting, and per column the rows already reported (so a
    value reported here, e.g. missing, is not reported again by a pandera rule)."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.reported: dict[str, Mask] = {}  # column -> rows already reported

    def add(self, column: str, rule: str, mask: Mask) -> None:
        count = int(np.count_nonzero(mask))
        if count:
            rows = tuple(int(i) for i in np.flatnonzero(mask)[:MAX_ROWS_LISTED])
            self.problems.append(Problem(column, rule, count, rows))
            prev = self.reported.get(column)
            self.reported[column] = mask.copy() if prev is None else (prev | mask)


def _redact(
    exc: pda.errors.SchemaErrors,
    positions: npt.NDArray[np.intp] | None,
    reported: dict[str, Mask],
) -> list[Problem]:
    """pandera's failure cases -> (column, rule, count, first positions). The ``failure_case``
    column (raw values) is dropped before anything else touches it."""
    fc = exc.failure_cases
    fc = fc.drop(columns=["failure_case"], errors="ignore")
    out: list[Problem] = []
    for (column, check), group in fc.groupby(["column", "check"], sort=False, dropna=False):
        rule = str(check)
        if rule == "not_nullable":
            rule = _R_MISSING
        elif rule.startswith("dtype("):
            rule = "of the wrong type for this column"
        idx = pd.to_numeric(group["index"], errors="coerce").dropna().to_numpy(dtype=np.int64)
        if positions is not None and idx.size:
            idx = positions[idx]  # back to positions in the file
        if str(column) in reported and idx.size:
            idx = idx[~reported[str(column)][idx]]
            if idx.size == 0:
                continue
        idx = np.sort(idx)
        count = int(idx.size) if idx.size else len(group)
        out.append(Problem(str(column), rule, count, tuple(int(i) for i in idx[:MAX_ROWS_LISTED])))
    return out


def _merge(problems: list[Problem]) -> list[Problem]:
    """One problem per (column, rule): counts added, positions united (first ones kept)."""
    merged: dict[tuple[str, str], Problem] = {}
    for p in problems:
        key = (p.column, p.rule)
        if key in merged:
            q = merged[key]
            rows = tuple(sorted(set(q.rows) | set(p.rows)))[:MAX_ROWS_LISTED]
            merged[key] = Problem(p.column, p.rule, q.count + p.count, rows)
        else:
            merged[key] = p
    return list(merged.values())
