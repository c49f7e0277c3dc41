"""The queries a site's release runs on its engine: the validation summary, the per-cell exact
grid sums, and Algorithm 1's statistics from the records read one stratum at a time.

What comes back from the engine is counts and sums, never records, except in two places: the first
row positions of a rule's violations (for the operator's log only, on the error path), and the
matching estimators' records, read one stratum at a time in stratum order (memory bounded by the
largest stratum, never by ``N``; the engine sorts, spilling to the site's own disk beyond its
memory limit).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpate.schemas.spec import StudySpec

from ._engine import POSITION, SiteTable
from ._errors import MAX_ROWS_LISTED, RULE_ORDER, Problem, SiteDataError
from ._records import PreparationReport
from ._rules import RecordRules, count_of, double, grid_value, needed_columns, record_rules

__all__ = [
    "PermutationOrder",
    "RecordOrder",
    "SecureOrder",
    "Summary",
    "cell_statistics_of",
    "matching_statistics_of",
    "records_of",
    "summarise",
]


@dataclass(frozen=True)
class Summary:
    """The validation summary: the operator's report, and each rule broken with its count."""

    report: PreparationReport
    broken: list[tuple[str, str, int]]
    not_binary: int


def _int_sum(flag: Any, table: Any) -> Any:
    """How many rows ``flag`` holds for (a constant flag: all rows or none)."""
    import ibis.expr.types as ir

    if isinstance(flag, ir.Scalar):
        return table.count() * count_of(flag)
    return count_of(flag).sum()


def summarise(site: SiteTable, rules: RecordRules, spec: StudySpec) -> Summary:
    """One aggregate over the site's rows: rows read and kept, every rule's violation count, each
    column's missing values, the clipped outcomes and the values mapped to ``other``."""
    t = site.table
    problems = rules.problems()
    aggs: dict[str, Any] = {"n_read": t.count(), "n_used": _int_sum(rules.kept, t)}
    for i, (_, _, flag) in enumerate(problems):
        aggs[f"p{i}"] = _int_sum(flag, t)
    for j, col in enumerate(rules.columns):
        aggs[f"m{j}"] = _int_sum(col.missing, t)
    aggs["clipped_low"] = _int_sum(rules.kept & rules.clipped_low, t)
    aggs["clipped_high"] = _int_sum(rules.kept & rules.clipped_high, t)
    mapped = list(rules.mapped.items())
    for j, (_, flag) in enumerate(mapped):
        aggs[f"o{j}"] = _int_sum(rules.kept & flag, t)
    if spec.outcome.binary:
        y, b = rules.y, double(spec.outcome.bound)
        aggs["not_binary"] = _int_sum(rules.kept & (y != double(0.0)) & (y != b), t)
    row = site.to_arrow(t.aggregate(**aggs)).to_pylist()[0]
    got = {k: int(v or 0) for k, v in row.items()}
    n_read, n_used = got["n_read"], got["n_used"]
    report = PreparationReport(
        n_read=n_read,
        n_used=n_used,
        dropped_missing=n_read - n_used,
        missing_by_column={
            col.column: got[f"m{j}"] for j, col in enumerate(rules.columns) if got[f"m{j}"]
        },
        clipped_low=got["clipped_low"],
        clipped_high=got["clipped_high"],
        mapped_to_other={c: got[f"o{j}"] for j, (c, _) in enumerate(mapped) if got[f"o{j}"]},
    )
    broken = [
        (column, rule, got[f"p{i}"]) for i, (column, rule, _) in enumerate(problems) if got[f"p{i}"]
    ]
    return Summary(report, broken, got.get("not_binary", 0))


