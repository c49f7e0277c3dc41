"""Site data: read a site's records, validate them against the study spec, discretise covariates.

:func:`prepare_site_data` turns a CSV or Parquet file (local path or fsspec URL), a pandas
DataFrame or a pyarrow Table into :class:`SiteData`: ``w`` (int8, 0/1), ``y`` (float64 in
``[0, B]``), ``x`` (int64 stratum ids in ``0 .. |X|-1``) and the public domain size ``|X|``, ready
for :mod:`dpate_core.release`. Everything it uses to decide is public and comes from the spec:

- **treatment**: 0/1 (integers, floats or booleans), or the spec's two labels;
- **outcome**: numeric and finite, or one of the spec's outcome ``labels`` (mapped to their
  public numbers); ``Y - offset`` must lie in ``[0, B]``: ``policy = "clip"`` clips and counts,
  ``"reject"`` refuses the file;
- **covariates**: categorical values must be among the declared levels (or are mapped to the
  declared ``other`` level); numeric values are cut at the declared bin edges and must lie within
  them. The stratum id is the mixed-radix number of the covariates' bin/level indices (first
  covariate most significant); ``|X|`` is the product of the level counts. Nothing about the
  discretisation is learned from the data;
- **missing / non-finite** values in any used column: ``missing = "reject"`` refuses the file,
  ``"drop"`` drops those rows (and the operator report says how many; ``N`` is then the count kept).

Errors are lazy: every problem is collected (pandera ``lazy=True`` plus the conversions done here)
and raised at once as :class:`SiteDataError`, grouped by column and rule, with counts and 0-based
row positions only. **No data value ever appears in a message, log record or exception**:
pandera's failure cases (which hold the raw values) are reduced to counts and positions, and any
exception from pandas / pyarrow while reading or converting (their texts may echo values) is
replaced by one naming only the stage, the column and the exception's type. Redacted errors are
raised outside the ``except`` block, so no original exception rides along as ``__context__``.
Warnings raised while handling the data are swallowed (their texts may hold values); only their
count is kept in the operator report.

The counts in :class:`PreparationReport` (rows dropped, values clipped) are computed from the
private records and are **not** differentially private: they are for the site operator only and
must never be published, logged to a shared server, or put in a report.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pandas as pd
import pandera.pandas as pda
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from schemas.spec import CategoricalCovariate, NumericCovariate, StudySpec

__all__ = [
    "MAX_ROWS_LISTED",
    "PreparationReport",
    "Problem",
    "SiteData",
    "SiteDataError",
    "build_schema",
    "prepare_site_data",
    "read_site_table",
]

#: How many row positions a problem lists (the count is always complete).
MAX_ROWS_LISTED = 10

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

    def __reduce__(self):  # picklable (Prefect may serialise exceptions) without extra state
        return (_rebuild_error, (self.problems, self.n_rows, str(self).rsplit("\n", 1)[-1]))


def _rebuild_error(problems, n_rows, hint):
    return SiteDataError(problems, n_rows=n_rows, hint=hint)


@dataclass(frozen=True)
class PreparationReport:
    """What preparation did to the records. **Operator only**: these counts are not private."""

    n_read: int
    n_used: int
    dropped_missing: int = 0
    missing_by_column: dict[str, int] = field(default_factory=dict)
    clipped_low: int = 0
    clipped_high: int = 0
    mapped_to_other: dict[str, int] = field(default_factory=dict)
    warnings_suppressed: int = 0


@dataclass(frozen=True, repr=False, eq=False)
class SiteData:
    """A site's records as the core needs them. ``domain_size`` is the public ``|X|``.

    Its ``repr`` shows sizes only, so logging it by mistake prints no record."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    domain_size: int
    bound: float
    report: PreparationReport

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    def __repr__(self) -> str:
        return f"SiteData(n={self.n}, domain_size={self.domain_size}, bound={self.bound})"


# ---------------------------------------------------------------------------------------------
# reading


def _needed_columns(spec: StudySpec) -> list[str]:
    return [spec.treatment.column, spec.outcome.column, *(c.column for c in spec.covariates)]


