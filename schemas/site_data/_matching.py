"""Algorithm 1's statistics of a site's records, read from its engine one stratum at a time in
stratum order, each stratum's records ranked in a data-independent order (:class:`RecordOrder`:
:class:`SecureOrder` per release, :class:`PermutationOrder` to reproduce one). Memory: one batch
plus the largest stratum, never ``N`` (the engine sorts, spilling to the site's own disk beyond
its memory limit)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from dpate.schemas.spec import StudySpec

from ._codes import MISSING
from ._rules import record_codes
from ._statistics import ibis_all
from ._table import SiteTable

__all__ = ["PermutationOrder", "RecordOrder", "SecureOrder", "matching_statistics_of"]


class RecordOrder(Protocol):
    """The order Algorithm 1 ranks a stratum's records in: data-independent (docs/explanation/privacy.md,
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
    """Algorithm 1's statistics (:func:`dpate_core.statistics.matching_statistics_of_strata`) of
    the kept records, read from the engine one stratum at a time in stratum order, each stratum's
    records ranked by ``order``. Memory: one batch plus the largest stratum."""
    import ibis

    from dpate_core.statistics import matching_statistics_of_strata

    codes = record_codes(site.table, spec, site.dialect)
    t = codes.table
    kept = (
        ibis_all(t[k] >= 0 for k in codes.keys)
        if codes.reject
        else ibis_all(t[k] != MISSING for k in codes.keys)
    )
    rows = t.filter(kept).select(_x=codes.stratum_expr(t), _w=t._k0.cast("int8"), _y=t._y)
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
