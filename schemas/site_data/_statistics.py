"""The queries a site's release runs on its engine: the validation summary and the per-cell exact
grid sums (Algorithm 1's statistics, from the records read one stratum at a time: ``_matching.py``),
and the records path.

What comes back from the engine is counts and sums, never records, except in two places: the first
row positions of a rule's violations (for the operator's log only, on the error path), and the
matching estimators' records, read one stratum at a time in stratum order (``_matching.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpate.schemas.spec import StudySpec

from ._codes import MAPPED, MISSING, NOT_NUMBER, RecordCodes
from ._errors import MAX_ROWS_LISTED, Problem, SiteDataError
from ._records import PreparationReport
from ._rules import double, grid_value, record_codes
from ._table import POSITION, SiteTable

__all__ = [
    "Summary",
    "ibis_all",
    "records_of",
    "site_summary",
]


@dataclass(frozen=True)
class Summary:
    """The validation summary: the operator's report, each rule broken with its count and the
    code that stands for it, and how many kept outcomes are neither 0 nor B (a binary outcome)."""

    report: PreparationReport
    broken: list[tuple[int, str, int, int]]
    not_binary: int


def site_summary(
    site: SiteTable,
    codes: RecordCodes,
    spec: StudySpec,
    *,
    centred: bool | None = None,
    n_guess: int | None = None,
) -> tuple[Summary, Any]:
    """The validation summary and (``centred`` not None) the per-cell statistics, in one
    ``GROUP BY`` of the site's rows by their codes (:func:`._rules.record_codes`): one integer
    key, a sum of one CASE of constants per column (:meth:`._rules.RecordCodes.key_expr`), with
    three aggregates, the count and the exact integer sums of each record's grid values
    (:func:`_grid_sums`). On clean data the groups are the (stratum, arm, clipped or not)
    combinations; every count the summary reports, and each group's stratum and arm, are
    decoded from the codes.

    On PostgreSQL the outcome's codes are counted per group instead of grouped by
    (:meth:`._rules.RecordCodes.outcome_counts`): its planner estimates a key over the outcome
    column to have as many groups as rows and then aggregates in one process; without it, in
    parallel workers. Where outcomes are missing under ``missing = "drop"`` their groups' sums
    hold them, and the query runs again grouped by the outcome's codes too.

    The grid depends on the number of records used, known only after the query: it is taken
    from ``n_guess`` and the sums are computed again when the count lands in another grid
    (:func:`dpate_core.statistics.grid_bits` changes only at powers of two)."""
    from dpate_core.statistics import CellStatistics, grid_bits

    grid = grid_bits(max(n_guess or 1, 1), centred=bool(centred))
    in_key = site.dialect != "postgres"
    while True:
        keys, n, sums, exact = _groups(site, codes, spec, grid, centred, in_key)
        summary = _summary(codes, keys, n)
        if centred is None or summary.broken or summary.not_binary:
            return summary, None
        if not exact:  # outcomes missing (dropped) are in their groups' sums: group by them
            in_key = True
            continue
        needed = grid_bits(max(summary.report.n_used, 1), centred=centred)
        if needed == grid:
            break
        grid = needed
    assert sums is not None
    kept = codes.kept(keys)
    g = 2 * codes.strata(keys[kept]) + keys[kept, 0]
    size = 2 * spec.domain_size
    counts, cell_sums, squares = (np.zeros(size, np.int64) for _ in range(3))
    for cell, values in ((counts, n), (cell_sums, sums[0]), (squares, sums[1])):
        np.add.at(cell, g, values[kept])
    k, m = grid
    return summary, CellStatistics(
        counts, cell_sums, squares, float(spec.outcome.bound), k, m, centred
    )


def _groups(
    site: SiteTable,
    codes: RecordCodes,
    spec: StudySpec,
    grid: tuple[int, int],
    centred: bool | None,
    in_key: bool,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None, bool]:
    """The one ``GROUP BY`` of :func:`site_summary`: ``(codes, sizes, sums, exact)`` per group
    of rows sharing every code (a row of ``codes`` each), ``sums`` the grid sums (None without
    ``centred``). ``in_key`` False: the outcome's codes counted per group of the other codes
    (:meth:`._rules.RecordCodes.outcome_counts`), each such group's sums on the first of its
    groups; ``exact`` False when some outcome is missing or not a number (its group's sums then
    hold it)."""
    key = codes.key_expr(outcome=in_key)
    if key is None:  # too many codes for one integer: group by the code columns
        t = codes.table
        terms = _grid_sums(t._y, spec, grid, bool(centred)) if centred is not None else {}
        rows = t.mutate(**terms)
        aggs: dict[str, Any] = {"_n": rows.count()}
        aggs |= {f"_{name}": rows[name].sum() for name in terms}
        groups = site.to_arrow(rows.group_by(codes.keys).aggregate(**aggs), small=True)
        keys = np.column_stack([_codes(groups.column(k)) for k in codes.keys])
        n = _ints(groups.column("_n"))
        sums = None
        if terms:
            sums = (_ints(groups.column("__s")), _ints(groups.column("__q")))
        return keys, n, sums, True
    b = codes.base
    assert codes.outcome is not None
    # grouped by the outcome's codes, a group's outcomes are all within [0, B] or all clipped
    # to the same bound: on DuckDB (whose float arithmetic overflows to infinity, where
    # PostgreSQL's raises) the grid values of the unclipped outcome, and the clipped groups'
    # sums set from their counts (_clipped_sums)
    unclipped = in_key and site.dialect == "duckdb"
    y = codes.outcome.v if unclipped else codes.used
    terms = _grid_sums(y, spec, grid, bool(centred)) if centred is not None else {}
    aggs = {"_n": b.count()} | {f"_{name}": v.sum() for name, v in terms.items()}
    extra = {} if in_key else codes.outcome_counts()
    groups = site.to_arrow(b.group_by(_key=key).aggregate(**aggs, **extra), small=True)
    keys = codes.codes_of(_codes(groups.column("_key")))
    n = _ints(groups.column("_n"))
    if in_key:
        if not terms:
            return keys, n, None, True
        if not unclipped:
            return keys, n, (_ints(groups.column("__s")), _ints(groups.column("__q"))), True
        raw = (groups.column("__s").to_pylist(), groups.column("__q").to_pylist())
        return keys, n, _clipped_sums(keys, n, raw, grid, bool(centred)), True
    sums = None
    if terms:
        sums = (_ints(groups.column("__s")), _ints(groups.column("__q")))
    counts = {name: _ints(groups.column(name)) for name in extra}
    keys, sizes, source, exact = codes.expand(keys, n, counts)
    if sums is not None:  # each group's sums on one of the groups it splits into
        _, first = np.unique(source, return_index=True)
        on = np.zeros(source.size, dtype=bool)
        on[first] = True
        sums = tuple(np.where(on, s[source], 0) for s in sums)  # type: ignore[assignment]
    return keys, sizes, sums, exact


def _clipped_sums(
    keys: np.ndarray,
    n: np.ndarray,
    raw: tuple[list[Any], list[Any]],
    grid: tuple[int, int],
    centred: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The grid sums of groups by every code, from the engine's sums of the unclipped outcome's
    grid values: a group within ``[0, B]`` (outcome code 0 or 3) keeps its sums; a group
    clipped up from below 0 (code 1) or down from above B (code 2) sums ``n`` times the grid
    values of ``Y/B = 0`` or ``1``, computed as the core's kernel computes them; the outcomes of
    any other group are never used (0)."""
    k, m = grid
    outcome = keys[:, 1]
    inside = np.flatnonzero((outcome == 0) | (outcome == 3))
    sums, squares = (np.zeros(n.size, dtype=np.int64) for _ in range(2))
    sums[inside] = _ints([raw[0][i] for i in inside])
    squares[inside] = _ints([raw[1][i] for i in inside])
    for code, u in ((1, 0.0), (2, 1.0)):
        d = u - 0.5 if centred else u
        s = np.rint(u * 2.0**k) - (2.0 ** (k - 1) if centred else 0.0)
        rows = outcome == code
        sums[rows] = n[rows] * int(s)
        squares[rows] = n[rows] * int(np.rint(d * d * 2.0**m))
    return sums, squares