def _string_columns(spec: StudySpec) -> list[str]:
    """Columns whose spec values are text: read them as strings whatever they look like."""
    cols = []
    if isinstance(spec.treatment.treated, str):
        cols.append(spec.treatment.column)
    if spec.outcome.labels is not None:
        cols.append(spec.outcome.column)
    for c in spec.covariates:
        if isinstance(c, CategoricalCovariate) and isinstance(c.levels[0], str):
            cols.append(c.column)
    return cols


class _Redacted(Exception):
    """Internal: carries a redacted SiteDataError out of an ``except`` block."""


def _open(location: str | Path):
    """A binary stream; compressed CSV (``.gz``, ``.bz2``, ``.zst``) is decompressed."""
    if isinstance(location, Path) or "://" not in str(location):
        low = str(location).lower()
        if low.endswith((".gz", ".bz2", ".zst")):
            return pa.input_stream(str(location), compression="detect")
        return pa.memory_map(str(location), "r")
    import fsspec

    return fsspec.open(str(location), "rb", compression="infer").open()


def read_site_table(location: str | Path, spec: StudySpec, fmt: str | None = None) -> pa.Table:
    """Read only the spec's columns of a CSV or Parquet file (local path or fsspec URL).

    Raises :class:`SiteDataError` naming the missing columns, or naming the file and the type of
    the reader's error (the reader's own text, which may quote file contents, is dropped).
    """
    loc = str(location)
    if fmt is None:
        low = loc.lower().split("?")[0]
        fmt = "parquet" if low.endswith((".parquet", ".pq")) else "csv"
    needed = _needed_columns(spec)
    failure: SiteDataError | None = None
    try:
        with _open(location) as fh:
            if fmt == "parquet":
                text_cols = _string_columns(spec)
                pf = pq.ParquetFile(fh)
                names = pf.schema_arrow.names
                missing = [c for c in needed if c not in names]
                if missing:
                    raise _Redacted(_missing_columns(missing))
                pf = pq.ParquetFile(fh, metadata=pf.metadata, read_dictionary=text_cols)
                table = pf.read(columns=needed)
                # text columns as dictionaries: validation and binning then touch each
                # distinct value once, not every row
                table = _dictionary_encode(table, text_cols)
            else:
                string_cols = set(_string_columns(spec))
                convert = pacsv.ConvertOptions(
                    include_columns=needed,
                    include_missing_columns=True,
                    column_types={c: _DICT_STRING for c in string_cols},
                    strings_can_be_null=True,
                )
                read = pacsv.ReadOptions(block_size=1 << 24)
                table = pacsv.read_csv(fh, read_options=read, convert_options=convert)
                # include_missing_columns fills absent columns with nulls; tell them apart by
                # the header, which names columns (schema), never values.
                header = _csv_header(location)
                missing = [c for c in needed if c not in header]
                if missing:
                    raise _Redacted(_missing_columns(missing))
    except _Redacted as exc:
        failure = exc.args[0]
    except FileNotFoundError:
        loc = _shown(loc)
        failure = SiteDataError(
            [], hint=f"the site's data file was not found at {loc}: check the site's data location"
        )
    except PermissionError:
        failure = SiteDataError([], hint=f"no permission to read {_shown(loc)}")
    except Exception as exc:  # pyarrow / fsspec texts may quote file contents: keep the type only
        loc = _shown(loc)
        failure = SiteDataError(
            [],
            hint=f"could not read {loc} as {fmt} ({type(exc).__name__}; the reader's message is "
            f"withheld because it may quote record values): check the file's format and encoding",
        )
    if failure is not None:
        raise failure
    return table


_DICT_STRING = pa.dictionary(pa.int32(), pa.string())


def _shown(location: str) -> str:
    """The location as a message may show it: no password (schemas/sources.py)."""
    from schemas.sources import redact_location

    return redact_location(location)


def _dictionary_encode(table: pa.Table, columns: list[str]) -> pa.Table:
    for name in columns:
        i = table.schema.get_field_index(name)
        col = table.column(i)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            table = table.set_column(i, name, pc.dictionary_encode(col))
    return table


def _csv_header(location: str | Path) -> list[str]:
    with _open(location) as fh:
        reader = pacsv.open_csv(
            fh,
            read_options=pacsv.ReadOptions(block_size=1 << 16),
            convert_options=pacsv.ConvertOptions(column_types={}),
        )
        return list(reader.schema.names)


