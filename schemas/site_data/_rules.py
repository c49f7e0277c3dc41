"""The study spec's rules and conversions as Ibis expressions, evaluated where the data lives.

:func:`record_codes` turns the spec's public declarations into one small integer per spec column
and row, its *code* (what each code means, and how the groups by code are decoded:
``_codes.py``), plus the outcome a release uses.

Each code is a CASE over the column whose first tests settle a valid value: a number's bins
are tested in order, the lower edge before them and the upper edge as the last bin's test, so a
clean row costs about the comparisons its bins need; which problem a row has is told apart only
on the rows left. The codes are kept as :class:`~._codes.Branches`, so the group key can be
written as a sum of CASEs that yield each code already placed in its digit
(:meth:`~._codes.RecordCodes.key_expr`).

Each row has one code per column, so a row is reported at most once per column, at the first
rule it breaks; rules other than the conversion are reported on the rows kept under ``"drop"``.
Everything compared with comes from the spec; nothing is learned from the data.

Float constants (``B``, the offset, bin edges) enter as text cast to double, which every engine
parses correctly rounded: a decimal literal may become a DECIMAL whose conversion to double is
not (DuckDB). :func:`grid_value` rounds half to even with exact float operations only, so a
record's grid value is the integer the core's compiled kernel computes
(:func:`dpate_core.statistics.cell_statistics`), on every engine.
"""

from __future__ import annotations

import math
from typing import Any

from dpate.schemas.spec import CategoricalCovariate, StudySpec

from ._codes import (
    MAPPED,
    MISSING,
    NOT_ALLOWED,
    NOT_NUMBER,
    OUTSIDE,
    Branches,
    ColumnCodes,
    OutcomeTerms,
    RecordCodes,
)
from ._errors import (
    R_COVARIATE_BOUNDS,
    R_EDGES,
    R_LEVEL,
    R_MISSING_REJECTED,
    R_NOT_NUMBER,
    R_OUT_OF_BOUNDS,
    R_OUTCOME_LABEL,
    R_TREATMENT_01,
    R_TREATMENT_LABEL,
)

__all__ = [
    "count_of",
    "double",
    "grid_value",
    "needed_columns",
    "record_codes",
]

#: text a CSV (or a text column) may hold for a boolean treatment: pyarrow's spellings
_TRUE = ("True", "TRUE", "true")
_FALSE = ("False", "FALSE", "false")
#: a number written as text, for engines without a safe cast (a failed CAST raises there)
_NUMBER = r"^\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])\s*$"
#: the largest finite double
_MAX = 1.7976931348623157e308


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
    """``rint(v)`` (round half to even) of a double ``0 <= v < 2^52``, as a double holding that
    integer: ``(v + 2^52) - 2^52``. Adding ``2^52`` leaves no fraction bits, so IEEE double
    addition (round to nearest, ties to even, on every engine here) rounds ``v`` exactly as
    numpy's and numba's ``rint`` do, and the subtraction is exact. (SQL's ``ROUND`` often rounds
    half away from zero instead.) Summed as doubles, such integers stay exact while every partial
    sum is below ``2^53``, which the grid guarantees (:func:`dpate_core.statistics.grid_bits`)."""
    magic = double(2.0**52)
    return (v + magic) - magic


def _nan(v: Any, dialect: str) -> Any:
    """``v`` is NaN (SQLite stores NaN as NULL: never)."""
    import ibis

    return ibis.literal(False) if dialect == "sqlite" else v.isnan()


def _absent(v: Any, dialect: str) -> Any:
    """``v`` is null or NaN."""
    return v.isnull() | _nan(v, dialect)


def _number(col: Any, dialect: str, *, booleans: bool) -> tuple[Any, Any]:
    """``(value, not_a_number)``: the column as float64 (null where missing) and the rows that
    hold something other than a number (text that is not one; ``"nan"`` text too, a value
    present but not a number; None: a numeric column, which cannot). ``booleans``: the text
    true/false counts as 1/0."""
    import ibis

    t = col.type()
    if t.is_boolean():
        return col.ifelse(1.0, 0.0).cast("float64"), None
    if t.is_numeric():
        return col.cast("float64"), None
    text = col if t.is_string() else col.cast("string")
    if dialect in ("duckdb", "pyspark"):
        num = text.try_cast("float64")
    else:
        num = ibis.cases((text.re_search(_NUMBER), text.cast("float64")), else_=ibis.null())
    if booleans:
        num = ibis.cases(
            (text.isin(_TRUE), double(1.0)), (text.isin(_FALSE), double(0.0)), else_=num
        )
    bad = text.notnull() & _absent(num, dialect)
    return ibis.cases((bad, ibis.null()), else_=num).cast("float64"), bad


def _text(col: Any) -> Any:
    """The column as text (numbers by their text, as a CSV field holds them)."""
    return col if col.type().is_string() else col.cast("string")