def raise_problems(site: SiteTable, spec: StudySpec, summary: Summary) -> None:
    """Raise the :class:`SiteDataError` of a summary with broken rules: columns, rules, counts
    and each rule's first row positions (one small query per rule; the error path only)."""
    positioned = site.positioned()
    rules = record_rules(positioned, spec, site.dialect)
    flags = {(c, r): f for c, r, f in rules.problems()}
    problems = []
    for column, rule, count in summary.broken:
        first = (
            positioned.filter(flags[(column, rule)])
            .select(POSITION)
            .order_by(POSITION)
            .limit(MAX_ROWS_LISTED)
        )
        rows = tuple(int(v) for v in site.to_arrow(first).column(0).to_pylist())
        problems.append(Problem(column, rule, count, rows))
    cols = {c: i for i, c in enumerate(needed_columns(spec))}
    order = {r: i for i, r in enumerate(RULE_ORDER)}
    problems.sort(key=lambda p: (cols.get(p.column, len(cols)), order.get(p.rule, len(order))))
    raise SiteDataError(problems, n_rows=summary.report.n_read)


def _used(site: SiteTable, rules: RecordRules) -> Any:
    return site.table.mutate(_w=rules.w, _y=rules.y, _x=rules.x, _kept=rules.kept).filter(
        lambda r: r._kept
    )


def cell_statistics_of(
    site: SiteTable, rules: RecordRules, spec: StudySpec, n: int, *, centred: bool
) -> Any:
    """:func:`dpate_core.grid_sums.cell_statistics` of the kept records, computed by the engine:
    one ``GROUP BY`` of the cell ``g = 2 x + w`` with the count and the exact integer sums of each
    record's grid values (``rint(Y/B 2^k) - 2^(k-1)`` and ``rint((Y/B - 1/2)^2 2^m)``, or ``Y``
    and ``Y^2`` not centred), the grid ``(k, m)`` fixed by the public ``n``. The engine sums
    integers (DuckDB HUGEINT, PostgreSQL NUMERIC, Spark BIGINT), so the sums are exact and equal
    the core's kernel's."""
    from dpate_core.grid_sums import CellStatistics, grid_bits

    bound = float(spec.outcome.bound)
    k, m = grid_bits(max(n, 1), centred=centred)
    used = _used(site, rules)
    t = used._y / double(bound)
    s = grid_value(t * double(2.0**k))
    if centred:
        s = s - (1 << (k - 1))
    d = t - double(0.5) if centred else t
    q = grid_value(d * d * double(2.0**m))
    cells = (
        used.mutate(_g=used._x * 2 + used._w.cast("int64"), _s=s, _q=q)
        .group_by("_g")
        .aggregate(_n=lambda r: r.count(), _ss=lambda r: r._s.sum(), _qs=lambda r: r._q.sum())
    )
    table = site.to_arrow(cells)
    size = 2 * spec.domain_size
    counts = np.zeros(size, np.int64)
    sums = np.zeros(size, np.int64)
    squares = np.zeros(size, np.int64)
    g = np.asarray(table.column("_g").to_numpy(zero_copy_only=False), dtype=np.int64)
    counts[g] = _ints(table.column("_n"))
    sums[g] = _ints(table.column("_ss"))
    squares[g] = _ints(table.column("_qs"))
    if int(counts.sum()) != n:
        raise SiteDataError(
            [], hint=f"{site.name} changed while it was read: run the release again"
        )
    return CellStatistics(counts, sums, squares, bound, k, m, centred)


def _ints(column: Any) -> np.ndarray:
    """An engine's integer sums (int64, HUGEINT or NUMERIC) as int64, exactly."""
    values = column.to_pylist()
    return np.array([int(v) for v in values], dtype=np.int64)


class RecordOrder(Protocol):
    """The order Algorithm 1 ranks a stratum's records in: data-independent (docs/privacy.md,
    Record order). ``keys`` gives a chunk of records sort keys; within a stratum the records are
    ranked by key. ``needs_positions``: whether ``keys`` reads the records' positions (0-based,
    among the records used, in the source's order)."""

    needs_positions: bool

    def keys(self, size: int, positions: np.ndarray | None) -> np.ndarray: ...


