"""The errors a site's records can raise: columns, rules, counts and row positions, never a value.

A :class:`SiteDataError` names columns, the rules they break (the ``R_*`` texts below), how many
rows break each rule and the first row positions (0-based, in the source's order); **never a data
value**. The rules are evaluated inside the engine (:mod:`._rules`), so what comes back is counts
and positions only; an engine's own error text, which may quote a value, is replaced by one built
from its type (:mod:`._redaction`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpate.errors import DpateError, ExitCode

__all__ = ["MAX_ROWS_LISTED", "Problem", "SiteDataError"]

#: How many row positions a problem lists (the count is always complete).
MAX_ROWS_LISTED = 10

R_MISSING = "missing or not finite"
R_MISSING_REJECTED = R_MISSING + " (study policy missing = 'reject')"
R_NOT_NUMBER = "not a number"
R_TREATMENT_01 = "not 0/1 (or true/false)"
R_TREATMENT_LABEL = "not one of the two treatment labels in the spec"
R_OUTCOME_LABEL = "not one of the outcome labels in the spec"
R_OUT_OF_BOUNDS = "outside [0, B] after the offset (outcome policy 'reject')"
R_LEVEL = "not one of the declared levels (and no 'other' level is declared)"
R_EDGES = "outside the declared bin edges"
R_COVARIATE_BOUNDS = "outside the declared lower/upper bounds (covariate policy 'reject')"

#: The order a column's problems are listed in: conversions first, then the spec's rules.
RULE_ORDER = (
    R_NOT_NUMBER,
    R_OUTCOME_LABEL,
    R_MISSING_REJECTED,
    R_TREATMENT_01,
    R_TREATMENT_LABEL,
    R_OUT_OF_BOUNDS,
    R_LEVEL,
    R_EDGES,
    R_COVARIATE_BOUNDS,
)


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


class SiteDataError(DpateError, ValueError):
    """The site's data does not satisfy the study spec. Names columns, rules, counts, row
    positions (0-based, in the source's order) and what to do; never a data value."""

    exit_code = ExitCode.SITE_DATA
    cause = "invalid site data"

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


def missing_columns(missing: list[str]) -> SiteDataError:
    """The error for a source that lacks columns the spec names (names only)."""
    return SiteDataError(
        [],
        hint=f"the data lacks the column(s) {missing} that the study spec names: rename the "
        f"columns in the extract or fix the spec's column mapping",
    )