def _cases(*branches: tuple[Any, Any], else_: Any) -> Any:
    """:class:`Branches` of the branches that can be true (a condition None is dropped)."""
    kept = tuple((c, v) for c, v in branches if c is not None)
    if not kept and isinstance(else_, Branches):
        return else_
    return Branches(kept, else_)


def _bins(v: Any, edges: list[float], last: Any) -> list[tuple[Any, Any]]:
    """The branches giving ``v`` its bin among the sorted inner ``edges`` (``#{edges <= v}``) on
    the rows not settled yet: the edges tested in order (each test only on the rows not binned
    yet), the last bin by ``last`` (the upper edge's test); with many edges a balanced tree of
    them (``log2`` tests a row)."""
    if len(edges) <= 8:
        return [*((v < double(e), i) for i, e in enumerate(edges)), (last, len(edges))]
    return [(last, _bin_tree(v, edges, 0))]


def _bin_tree(v: Any, edges: list[float], lo: int) -> Any:
    if not edges:
        return lo
    mid = len(edges) // 2
    return Branches(
        ((v < double(edges[mid]), _bin_tree(v, edges[:mid], lo)),),
        _bin_tree(v, edges[mid + 1 :], lo + mid + 1),
    )


def _as_compared(col: Any, values: list[float]) -> tuple[Any, list[Any]] | None:
    """An integer column and integer ``values`` compared as integers (no cast per row)."""
    import ibis

    if col.type().is_integer() and all(float(v).is_integer() for v in values):
        return col, [ibis.literal(int(v)) for v in values]
    return None