class SecureOrder:
    """A uniformly random order, drawn per release from the operating system's secure source:
    each chunk's keys are a random permutation of its rows, so within every stratum the order is
    uniformly random and independent of the data (and of the order the engine returns rows in)."""

    needs_positions = False

    def __init__(self) -> None:
        self._rng = np.random.default_rng(secrets.randbits(256))

    def keys(self, size: int, positions: np.ndarray | None) -> np.ndarray:
        return self._rng.permutation(size)


class PermutationOrder:
    """The order of a given permutation of the ``N`` records used (the records path's
    ``data_independent_order``): the record at position ``i`` among them is ranked by its place
    in ``permutation``. Reproduces a release from the records in that order (tests)."""

    needs_positions = True

    def __init__(self, permutation: np.ndarray) -> None:
        perm = np.asarray(permutation, dtype=np.int64)
        self._place = np.empty_like(perm)
        self._place[perm] = np.arange(perm.size)

    def keys(self, size: int, positions: np.ndarray | None) -> np.ndarray:
        assert positions is not None
        keys: np.ndarray = self._place[positions]
        return keys


def matching_statistics_of(
    site: SiteTable,
    spec: StudySpec,
    n: int,
    order: RecordOrder,
    batch_rows: int = 1 << 20,
) -> Any:
    """Algorithm 1's statistics (:func:`dpate_core.estimators.matching_statistics_of_strata`) of
    the kept records, read from the engine one stratum at a time in stratum order, each stratum's
    records ranked by ``order``. Memory: one batch plus the largest stratum."""
    import ibis

    from dpate_core.estimators import matching_statistics_of_strata

    rules = record_rules(site.table, spec, site.dialect)
    cols = {"_x": rules.x, "_w": rules.w, "_y": rules.y, "_kept": rules.kept}
    rows = site.table.mutate(**cols).filter(lambda r: r._kept).select("_x", "_w", "_y")
    keys = ["_x"]
    if order.needs_positions:  # the record's place among the records used, in source order
        rows = rows.mutate(_p=ibis.row_number())
        keys.append("_p")
    ordered = rows.order_by(keys)
    chunks = _strata_chunks(site.batches(ordered, batch_rows), order)
    return matching_statistics_of_strata(
        chunks, n=n, domain_size=spec.domain_size, bound=float(spec.outcome.bound)
    )


def _strata_chunks(
    batches: Iterator[Any], order: RecordOrder
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Whole strata from batches sorted by stratum, each stratum's records in ``order``."""
    carry: list[Any] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        x = batch.column("_x").to_numpy()
        last = x[-1]
        cut = int(np.searchsorted(x, last, side="left"))
        if cut > 0:
            yield _ranked([*carry, batch.slice(0, cut)], order)
            carry = []
        carry.append(batch.slice(cut))
    if carry:
        yield _ranked(carry, order)


def _ranked(parts: list[Any], order: RecordOrder) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pyarrow as pa

    table = pa.Table.from_batches(parts).combine_chunks()
    x = np.asarray(table.column("_x").to_numpy(), dtype=np.int64)
    w = np.asarray(table.column("_w").to_numpy(), dtype=np.int8)
    y = np.asarray(table.column("_y").to_numpy(), dtype=np.float64)
    pos = (
        np.asarray(table.column("_p").to_numpy(), dtype=np.int64) if order.needs_positions else None
    )
    del table
    keys = order.keys(x.size, pos)
    idx = np.lexsort((keys, x))
    return w[idx], y[idx], x[idx]


def records_of(site: SiteTable, rules: RecordRules) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept records' ``(w, y, x)`` in the source's order (tests and simulations only)."""
    table = site.to_arrow(_used(site, rules).select("_w", "_y", "_x"))
    return (
        np.ascontiguousarray(table.column("_w").to_numpy(zero_copy_only=False), dtype=np.int8),
        np.ascontiguousarray(table.column("_y").to_numpy(zero_copy_only=False), dtype=np.float64),
        np.ascontiguousarray(table.column("_x").to_numpy(zero_copy_only=False), dtype=np.int64),
    )