def _missing_columns(missing: list[str]) -> SiteDataError:
    return SiteDataError(
        [],
        hint=f"the data lacks the column(s) {missing} that the study spec names: rename the "
        f"columns in the extract or fix the spec's column mapping",
    )


# ---------------------------------------------------------------------------------------------
# the pandera schema, built from the spec at run time


def _check(fn: Callable[[pd.Series], Any], rule: str) -> pda.Check:
    # ``error`` is what pandera reports as the failed check: our rule text, never a value
    return pda.Check(fn, name=rule, error=rule)


def build_schema(spec: StudySpec) -> pda.DataFrameSchema:
    """The pandera schema of a site's records after :func:`prepare_site_data`'s conversions
    (numeric columns as float64, text columns as strings). Nulls are allowed here only when the
    spec's missing policy drops them (they are gone before validation then)."""
    nullable = False
    t = spec.treatment
    # (s == a) | (s == b), not isin: pandas' isin on small integer dtypes hashes every row
    if t.labels is None:
        t_check = _check(lambda s: (s == 0) | (s == 1), _R_TREATMENT_01)
    elif isinstance(t.treated, str):
        labels = list(t.labels)
        t_check = _check(lambda s: s.isin(labels), _R_TREATMENT_LABEL)
    else:
        a, b = t.labels
        t_check = _check(lambda s: (s == a) | (s == b), _R_TREATMENT_LABEL)
    o = spec.outcome
    o_checks = [
        _check(lambda s: pd.Series(np.isfinite(s.to_numpy()), index=s.index), _R_NOT_FINITE)
    ]
    if o.policy == "reject":
        off, b = o.offset, o.bound

        def in_bounds(s: pd.Series) -> pd.Series:
            v = s.to_numpy() - off
            return pd.Series((v >= 0.0) & (v <= b), index=s.index)

        o_checks.append(_check(in_bounds, _R_OUT_OF_BOUNDS))
    columns = {
        t.column: pda.Column(None, checks=[t_check], nullable=nullable),
        o.column: pda.Column("float64", checks=o_checks, nullable=nullable),
    }
    for c in spec.covariates:
        if isinstance(c, CategoricalCovariate):
            checks = []
            if c.other is None:
                levels = list(c.levels)
                checks.append(_check(lambda s, lv=levels: _in_levels(s, lv), _R_LEVEL))
            columns[c.column] = pda.Column(None, checks=checks, nullable=nullable)
        else:
            lo, hi = c.edges[0], c.edges[-1]

            def within(s: pd.Series, lo=lo, hi=hi) -> pd.Series:
                v = s.to_numpy()
                return pd.Series((v >= lo) & (v <= hi), index=s.index)

            columns[c.column] = pda.Column(
                "float64", checks=[_check(within, _R_EDGES)], nullable=nullable
            )
    return pda.DataFrameSchema(
        columns, strict=False, coerce=False, name=f"site data of {spec.study_id}"
    )


# ---------------------------------------------------------------------------------------------
# preparation


class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.reported: dict[str, np.ndarray] = {}  # column -> rows already reported

    def add(self, column: str, rule: str, mask: np.ndarray) -> None:
        count = int(np.count_nonzero(mask))
        if count:
            rows = tuple(int(i) for i in np.flatnonzero(mask)[:MAX_ROWS_LISTED])
            self.problems.append(Problem(column, rule, count, rows))
            prev = self.reported.get(column)
            self.reported[column] = mask.copy() if prev is None else (prev | mask)


