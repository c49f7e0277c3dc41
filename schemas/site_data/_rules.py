"""The study spec's rules and conversions as Ibis expressions, evaluated where the data lives.

:func:`record_rules` turns the spec's public declarations into expressions over a site's table:
for every column the rows that break each rule (a boolean per rule), the rows where the value is
missing, and the converted values a release uses: ``w`` (0/1), ``y`` (``Y - offset``, clipped to
``[0, B]`` under ``policy = "clip"``) and the stratum id ``x`` (the mixed-radix number of the
covariates' level and bin indices, first covariate most significant). Everything they compare
with comes from the spec; nothing is learned from the data.

The rules, per column (each row is reported at most once per column: the first rule it breaks):

1. a conversion: a value present but not a number (numeric columns, numbers read as text are
   converted), or not one of the outcome's ``labels``: reported whatever the missing policy;
2. missing: absent, or not finite (``NaN``; an infinite outcome; an infinite covariate value
   outside an open-ended bin): ``missing = "reject"`` reports it, ``"drop"`` drops the row;
3. the spec's rule: treatment 0/1 (or its two labels), the outcome within ``[0, B]`` after the
   offset (``policy = "reject"``), a declared level (without ``other``), within the bin edges;
   under ``"drop"`` only on the rows kept.

Float constants (``B``, the offset, bin edges) enter as text cast to double, which every engine
parses correctly rounded: a decimal literal may become a DECIMAL whose conversion to double is
not (DuckDB). :func:`grid_value` rounds half to even with exact float operations only, so a
record's grid value is the integer the core's compiled kernel computes
(:func:`dpate_core.grid_sums.cell_statistics`), on every engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpate.schemas.spec import StudySpec
from dpate.schemas.spec_columns import CategoricalCovariate, NumericCovariate

from ._errors import (
    R_EDGES,
    R_LEVEL,
    R_MISSING_REJECTED,
    R_NOT_NUMBER,
    R_OUT_OF_BOUNDS,
    R_OUTCOME_LABEL,
    R_TREATMENT_01,
    R_TREATMENT_LABEL,
)

__all__ = ["RecordRules", "count_of", "double", "grid_value", "needed_columns", "record_rules"]

#: text a CSV (or a text column) may hold for a boolean treatment: pyarrow's spellings
_TRUE = ("True", "TRUE", "true")
_FALSE = ("False", "FALSE", "false")
#: a number written as text, for engines without a safe cast (a failed CAST raises there)
_NUMBER = r"^\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])\s*$"


def needed_columns(spec: StudySpec) -> list[str]:
    """The spec's columns, in its order: treatment, outcome, covariates."""
    return [spec.treatment.column, spec.outcome.column, *(c.column for c in spec.covariates)]


def double(value: float) -> Any:
    """``value`` as a double constant every engine reads exactly (text cast to double)."""
    import ibis

    if math.isinf(value):  # each dialect's own spelling of infinity
        return ibis.literal(float(value), type="float64")
    return ibis.literal(repr(float(value))).cast("float64")


def count_of(flag: Any) -> Any:
    """A boolean as the integer 1 or 0 (some engines cannot cast a boolean to an integer)."""
    return flag.ifelse(1, 0).cast("int64")


def grid_value(v: Any) -> Any:
    """``rint(v)`` (round half to even) of a non-negative double as an int64, with exact float
    operations only: ``f = floor(v)``, ``d = v - f`` (exact below ``2^52``), then ``f + [d > 1/2]
    + [d = 1/2 and f odd]``. numpy's and numba's ``rint`` round half to even; SQL's ``ROUND``
    often rounds half away from zero."""
    f = v.floor()
    d = v - f
    fi = f.cast("int64")
    half = double(0.5)
    up = count_of(d > half) + count_of((d == half) & (fi % 2 == 1))
    return fi + up


@dataclass
class ColumnRules:
    """One column's rules: ``conversion`` (reported on every row), ``missing`` (its missing
    rows), ``checks`` (the spec's rules, on rows not already reported for the column)."""

    column: str
    conversion: list[tuple[str, Any]] = field(default_factory=list)
    missing: Any = None
    checks: list[tuple[str, Any]] = field(default_factory=list)