def _grid_sums(y: Any, spec: StudySpec, grid: tuple[int, int], centred: bool) -> dict[str, Any]:
    """Each record's grid values (``rint(Y/B 2^k) - 2^(k-1)`` and ``rint((Y/B - 1/2)^2 2^m)``,
    or ``Y`` and ``Y^2`` not centred) of the outcome used ``y``:
    :func:`dpate_core.statistics.cell_statistics`'s per-record terms, with exact float operations
    (:func:`._rules.grid_value`). ``Y/B`` is ``Y`` times ``1/B`` for ``B`` a power of two (the
    same correctly rounded quotient), ``Y`` itself for ``B = 1``."""
    k, m = grid
    bound = float(spec.outcome.bound)
    u = y  # in [0, 1] on every row (record_codes)
    mantissa, _ = math.frexp(bound)
    if mantissa == 0.5 and 2.0**-1000 < bound < 2.0**1000:  # 1/B exact: Y * (1/B) is Y / B
        if bound != 1.0:
            u = y * double(1.0 / bound)
    else:
        u = y / double(bound)
    s = grid_value(u * double(2.0**k))
    if centred:
        s = s - double(2.0 ** (k - 1))
    d = u - double(0.5) if centred else u
    return {"_s": s, "_q": grid_value(d * d * double(2.0**m))}


