"""Arrow helpers shared by the site's file and database sources: an empty batch of a schema (and
a reader's batches with one when it has none), a local file opened for plain reads, and text
columns dictionary-encoded as the spec compares them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from dpate.schemas.site_reading import _dictionary_encode, _open


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def _or_empty(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of ``batches``, or one empty batch of ``schema`` when there is none:
    a source with no rows still yields one batch, with its columns."""
    seen = False
    for batch in batches:
        if batch.num_rows:
            seen = True
            yield batch
    if not seen:
        yield _empty_batch(schema)


def _open_plain(location: str) -> Any:
    """A local file is read with plain reads, not memory-mapped: a mapping's pages count in the
    process's resident memory (up to the file's size) although only a batch is in use.
    (Compressed CSV and URLs: as :func:`~dpate.schemas.site_reading.read_site_table` opens them.)"""
    low = location.lower()
    local = "://" not in location or location.startswith("file://")
    if local and not low.endswith((".gz", ".bz2", ".zst")):
        return pa.OSFile(location.removeprefix("file://"), "rb")
    return _open(location)


def _encode(batch: pa.RecordBatch, text_cols: list[str]) -> pa.RecordBatch:
    if not text_cols:
        return batch
    table = _dictionary_encode(pa.Table.from_batches([batch]), text_cols)
    return table.combine_chunks().to_batches()[0] if table.num_rows else batch