@dataclass
class RecordRules:
    """The spec's rules over a site's table (see the module docstring).

    ``columns``: each column's rules in the spec's order; ``kept``: the rows a release uses (all
    rows under ``missing = "reject"``, the rows with no missing value under ``"drop"``); ``w``,
    ``y``, ``x``: the converted values (meaningful on kept rows without problems);
    ``clipped_low`` / ``clipped_high``: outcomes clipped under ``policy = "clip"``;
    ``mapped``: per categorical covariate with ``other``, the values mapped to it."""

    columns: list[ColumnRules]
    kept: Any
    w: Any
    y: Any
    x: Any
    clipped_low: Any
    clipped_high: Any
    mapped: dict[str, Any]
    reject: bool

    def problems(self) -> list[tuple[str, str, Any]]:
        """``(column, rule, rows breaking it)`` for every rule, in the order messages list them."""
        out: list[tuple[str, str, Any]] = []
        for col in self.columns:
            reported = None
            for rule, flag in col.conversion:
                out.append((col.column, rule, flag))
                reported = flag if reported is None else (reported | flag)
            if self.reject:
                out.append((col.column, R_MISSING_REJECTED, col.missing))
                reported = col.missing if reported is None else (reported | col.missing)
            for rule, flag in col.checks:
                rows = flag if self.reject else (flag & self.kept)
                if reported is not None:
                    rows = rows & ~reported
                out.append((col.column, rule, rows))
        return out


class _Values:
    """Conversions of one column of a table, as the engine's dialect allows."""

    def __init__(self, table: Any, dialect: str):
        self.table = table
        self.dialect = dialect

    def text(self, name: str) -> Any:
        """The column as text (numbers by their text, as a CSV field holds them)."""
        col = self.table[name]
        return col if col.type().is_string() else col.cast("string")

    def number(self, name: str, *, booleans: bool = False) -> tuple[Any, Any]:
        """``(value, not_a_number)``: the column as float64 (null where missing), and the rows
        holding something other than a number (text that is not one; ``"nan"`` text too, as a
        value present but not a number). ``booleans``: the text true/false counts as 1/0."""
        import ibis

        col = self.table[name]
        t = col.type()
        if t.is_boolean():
            return col.ifelse(1.0, 0.0).cast("float64"), ibis.literal(False)
        if t.is_numeric():
            return col.cast("float64"), ibis.literal(False)
        text = col if t.is_string() else col.cast("string")
        if self.dialect in ("duckdb", "pyspark"):
            num = text.try_cast("float64")
        else:
            num = ibis.cases((text.re_search(_NUMBER), text.cast("float64")), else_=ibis.null())
        if booleans:
            num = ibis.cases(
                (text.isin(_TRUE), double(1.0)), (text.isin(_FALSE), double(0.0)), else_=num
            )
        bad = text.notnull() & (num.isnull() | _nan(num, self.dialect))
        return ibis.cases((bad, ibis.null()), else_=num).cast("float64"), bad.fill_null(False)


#: the largest finite double: a value beyond it is infinite (every engine compares that)
_MAX = 1.7976931348623157e308


def _nan(v: Any, dialect: str) -> Any:
    """``v`` is NaN (SQLite stores NaN as NULL: never)."""
    import ibis

    return ibis.literal(False) if dialect == "sqlite" else v.isnan()


def _finite(v: Any, dialect: str) -> Any:
    big = double(_MAX)
    return (v.notnull() & ~_nan(v, dialect) & (v <= big) & (v >= -big)).fill_null(False)