def _to_float(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """float64 values and a mask of entries present but not numbers (text that is not a number)."""
    if col.dtype == np.float64:
        return col.to_numpy(), np.zeros(len(col), dtype=bool)  # no copy
    if pd.api.types.is_bool_dtype(col.dtype) or pd.api.types.is_numeric_dtype(col.dtype):
        vals = col.to_numpy(dtype=np.float64, na_value=np.nan)
        return vals, np.zeros(len(col), dtype=bool)
    conv = pd.to_numeric(col, errors="coerce")
    vals = conv.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(vals) & col.notna().to_numpy()
    return vals, bad


def _as_frame(source: Any, spec: StudySpec, fmt: str | None) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        missing = [c for c in _needed_columns(spec) if c not in source.columns]
        if missing:
            raise _missing_columns(missing)
        return source[_needed_columns(spec)].reset_index(drop=True)
    if isinstance(source, pa.Table):
        missing = [c for c in _needed_columns(spec) if c not in source.column_names]
        if missing:
            raise _missing_columns(missing)
        table = _dictionary_encode(source.select(_needed_columns(spec)), _string_columns(spec))
    else:
        table = read_site_table(source, spec, fmt)
    # dictionary-encoded text becomes a pandas Categorical, other text Arrow-backed strings;
    # numbers become numpy arrays
    return table.to_pandas(
        types_mapper={pa.string(): pd.StringDtype("pyarrow")}.get, split_blocks=True
    )


def prepare_site_data(
    source: str | Path | pd.DataFrame | pa.Table,
    spec: StudySpec,
    *,
    fmt: str | None = None,
) -> SiteData:
    """Validate a site's records against ``spec`` and return ``(w, y, x, |X|)``.

    ``source``: a path or fsspec URL (format from ``fmt`` or the suffix: ``.parquet``/``.pq``,
    otherwise CSV), a DataFrame or a pyarrow Table. Raises :class:`SiteDataError` (every problem
    at once; no data values in it).

    A location is read and validated in batches (:func:`schemas.sources.prepare_source`: bounded
    working memory, the same result and messages); it may also be a partitioned Parquet dataset
    (a directory) or a SQL database URL (query in ``DPATE_DATA_QUERY``).
    """
    if isinstance(source, (str, Path)):
        from schemas.sources import prepare_source

        return prepare_source(source, spec, fmt=fmt)
    failure: SiteDataError | None = None
    stage = "reading"
    result: SiteData | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            frame = _as_frame(source, spec, fmt)
            stage = "validation"
            result = _prepare(frame, spec)
        except SiteDataError as exc:
            failure = exc
        except Exception as exc:  # pandas / pyarrow / pandera texts may hold values: redact
            failure = SiteDataError(
                [],
                hint=f"the site data could not be processed during {stage} ({type(exc).__name__}; "
                f"its message is withheld because it may quote record values)",
            )
    if failure is not None:
        raise failure
    assert result is not None
    if caught:
        result = SiteData(
            result.w,
            result.y,
            result.x,
            result.domain_size,
            result.bound,
            PreparationReport(**{**result.report.__dict__, "warnings_suppressed": len(caught)}),
        )
    return result


def _prepare(frame: pd.DataFrame, spec: StudySpec) -> SiteData:
    n_read = len(frame)
    problems = _Collector()
    t, o = spec.treatment, spec.outcome
    data: dict[str, Any] = {}
    absent: dict[str, np.ndarray] = {}  # column -> mask of missing / non-finite entries

    # 1. conversions (numbers to float64; text to strings), noting what is missing
    tcol = frame[t.column]
    if t.labels is not None and isinstance(t.treated, str):
        tcol = _as_text(tcol)
        data[t.column] = tcol
        absent[t.column] = tcol.isna().to_numpy()
    elif isinstance(tcol.dtype, np.dtype) and tcol.dtype.kind in "iub":
        # plain numpy integers / booleans: nothing can be missing, no conversion needed
        data[t.column] = tcol
        absent[t.column] = np.zeros(n_read, dtype=bool)
    else:
        vals, not_num = _to_float(tcol)
        problems.add(t.column, _R_NOT_NUMBER, not_num)
        data[t.column] = pd.Series(vals, copy=False)
        absent[t.column] = np.isnan(vals) & ~not_num

    if o.labels is not None:
        y, not_num = _from_labels(_as_text(frame[o.column]), o.labels)
        problems.add(o.column, _R_OUTCOME_LABEL, not_num)
    else:
        y, not_num = _to_float(frame[o.column])
        problems.add(o.column, _R_NOT_NUMBER, not_num)
    absent[o.column] = ~np.isfinite(y) & ~not_num
    data[o.column] = pd.Series(y, copy=False)

    for c in spec.covariates:
        col = frame[c.column]
        if isinstance(c, CategoricalCovariate):
            if isinstance(c.levels[0], str):
                col = _as_text(col)
                absent[c.column] = col.isna().to_numpy()
                data[c.column] = col
            else:
                vals, not_num = _to_float(col)
                problems.add(c.column, _R_NOT_NUMBER, not_num)
                absent[c.column] = np.isnan(vals) & ~not_num
                data[c.column] = pd.Series(vals, copy=False)
        else:
            vals, not_num = _to_float(col)
            problems.add(c.column, _R_NOT_NUMBER, not_num)
            # an infinite value is fine only where an open edge admits it
            bad = ~np.isfinite(vals)
            if bad.any():
                bad &= ~_admitted_inf(vals, c)
            absent[c.column] = bad & ~not_num
            data[c.column] = pd.Series(vals, copy=False)

    # 2. missing / non-finite policy
    any_absent = np.zeros(n_read, dtype=bool)
    for m in absent.values():
        any_absent |= m
    missing_by_column = {k: int(np.count_nonzero(m)) for k, m in absent.items() if m.any()}
    positions: np.ndarray | None = None
    if spec.missing == "reject":
        for col, m in absent.items():
            problems.add(col, _R_MISSING + " (study policy missing = 'reject')", m)
    elif any_absent.any():
        positions = np.flatnonzero(~any_absent)
    df = pd.DataFrame(
        {k: (v.iloc[positions] if positions is not None else v) for k, v in data.items()},
        copy=False,
    ).reset_index(drop=True)

    # 3. pandera: the spec's rules, lazily; failure cases reduced to counts and positions
    # (a value already reported above, e.g. missing, is not reported again by another rule)
    pandera_problems: list[Problem] = []
    try:
        build_schema(spec).validate(df, lazy=True, inplace=True)
    except pda.errors.SchemaErrors as exc:
        pandera_problems = _redact(exc, positions, problems.reported)
    all_problems = problems.problems + pandera_problems
    if all_problems:
        order = {c: i for i, c in enumerate(_needed_columns(spec))}
        merged = sorted(_merge(all_problems), key=lambda p: order.get(p.column, len(order)))
        raise SiteDataError(merged, n_rows=n_read)

    # 4. (w, y, x)
    if t.labels is None:
        w = df[t.column].to_numpy().astype(np.int8, copy=False)
    else:
        w = (df[t.column] == t.treated).to_numpy(dtype=bool, na_value=False).astype(np.int8)
    # a new array (never a view of the caller's frame), clipped in place
    yv = np.subtract(df[o.column].to_numpy(dtype=np.float64), o.offset)
    clipped_low = clipped_high = 0
    if o.policy == "clip":
        clipped_low = int(np.count_nonzero(yv < 0.0))
        clipped_high = int(np.count_nonzero(yv > o.bound))
        if clipped_low:
            np.maximum(yv, 0.0, out=yv)
        if clipped_high:
            np.minimum(yv, o.bound, out=yv)
    x, mapped = _strata(df, spec)
    n_used = len(df)
    report = PreparationReport(
        n_read=n_read,
        n_used=n_used,
        dropped_missing=n_read - n_used,
        missing_by_column=missing_by_column,
        clipped_low=clipped_low,
        clipped_high=clipped_high,
        mapped_to_other=mapped,
    )
    return SiteData(
        w=np.ascontiguousarray(w),
        y=np.ascontiguousarray(yv, dtype=np.float64),
        x=np.ascontiguousarray(x, dtype=np.int64),
        domain_size=spec.domain_size,
        bound=o.bound,
        report=report,
    )


def _as_text(col: pd.Series) -> pd.Series:
    """Text as a pandas Categorical of strings (numbers compare by their text: a level "1"
    matches the integer 1). Categorical keeps validation and binning per distinct value."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        if pd.api.types.is_string_dtype(cats.dtype) or cats.empty:
            return col
        return col.cat.rename_categories(cats.astype(str))
    if not pd.api.types.is_string_dtype(col.dtype) or pd.api.types.is_object_dtype(col.dtype):
        col = col.astype(pd.StringDtype("pyarrow"))
    return col.astype("category")


def _from_labels(col: pd.Series, labels: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The public number of each text label (decided once per distinct value), and a mask of
    entries present but not among the labels (NaN there, reported by rule, never by value)."""
    cats = col.cat.categories.astype(str)
    lut = np.append(np.array([labels.get(c, np.nan) for c in cats], dtype=np.float64), np.nan)
    codes = col.cat.codes.to_numpy()
    vals = lut.take(np.where(codes >= 0, codes, lut.shape[0] - 1))
    bad = np.isnan(vals) & (codes >= 0)
    return vals, bad


def _admitted_inf(vals: np.ndarray, c: NumericCovariate) -> np.ndarray:
    lo_open, hi_open = math.isinf(c.edges[0]), math.isinf(c.edges[-1])
    return ((vals == -np.inf) & lo_open) | ((vals == np.inf) & hi_open)


def _redact(
    exc: pda.errors.SchemaErrors, positions: np.ndarray | None, reported: dict[str, np.ndarray]
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


def _in_levels(s: pd.Series, levels: list) -> pd.Series:
    """``s.isin(levels)``, decided once per category for a Categorical (pandas' isin on the
    codes hashes every row)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        ok = np.append(s.cat.categories.isin(levels), False)  # code -1 (missing) -> False
        return pd.Series(ok.take(s.cat.codes.to_numpy()), index=s.index)
    return s.isin(levels)


@numba.njit(cache=True, nogil=True)
def _acc_codes(x, size, lut, codes):  # pragma: no cover - compiled
    """``x = x * size + lut[code]`` per record, one pass (``lut[-1]`` serves code -1)."""
    for i in range(x.shape[0]):
        c = codes[i]
        x[i] = x[i] * size + lut[c if c >= 0 else lut.shape[0] - 1]


@numba.njit(cache=True, nogil=True)
def _acc_bins(x, size, inner, v):  # pragma: no cover - compiled
    """``x = x * size + bin(v)`` per record, ``bin(v) = #{inner edges <= v}``: a branch-free
    count over a few edges, a binary search over many."""
    k = inner.shape[0]
    if k <= 32:
        for i in range(x.shape[0]):
            val = v[i]
            b = 0
            for j in range(k):
                b += val >= inner[j]
            x[i] = x[i] * size + b
    else:
        for i in range(x.shape[0]):
            lo, hi = 0, k
            val = v[i]
            while lo < hi:
                mid = (lo + hi) // 2
                if val >= inner[mid]:
                    lo = mid + 1
                else:
                    hi = mid
            x[i] = x[i] * size + lo


def _strata(df: pd.DataFrame, spec: StudySpec) -> tuple[np.ndarray, dict[str, int]]:
    """Stratum id per record from the public covariate spec (mixed radix, first covariate most
    significant), and how many values each categorical covariate mapped to its 'other' level.
    Each covariate is one compiled pass over the records (a lookup per categorical code, a
    binary search over the public edges per number)."""
    n = len(df)
    x = np.zeros(n, dtype=np.int64)
    mapped: dict[str, int] = {}
    for c in spec.covariates:
        col = df[c.column]
        if isinstance(c, CategoricalCovariate):
            levels = c.all_levels
            if isinstance(levels[0], str):
                cat = col.cat  # decided per distinct value, gathered by the codes
                lut = pd.Index(levels).get_indexer(cat.categories.astype(str)).astype(np.int64)
                codes = cat.codes.to_numpy()
            else:
                codes, cats = pd.factorize(col.to_numpy(dtype=np.float64), use_na_sentinel=True)
                lut = pd.Index(np.asarray(levels, dtype=np.float64)).get_indexer(cats)
                lut = lut.astype(np.int64)
                codes = np.ascontiguousarray(codes)
            lut = np.append(lut, -1)  # code -1 (missing; never after validation)
            unknown_cats = lut[:-1] < 0
            # without an 'other' level an unknown category can only be unused (its rows dropped
            # as missing, or in another batch): validation refused any row holding one
            if unknown_cats.any() and c.other is not None:
                other = levels.index(c.other)
                unknown_rows = unknown_cats.take(codes[codes >= 0])
                mapped[c.column] = int(np.count_nonzero(unknown_rows))
                lut[:-1][unknown_cats] = other
            _acc_codes(x, c.size, lut, codes)
        else:
            v = np.ascontiguousarray(col.to_numpy(dtype=np.float64))
            _acc_bins(x, c.size, np.asarray(c.edges[1:-1], dtype=np.float64), v)
    return x, mapped
