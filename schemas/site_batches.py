"""A site's data source validated batch by batch: :func:`iter_site_batches` (nothing kept) and
:func:`prepare_source` (``(w, y, x)`` kept), with exactly the problems and report of one pass
(schemas/sources.py has the design: batches, memory, what is operator-only)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dpate.schemas.site_errors import (
    _R_EDGES,
    _R_LEVEL,
    _R_MISSING,
    _R_NOT_FINITE,
    _R_NOT_NUMBER,
    _R_OUT_OF_BOUNDS,
    _R_OUTCOME_LABEL,
    _R_TREATMENT_01,
    _R_TREATMENT_LABEL,
    Problem,
    SiteDataError,
    _merge,
)
from dpate.schemas.site_preparation import PreparationReport, SiteData, _prepare
from dpate.schemas.site_reading import _needed_columns
from dpate.schemas.source_csv import CsvSource
from dpate.schemas.sources import DataSource, open_source
from dpate.schemas.spec import StudySpec

__all__ = ["BATCH_ROWS", "SiteBatch", "iter_site_batches", "prepare_source"]

#: Rows per batch: ~1 M rows keeps a batch's working set near 0.3 GB and the per-batch overhead
#: (pandera, pandas) below 1 % of the time.
BATCH_ROWS = 1 << 20


# validation in batches

#: The order a single pass lists a column's problems in (conversions first, then the schema's
#: checks); batches merge into this order so the message is the single pass's.
_RULE_ORDER = (
    _R_NOT_NUMBER,
    _R_OUTCOME_LABEL,
    _R_MISSING + " (study policy missing = 'reject')",
    _R_MISSING,
    "of the wrong type for this column",
    _R_TREATMENT_01,
    _R_TREATMENT_LABEL,
    _R_NOT_FINITE,
    _R_OUT_OF_BOUNDS,
    _R_LEVEL,
    _R_EDGES,
)


@dataclass(frozen=True, repr=False, eq=False)
class SiteBatch:
    """One validated batch: ``(w, y, x)`` of its used rows, where it starts in the source
    (``offset``, rows read before it) and its operator-only report. ``repr`` shows sizes only."""

    w: np.ndarray
    y: np.ndarray
    x: np.ndarray
    offset: int
    report: PreparationReport

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    def __repr__(self) -> str:
        return f"SiteBatch(offset={self.offset}, n={self.n})"


def _frame(batch: pa.RecordBatch) -> pd.DataFrame:
    # as site_reading._as_frame: dictionary text -> Categorical, other text -> Arrow strings
    return batch.to_pandas(
        types_mapper={pa.string(): pd.StringDtype("pyarrow")}.get, split_blocks=True
    )


class _Stage:
    value = "reading"


def _validated(
    source: DataSource, spec: StudySpec, batch_rows: int, stage: _Stage
) -> Iterator[SiteBatch]:
    """Validate every batch; yield the good ones while no batch has failed; after the last
    batch raise one SiteDataError with every problem (counts added, positions shifted)."""
    problems: list[Problem] = []
    offset = 0
    for batch in source.batches(spec, batch_rows):
        stage.value = "reading"
        frame = _frame(batch)
        stage.value = "validation"
        failure: SiteDataError | None = None
        try:
            data = _prepare(frame, spec)
        except SiteDataError as exc:
            failure = exc
        del frame
        if failure is not None:
            problems += [
                Problem(p.column, p.rule, p.count, tuple(r + offset for r in p.rows))
                for p in failure.problems
            ]
            del failure
        elif not problems:
            yield SiteBatch(data.w, data.y, data.x, offset, data.report)
        offset += batch.num_rows
        stage.value = "reading"
    if problems:
        cols = {c: i for i, c in enumerate(_needed_columns(spec))}
        rules = {r: i for i, r in enumerate(_RULE_ORDER)}
        merged = sorted(
            _merge(problems),
            key=lambda p: (cols.get(p.column, len(cols)), rules.get(p.rule, len(rules))),
        )
        raise SiteDataError(merged, n_rows=offset)


def _redacted_run(run: Any, stage: _Stage) -> Any:
    """Run ``run()`` as prepare_site_data does: warnings swallowed and counted, any exception
    that is not a SiteDataError replaced by one naming the stage and its type only."""
    failure: SiteDataError | None = None
    result = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run()
        except SiteDataError as exc:
            failure = exc
        except Exception as exc:  # pandas / pyarrow / pandera texts may hold values: redact
            failure = SiteDataError(
                [],
                hint=f"the site data could not be processed during {stage.value} "
                f"({type(exc).__name__}; its message is withheld because it may quote record "
                f"values)",
            )
    if failure is not None:
        raise failure
    return result, len(caught)


def _as_source(
    source: str | Path | DataSource,
    spec: StudySpec,
    fmt: str | None,
    query: str | None,
    secret: str | None,
) -> DataSource:
    """``source`` itself, or the source at that location (:func:`open_source`)."""
    if isinstance(source, (str, Path)):
        return open_source(source, spec, fmt, query=query, secret=secret)
    return source


def iter_site_batches(
    source: str | Path | DataSource,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[SiteBatch]:
    """The site's validated ``(w, y, x)``, one batch at a time (nothing kept between batches).

    Every batch is validated as :func:`~dpate.schemas.site_preparation.prepare_site_data` validates a file.
    Once a batch fails no more batches are yielded; the remaining ones are still validated and a
    :class:`~dpate.schemas.site_errors.SiteDataError` with every problem is raised after the last one.
    **A consumer must therefore discard what it accumulated unless the iteration ends normally**
    (:func:`stream_cell_statistics` does). Warnings are swallowed; reader errors redacted."""
    src = _as_source(source, spec, fmt, query, secret)
    stage = _Stage()
    it = _validated(src, spec, batch_rows, stage)
    while True:
        batch, _ = _redacted_run(lambda: next(it, None), stage)
        if batch is None:
            return
        yield batch


def prepare_source(
    source: str | Path | DataSource,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> SiteData:
    """:func:`~dpate.schemas.site_preparation.prepare_site_data` for a location, in batches: the same
    ``SiteData``, report (its counts summed over batches) and errors, word for word. Keeps
    ``(w, y, x)`` (17 bytes a row, preallocated when the source knows its row count) and one
    batch's working set."""
    src = _as_source(source, spec, fmt, query, secret)
    stage = _Stage()

    def run() -> SiteData:
        if isinstance(src, CsvSource):
            src.probe(spec)  # the parsing pass counts the rows: (w, y, x) preallocated
        total = src.count_rows()
        parts = _Collected(total)
        for b in _validated(src, spec, batch_rows, stage):
            parts.add(b)
        return parts.site_data(spec)

    data: SiteData
    data, n_warnings = _redacted_run(run, stage)
    if n_warnings:
        data = SiteData(
            data.w,
            data.y,
            data.x,
            data.domain_size,
            data.bound,
            PreparationReport(**{**data.report.__dict__, "warnings_suppressed": n_warnings}),
        )
    return data


