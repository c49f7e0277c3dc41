"""Site data: a site's records, validated against the study spec, as ``(w, y, x, |X|)``.

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
  them (:mod:`dpate.schemas.strata`). Nothing about the discretisation is learned from the data;
- **missing / non-finite** values in any used column: ``missing = "reject"`` refuses the file,
  ``"drop"`` drops those rows (and the operator report says how many; ``N`` is then the count kept).

The work is shared out by what it holds: reading (:mod:`dpate.schemas.site_reading`), the pandera schema
(:mod:`dpate.schemas.site_schema`), errors and their redaction (:mod:`dpate.schemas.site_errors`), strata
(:mod:`dpate.schemas.strata`); this module converts, applies the policies and assembles the result.

Errors are lazy: every problem is collected (pandera ``lazy=True`` plus the conversions done here)
and raised at once as :class:`~dpate.schemas.site_errors.SiteDataError`, grouped by column and rule,
with counts and 0-based row positions only. **No data value ever appears in a message, log record
or exception**: pandera's failure cases (which hold the raw values) are reduced to counts and
positions, and any exception from pandas / pyarrow while reading or converting (their texts may
echo values) is replaced by one naming only the stage, the column and the exception's type.
Redacted errors are raised outside the ``except`` block, so no original exception rides along as
``__context__``. Warnings raised while handling the data are swallowed (their texts may hold
values); only their count is kept in the operator report.

The counts in :class:`PreparationReport` (rows dropped, values clipped) are computed from the
private records and are **not** differentially private: they are for the site operator only and
must never be published, logged to a shared server, or put in a report.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pandera.pandas as pda
import pyarrow as pa

from dpate.schemas.site_errors import (
    _R_MISSING,
    _R_NOT_NUMBER,
    _R_OUTCOME_LABEL,
    Mask,
    Problem,
    SiteDataError,
    _Collector,
    _merge,
    _redact,
)
from dpate.schemas.site_reading import _as_frame, _needed_columns
from dpate.schemas.site_schema import build_schema
from dpate.schemas.spec import StudySpec
from dpate.schemas.spec_columns import CategoricalCovariate, NumericCovariate
from dpate.schemas.strata import stratum_ids

__all__ = ["PreparationReport", "SiteData", "prepare_site_data"]

FloatArray = npt.NDArray[np.float64]


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

    w: npt.NDArray[np.int8]
    y: FloatArray
    x: npt.NDArray[np.int64]
    domain_size: int
    bound: float
    report: PreparationReport

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    def __repr__(self) -> str:
        return f"SiteData(n={self.n}, domain_size={self.domain_size}, bound={self.bound})"


def prepare_site_data(
    source: str | Path | pd.DataFrame | pa.Table,
    spec: StudySpec,
    *,
    fmt: str | None = None,
) -> SiteData:
    """Validate a site's records against ``spec`` and return ``(w, y, x, |X|)``.

    ``source``: a path or fsspec URL (format from ``fmt`` or the suffix: ``.parquet``/``.pq``,
    otherwise CSV), a DataFrame or a pyarrow Table. Raises
    :class:`~dpate.schemas.site_errors.SiteDataError` (every problem at once; no data values in it).

    A location is read and validated in batches (:func:`dpate.schemas.site_batches.prepare_source`: bounded
    working memory, the same result and messages); it may also be a partitioned Parquet dataset
    (a directory) or a SQL database URL (query in ``DPATE_DATA_QUERY``).
    """
    if isinstance(source, (str, Path)):
        from dpate.schemas.site_batches import prepare_source

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
    """Convert, apply the missing policy, validate (every problem at once), then ``(w, y, x)``."""
    n_read = len(frame)
    problems = _Collector()
    data, absent = _convert(frame, spec, problems)
    df, positions, missing_by_column = _apply_missing_policy(data, absent, spec, problems, n_read)
    _validate(df, spec, positions, problems, n_read)
    return _records(df, spec, n_read, missing_by_column)


def _convert(
    frame: pd.DataFrame, spec: StudySpec, problems: _Collector
) -> tuple[dict[str, pd.Series], dict[str, Mask]]:
    """Numbers to float64 and text to strings, column by column in the spec's order, noting
    what is missing (``absent``: column -> mask of missing / non-finite entries) and reporting
    what is present but not a number or not a label."""
    t, o = spec.treatment, spec.outcome
    data: dict[str, pd.Series] = {}
    absent: dict[str, Mask] = {}

    tcol = frame[t.column]
    if t.labels is not None and isinstance(t.treated, str):
        tcol = _as_text(tcol)
        data[t.column] = tcol
        absent[t.column] = tcol.isna().to_numpy()
    elif isinstance(tcol.dtype, np.dtype) and tcol.dtype.kind in "iub":
        # plain numpy integers / booleans: nothing can be missing, no conversion needed
        data[t.column] = tcol
        absent[t.column] = np.zeros(len(frame), dtype=bool)
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
        data[c.column], absent[c.column] = _convert_covariate(frame[c.column], c, problems)
    return data, absent


def _convert_covariate(
    col: pd.Series, c: CategoricalCovariate | NumericCovariate, problems: _Collector
) -> tuple[pd.Series, Mask]:
    """One covariate's converted column and its mask of missing / non-finite entries."""
    if isinstance(c, CategoricalCovariate):
        if isinstance(c.levels[0], str):
            col = _as_text(col)
            return col, col.isna().to_numpy()
        vals, not_num = _to_float(col)
        problems.add(c.column, _R_NOT_NUMBER, not_num)
        return pd.Series(vals, copy=False), np.isnan(vals) & ~not_num
    vals, not_num = _to_float(col)
    problems.add(c.column, _R_NOT_NUMBER, not_num)
    # an infinite value is fine only where an open edge admits it
    bad = ~np.isfinite(vals)
    if bad.any():
        bad &= ~_admitted_inf(vals, c)
    return pd.Series(vals, copy=False), bad & ~not_num