def record_codes(table: Any, spec: StudySpec, dialect: str) -> RecordCodes:
    """The code of each spec column and the outcome used, over ``table`` (module docstring).

    Each code is one CASE whose first branches are the valid values, so a row of clean data is
    settled by its first tests (a number's range by the comparisons its bins make anyway); the
    kinds of problem are told apart only on the rows left."""
    import ibis

    t, o = spec.treatment, spec.outcome
    codes: list[Branches] = []
    columns: list[ColumnCodes] = []

    # treatment W: 1 treated, 0 control
    col = table[t.column]
    if t.labels is not None and isinstance(t.treated, str):
        text = _text(col)
        codes.append(
            _cases(
                (text == t.treated, 1),
                (text == t.control, 0),
                (text.isnull(), MISSING),
                else_=NOT_ALLOWED,
            )
        )
        rules = {MISSING: R_MISSING_REJECTED, NOT_ALLOWED: R_TREATMENT_LABEL}
    else:
        pair = [1.0, 0.0] if t.labels is None else [float(t.treated), float(t.control)]  # type: ignore[arg-type]
        ints = _as_compared(col, pair)
        if ints is not None:  # an integer column: compared as integers, nothing to convert
            num, bad = col, None
            treated, control = ints[1]
            absent = col.isnull()
        else:
            num, bad = _number(col, dialect, booleans=t.labels is None)
            treated, control = double(pair[0]), double(pair[1])
            absent = _absent(num.cast("float64"), dialect)
        codes.append(
            _cases(
                (num == treated, 1),
                (num == control, 0),
                (bad, NOT_NUMBER),
                (absent, MISSING),
                else_=NOT_ALLOWED,
            )
        )
        rule = R_TREATMENT_01 if t.labels is None else R_TREATMENT_LABEL
        rules = {NOT_NUMBER: R_NOT_NUMBER, MISSING: R_MISSING_REJECTED, NOT_ALLOWED: rule}
    columns.append(ColumnCodes(t.column, rules))

    # outcome Y: 0 within [0, B] (3: within, not 0 or B, for a binary outcome), 1 and 2 clipped
    col = table[o.column]
    rules = {MISSING: R_MISSING_REJECTED}
    if o.labels is not None:
        text = _text(col)
        value = ibis.cases(
            *((text == k, double(float(v))) for k, v in o.labels.items()), else_=ibis.null()
        ).cast("float64")
        bad = text.notnull() & value.isnull()
        rules[NOT_NUMBER] = R_OUTCOME_LABEL
    else:
        value, bad = _number(col, dialect, booleans=False)
        rules[NOT_NUMBER] = R_NOT_NUMBER
    v = value - double(o.offset) if o.offset else value  # y - 0 is y, NaN and -0.0 included
    zero, bound = double(0.0), double(o.bound)
    big = double(_MAX)
    inside: Any = 0
    if o.binary:  # every kept outcome 0 or B (the release checks it; the spec cannot)
        inside = Branches((((v == zero) | (v == bound), 0),), 3)
    missing = _absent(value, dialect) | (value > big) | (value < -big)  # null, NaN, +-inf
    below, above = (OUTSIDE, OUTSIDE) if o.policy == "reject" else (1, 2)
    if o.policy == "reject":
        rules[OUTSIDE] = R_OUT_OF_BOUNDS
    # v < 0: a number (null and NaN compare false), -inf missing; then v <= B within; the rows
    # left are above B, or not a number, or missing (null, NaN, +inf)
    codes.append(
        _cases(
            (v < zero, Branches(((value < -big, MISSING),), below)),
            (v <= bound, inside),
            else_=_cases((bad, NOT_NUMBER), (missing, MISSING), else_=above),
        )
    )
    columns.append(ColumnCodes(o.column, rules))
    # the outcome used: clipped to [0, B] (the identity on valid outcomes under "reject"); an
    # invalid one (NaN sorts above every number, in every engine here) lands in [0, B] too, so
    # every row's grid value is a small integer (rows with problems are never summed)
    y = ibis.least(ibis.greatest(v, zero), bound)
    outcome = OutcomeTerms(v, value, bad, zero, bound, big, bool(o.binary), o.policy == "reject")

    # covariates X
    sizes = []
    values: dict[str, Any] = {}
    for j, c in enumerate(spec.covariates, start=2):
        col = table[c.column]
        sizes.append(c.size)
        if isinstance(c, CategoricalCovariate):
            if isinstance(c.levels[0], str):
                key, bad = _text(col), None
                keys = list(c.all_levels)
                missing = key.isnull()
            else:
                ints = _as_compared(col, [float(lv) for lv in c.all_levels])
                if ints is not None:
                    key, bad = col, None
                    keys = ints[1]
                    missing = col.isnull()
                else:
                    key, bad = _number(col, dialect, booleans=False)
                    keys = [double(float(lv)) for lv in c.all_levels]
                    missing = _absent(key.cast("float64"), dialect)
            unknown = MAPPED if c.other is not None else NOT_ALLOWED
            codes.append(
                _cases(
                    *((key == k, i) for i, k in enumerate(keys)),
                    (bad, NOT_NUMBER),
                    (missing, MISSING),
                    else_=unknown,
                )
            )
            rules = {NOT_NUMBER: R_NOT_NUMBER, MISSING: R_MISSING_REJECTED}
            if c.other is None:
                rules[NOT_ALLOWED] = R_LEVEL
            other = c.all_levels.index(c.other) if c.other is not None else None
            columns.append(ColumnCodes(c.column, rules, other))
            continue
        num, bad = _number(col, dialect, booleans=False)
        if not c.binned:  # public bounds, no bins: clipped (or refused) like the outcome
            lower, upper = (double(b) for b in c.bounds)
            missing = _absent(num, dialect) | (num > big) | (num < -big)  # null, NaN, +-inf
            below, above = (OUTSIDE, OUTSIDE) if c.clip_policy == "reject" else (1, 2)
            low: Any = below
            if not math.isinf(c.bounds[0]):  # -inf below a finite bound: missing
                low = Branches(((num < -big, MISSING),), below)
            codes.append(
                _cases(
                    (num < lower, low),
                    (num <= upper, 0),
                    else_=_cases((bad, NOT_NUMBER), (missing, MISSING), else_=above),
                )
            )
            values[f"_z{j}"] = ibis.least(ibis.greatest(num, lower), upper)
            rules = {NOT_NUMBER: R_NOT_NUMBER, MISSING: R_MISSING_REJECTED}
            if c.clip_policy == "reject":
                rules[OUTSIDE] = R_COVARIATE_BOUNDS
            columns.append(ColumnCodes(c.column, rules, bounded=True))
            continue
        assert c.edges is not None
        lo, hi = c.edges[0], c.edges[-1]
        # below a finite lower edge: -inf missing, else outside; then the bins, the last one up
        # to the upper edge (an infinite value only at an open end); the rows left are above
        # it, or not a number, or missing (null, NaN, +inf above a finite edge)
        first = []
        if not math.isinf(lo):
            first.append(
                (num < double(lo), Branches(((num == double(-math.inf), MISSING),), OUTSIDE))
            )
        missing = _absent(num, dialect)
        if not math.isinf(hi):
            missing = missing | (num == double(math.inf))
        codes.append(
            _cases(
                *first,
                *_bins(num, list(c.edges[1:-1]), num <= double(hi)),
                else_=_cases((bad, NOT_NUMBER), (missing, MISSING), else_=OUTSIDE),
            )
        )
        columns.append(
            ColumnCodes(
                c.column, {NOT_NUMBER: R_NOT_NUMBER, MISSING: R_MISSING_REJECTED, OUTSIDE: R_EDGES}
            )
        )
    added = {f"_k{j}": b.build().cast("int32") for j, b in enumerate(codes)}
    added["_y"] = y.cast("float64")
    added |= {name: z.cast("float64") for name, z in values.items()}
    return RecordCodes(
        table.mutate(**added).view(),
        columns,
        sizes,
        spec.missing == "reject",
        base=table,
        branches=codes,
        used=y.cast("float64"),
        outcome=outcome,
    )