class _Collected:
    """``(w, y, x)`` of the batches, in preallocated arrays when the row count is known."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.n = 0
        self.reports: list[PreparationReport] = []
        if total is not None:
            self.w = np.empty(total, np.int8)
            self.y = np.empty(total, np.float64)
            self.x = np.empty(total, np.int64)
        else:
            self.parts: list[SiteBatch] = []

    def add(self, b: SiteBatch) -> None:
        self.reports.append(b.report)
        if self.total is not None and self.n + b.n <= self.total:
            self.w[self.n : self.n + b.n] = b.w
            self.y[self.n : self.n + b.n] = b.y
            self.x[self.n : self.n + b.n] = b.x
        elif self.total is not None:  # more rows than the metadata said: fall back
            self.parts = [
                SiteBatch(self.w[: self.n], self.y[: self.n], self.x[: self.n], 0, b.report)
            ]
            self.total = None
            self.parts.append(b)
        else:
            self.parts.append(b)
        self.n += b.n

    def site_data(self, spec: StudySpec) -> SiteData:
        if self.total is not None:
            w, y, x = self.w[: self.n], self.y[: self.n], self.x[: self.n]
        elif len(self.parts) == 1:
            w, y, x = self.parts[0].w, self.parts[0].y, self.parts[0].x
        else:
            w = np.concatenate([p.w for p in self.parts]) if self.parts else np.empty(0, np.int8)
            y = np.concatenate([p.y for p in self.parts]) if self.parts else np.empty(0)
            x = np.concatenate([p.x for p in self.parts]) if self.parts else np.empty(0, np.int64)
            self.parts = []
        return SiteData(w, y, x, spec.domain_size, spec.outcome.bound, _sum_reports(self.reports))


def _sum_reports(reports: Iterable[PreparationReport]) -> PreparationReport:
    n_read = n_used = dropped = low = high = 0
    missing: dict[str, int] = {}
    mapped: dict[str, int] = {}
    for r in reports:
        n_read += r.n_read
        n_used += r.n_used
        dropped += r.dropped_missing
        low += r.clipped_low
        high += r.clipped_high
        for k, v in r.missing_by_column.items():
            missing[k] = missing.get(k, 0) + v
        for k, v in r.mapped_to_other.items():
            mapped[k] = mapped.get(k, 0) + v
    return PreparationReport(
        n_read=n_read,
        n_used=n_used,
        dropped_missing=dropped,
        missing_by_column=missing,
        clipped_low=low,
        clipped_high=high,
        mapped_to_other=mapped,
    )