def record_rules(table: Any, spec: StudySpec, dialect: str) -> RecordRules:
    """The spec's rules and conversions over ``table`` (see the module docstring)."""
    import ibis

    vals = _Values(table, dialect)
    columns: list[ColumnRules] = []

    # treatment W
    t = spec.treatment
    rules = ColumnRules(t.column)
    if t.labels is not None and isinstance(t.treated, str):
        text = vals.text(t.column)
        rules.missing = text.isnull()
        rules.checks.append((R_TREATMENT_LABEL, ~text.isin(list(t.labels)).fill_null(False)))
        w = count_of((text == t.treated).fill_null(False)).cast("int8")
    else:
        num, bad = vals.number(t.column, booleans=t.labels is None)
        rules.conversion.append((R_NOT_NUMBER, bad))
        rules.missing = (num.isnull() | _nan(num, dialect)).fill_null(True) & ~bad
        if t.labels is None:
            a, b, treated, rule = 0.0, 1.0, 1.0, R_TREATMENT_01
        else:
            a, b = float(t.labels[0]), float(t.labels[1])
            treated, rule = float(t.treated), R_TREATMENT_LABEL  # type: ignore[arg-type]
        rules.checks.append((rule, ~((num == double(a)) | (num == double(b))).fill_null(False)))
        w = count_of((num == double(treated)).fill_null(False)).cast("int8")
    columns.append(rules)

    # outcome Y
    o = spec.outcome
    rules = ColumnRules(o.column)
    if o.labels is not None:
        text = vals.text(o.column)
        known = list(o.labels)
        rules.conversion.append(
            (R_OUTCOME_LABEL, (text.notnull() & ~text.isin(known)).fill_null(False))
        )
        value = ibis.cases(
            *((text == k, double(float(v))) for k, v in o.labels.items()), else_=ibis.null()
        )
        rules.missing = text.isnull()
    else:
        value, bad = vals.number(o.column)
        rules.conversion.append((R_NOT_NUMBER, bad))
        rules.missing = ~_finite(value, dialect) & ~bad
    v = value - double(o.offset) if o.offset != 0.0 else value.cast("float64")
    zero, bound = double(0.0), double(o.bound)
    if o.policy == "reject":
        rules.checks.append((R_OUT_OF_BOUNDS, ((v < zero) | (v > bound)).fill_null(False)))
        y = v
        clipped_low = clipped_high = ibis.literal(False)
    else:
        clipped_low = (v < zero).fill_null(False)
        clipped_high = (v > bound).fill_null(False)
        y = ibis.cases((v < zero, zero), (v > bound, bound), else_=v)
    columns.append(rules)

    # covariates X
    x: Any = ibis.literal(0).cast("int64")
    mapped: dict[str, Any] = {}
    for c in spec.covariates:
        rules = ColumnRules(c.column)
        if isinstance(c, CategoricalCovariate):
            index = _categorical(vals, c, rules, mapped, dialect)
        else:
            index = _numeric(vals, c, rules, dialect)
        columns.append(rules)
        x = x * c.size + index

    kept = ibis.literal(True)
    if spec.missing == "drop":
        for col in columns:
            kept = kept & ~col.missing
    return RecordRules(
        columns=columns,
        kept=kept,
        w=w,
        y=y.cast("float64"),
        x=x.cast("int64"),
        clipped_low=clipped_low,
        clipped_high=clipped_high,
        mapped=mapped,
        reject=spec.missing == "reject",
    )


def _categorical(
    vals: _Values,
    c: CategoricalCovariate,
    rules: ColumnRules,
    mapped: dict[str, Any],
    dialect: str,
) -> Any:
    import ibis

    levels = c.all_levels
    if isinstance(levels[0], str):
        key = vals.text(c.column)
        rules.missing = key.isnull()
        cases = [(key == lv, i) for i, lv in enumerate(levels)]
        declared = key.isin(list(levels))
    else:
        key, bad = vals.number(c.column)
        rules.conversion.append((R_NOT_NUMBER, bad))
        rules.missing = (key.isnull() | _nan(key, dialect)).fill_null(True) & ~bad
        cases = [(key == double(float(lv)), i) for i, lv in enumerate(levels)]
        declared = key.isin([double(float(lv)) for lv in levels])
    unknown = ~declared.fill_null(True)
    if c.other is None:
        rules.checks.append((R_LEVEL, unknown))
        index = ibis.cases(*cases, else_=0)
    else:
        other = levels.index(c.other)
        mapped[c.column] = unknown
        index = ibis.cases(*cases, else_=other)
    return index.cast("int64")


def _numeric(vals: _Values, c: NumericCovariate, rules: ColumnRules, dialect: str) -> Any:
    import ibis

    v, bad = vals.number(c.column)
    rules.conversion.append((R_NOT_NUMBER, bad))
    lo, hi = c.edges[0], c.edges[-1]
    admitted = ibis.literal(False)
    if math.isinf(lo):
        admitted = admitted | (v == double(-math.inf))
    if math.isinf(hi):
        admitted = admitted | (v == double(math.inf))
    rules.missing = ~_finite(v, dialect) & ~admitted.fill_null(False) & ~bad
    rules.checks.append((R_EDGES, ((v < double(lo)) | (v > double(hi))).fill_null(False)))
    index: Any = ibis.literal(0).cast("int64")
    for edge in c.edges[1:-1]:  # bin = #{inner edges <= v}
        index = index + count_of((v >= double(edge)).fill_null(False))
    return index