def _summary(codes: RecordCodes, keys: np.ndarray, n: np.ndarray) -> Summary:
    """The summary of the groups ``keys`` (a row of codes per group) holding ``n`` rows each."""
    kept = codes.kept(keys)
    cols = codes.columns
    missing = {col.column: int(n[keys[:, j] == MISSING].sum()) for j, col in enumerate(cols)}
    outcome = keys[:, 1]
    report = PreparationReport(
        n_read=int(n.sum()),
        n_used=int(n[kept].sum()),
        dropped_missing=int(n[~kept].sum()),
        missing_by_column={c: v for c, v in missing.items() if v},
        clipped_low=int(n[kept & (outcome == 1)].sum()),
        clipped_high=int(n[kept & (outcome == 2)].sum()),
        mapped_to_other={
            col.column: int(n[kept & (keys[:, j] == MAPPED)].sum())
            for j, col in enumerate(cols)
            if col.other is not None and (n[kept & (keys[:, j] == MAPPED)].sum())
        },
        clipped_covariates={
            col.column: int(n[kept & ((keys[:, j] == 1) | (keys[:, j] == 2))].sum())
            for j, col in enumerate(cols)
            if col.bounded and n[kept & ((keys[:, j] == 1) | (keys[:, j] == 2))].sum()
        },
    )
    broken = [(j, rule, code, int(n[rows].sum())) for j, rule, code, rows in codes.problems(keys)]
    return Summary(report, broken, int(n[kept & (outcome == 3)].sum()))


def raise_problems(site: SiteTable, spec: StudySpec, summary: Summary) -> None:
    """Raise the :class:`SiteDataError` of a summary with broken rules: columns, rules, counts
    and each rule's first row positions (one small query per rule; the error path only)."""
    codes = record_codes(site.positioned(), spec, site.dialect)
    t = codes.table
    kept = None
    if not codes.reject:
        kept = ibis_all(t[k] != MISSING for k in codes.keys)
    problems = []
    for j, rule, code, count in summary.broken:
        rows = t[f"_k{j}"] == code
        if kept is not None and code not in (NOT_NUMBER, MISSING):
            rows = rows & kept
        first = t.filter(rows).select(POSITION).order_by(POSITION).limit(MAX_ROWS_LISTED)
        positions = tuple(int(v) for v in site.to_arrow(first).column(0).to_pylist())
        problems.append(Problem(codes.columns[j].column, rule, count, positions))
    raise SiteDataError(problems, n_rows=summary.report.n_read)


def ibis_all(flags: Any) -> Any:
    """The conjunction of boolean expressions."""
    out = None
    for f in flags:
        out = f if out is None else (out & f)
    return out


def _codes(column: Any) -> np.ndarray:
    """A column of the groups' codes (never null) as int64: one value per group, read through
    Python integers (pyarrow's ``to_numpy`` loads pandas, a third of ``dpate check``'s time)."""
    return np.asarray(column.to_pylist(), dtype=np.int64)


def _ints(column: Any) -> np.ndarray:
    """An engine's integer sums (int64, HUGEINT or NUMERIC, or doubles holding integers below
    ``2^53``; an Arrow column or a list) as int64, exactly."""
    values = column if isinstance(column, list) else column.to_pylist()
    out = np.array([int(v) for v in values], dtype=np.int64)
    if any(float(v) != float(o) for v, o in zip(values, out.tolist(), strict=True)):
        raise ValueError("an engine's sum is not an integer")  # pragma: no cover
    return out


def records_of(
    site: SiteTable, codes: RecordCodes
) -> tuple[Summary, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
    """The records path (tests and simulations; a release of an estimator that plans from
    records): every row's codes and outcome in one query, in the source's order; the summary
    computed from them as :func:`site_summary` computes it from its groups, and the kept records'
    ``(w, y, x, z)``: ``z`` the ``(N, q)`` clipped values of the covariates with public bounds
    and no bins (None without any). Raises the :class:`SiteDataError` of the rules broken, with
    the rows' positions."""
    table = site.to_arrow(codes.table.select(*codes.keys, "_y", *codes.values))
    keys = np.column_stack(
        [np.asarray(table.column(k).to_numpy(zero_copy_only=False)) for k in codes.keys]
    ).astype(np.int64)
    y = np.asarray(table.column("_y").to_numpy(zero_copy_only=False), dtype=np.float64)
    z = (
        np.column_stack(
            [
                np.asarray(table.column(v).to_numpy(zero_copy_only=False), dtype=np.float64)
                for v in codes.values
            ]
        )
        if codes.values
        else None
    )
    del table
    summary = _summary(codes, keys, np.ones(keys.shape[0], dtype=np.int64))
    if summary.broken:
        problems = []
        for j, rule, _, rows in codes.problems(keys):
            first = tuple(int(i) for i in np.flatnonzero(rows)[:MAX_ROWS_LISTED])
            problems.append(Problem(codes.columns[j].column, rule, int(rows.sum()), first))
        raise SiteDataError(problems, n_rows=summary.report.n_read)
    kept = codes.kept(keys)
    return summary, (
        np.ascontiguousarray(keys[kept, 0], dtype=np.int8),
        np.ascontiguousarray(y[kept], dtype=np.float64),
        np.ascontiguousarray(codes.strata(keys[kept]), dtype=np.int64),
        None if z is None else np.ascontiguousarray(z[kept], dtype=np.float64),
    )