def _apply_missing_policy(
    data: dict[str, pd.Series],
    absent: dict[str, Mask],
    spec: StudySpec,
    problems: _Collector,
    n_read: int,
) -> tuple[pd.DataFrame, npt.NDArray[np.intp] | None, dict[str, int]]:
    """``missing = "reject"``: every missing entry is a problem; ``"drop"``: rows with one are
    dropped (``positions``: the kept rows' positions in the file, None when all are kept)."""
    any_absent = np.zeros(n_read, dtype=bool)
    for m in absent.values():
        any_absent |= m
    missing_by_column = {k: int(np.count_nonzero(m)) for k, m in absent.items() if m.any()}
    positions: npt.NDArray[np.intp] | None = None
    if spec.missing == "reject":
        for col, m in absent.items():
            problems.add(col, _R_MISSING + " (study policy missing = 'reject')", m)
    elif any_absent.any():
        positions = np.flatnonzero(~any_absent)
    df = pd.DataFrame(
        {k: (v.iloc[positions] if positions is not None else v) for k, v in data.items()},
        copy=False,
    ).reset_index(drop=True)
    return df, positions, missing_by_column


def _validate(
    df: pd.DataFrame,
    spec: StudySpec,
    positions: npt.NDArray[np.intp] | None,
    problems: _Collector,
    n_read: int,
) -> None:
    """pandera: the spec's rules, lazily; failure cases reduced to counts and positions (a value
    already reported while converting, e.g. missing, is not reported again by another rule).
    Raises one :class:`SiteDataError` with every problem, in the spec's column order."""
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


def _records(
    df: pd.DataFrame, spec: StudySpec, n_read: int, missing_by_column: dict[str, int]
) -> SiteData:
    """``(w, y, x)`` of validated records: ``w`` 0/1, ``y - offset`` (clipped to ``[0, B]``
    under ``policy = "clip"``, counted), stratum ids; and the operator's report."""
    t, o = spec.treatment, spec.outcome
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
    x, mapped = stratum_ids(df, spec)
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


def _to_float(col: pd.Series) -> tuple[FloatArray, Mask]:
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


def _from_labels(col: pd.Series, labels: dict[str, float]) -> tuple[FloatArray, Mask]:
    """The public number of each text label (decided once per distinct value), and a mask of
    entries present but not among the labels (NaN there, reported by rule, never by value)."""
    cats = col.cat.categories.astype(str)
    lut = np.append(np.array([labels.get(c, np.nan) for c in cats], dtype=np.float64), np.nan)
    codes = col.cat.codes.to_numpy()
    vals = lut.take(np.where(codes >= 0, codes, lut.shape[0] - 1))
    bad = np.isnan(vals) & (codes >= 0)
    return vals, bad


def _admitted_inf(vals: FloatArray, c: NumericCovariate) -> Mask:
    lo_open, hi_open = math.isinf(c.edges[0]), math.isinf(c.edges[-1])
    admitted: Mask = ((vals == -np.inf) & lo_open) | ((vals == np.inf) & hi_open)
    return admitted
