"""A site's CSV file as a data source, streamed in blocks when that gives exactly one read's types."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpate.schemas.arrow_batches import _empty_batch, _open_plain, _or_empty
from dpate.schemas.site_reading import (
    _DICT_STRING,
    _csv_header,
    _needed_columns,
    _string_columns,
    read_site_table,
)
from dpate.schemas.source_redaction import _guarded, redact_location
from dpate.schemas.spec import StudySpec

__all__ = ["CsvSource"]


@dataclass
class CsvSource:
    """A CSV file (local path or fsspec URL; ``.gz``/``.bz2``/``.zst`` decompressed), streamed in
    blocks of ``block_size`` bytes when that gives exactly what one read gives.

    :func:`~dpate.schemas.site_reading.read_site_table` (one read) infers each column's type from all its
    blocks, widening it where a later block needs it; a streaming reader fixes it from the first
    block and fails on a later block that does not fit. So a file larger than one block is first
    parsed once in a streaming pass that keeps nothing (the spec's columns only): if it parses,
    the types are those of one read and the file is streamed again for validation; if not, it is
    read whole by ``read_site_table`` as before (same data, same messages; memory: the spec's
    columns as one Arrow table, text as dictionary)."""

    location: str
    fmt: str = "csv"
    #: the streaming reader's block: the first block fixes the types, and the parsing pass
    #: proves they are one read's for any block size; the reader keeps ~30 blocks in flight
    block_size: int = 1 << 20
    _probed: tuple[bool, int | None] | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def count_rows(self) -> int | None:
        """The rows counted by the parsing pass (it runs once; None when the file is read whole)."""
        return self._probed[1] if self._probed is not None and self._probed[0] else None

    def probe(self, spec: StudySpec) -> None:
        """Run the parsing pass now (so :meth:`count_rows` knows the rows)."""
        self._streams(spec)

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        if not self._streams(spec):
            table = read_site_table(self.location, spec, "csv")
            if table.num_rows == 0:
                yield from table.to_batches() or [_empty_batch(table.schema)]
                return
            yield from table.to_batches(max_chunksize=batch_rows)
            return

        def read() -> Iterator[Any]:
            # small blocks (the reader reads ~30 ahead) gathered into batches of batch_rows
            pending: list[pa.RecordBatch] = []
            count = 0
            empty = None
            for block in self._blocks(spec):
                if block.num_rows == 0 and empty is None:
                    empty = block
                start = 0
                while start < block.num_rows:
                    take = min(batch_rows - count, block.num_rows - start)
                    pending.append(block.slice(start, take))
                    count += take
                    start += take
                    if count == batch_rows:
                        yield pa.Table.from_batches(pending)
                        pending, count = [], 0
            if pending:
                yield pa.Table.from_batches(pending)
            elif empty is not None:  # a file without rows: one empty batch, as the others
                yield empty

        yield from _guarded(self.name, self.fmt, read)

    def _blocks(self, spec: StudySpec) -> Iterator[pa.RecordBatch]:
        import pyarrow.csv as pacsv

        needed = _needed_columns(spec)
        convert = pacsv.ConvertOptions(
            include_columns=needed,
            include_missing_columns=True,
            column_types={c: _DICT_STRING for c in _string_columns(spec)},
            strings_can_be_null=True,
        )
        with _open_plain(self.location) as fh:
            reader = pacsv.open_csv(
                fh,
                read_options=pacsv.ReadOptions(block_size=self.block_size),
                convert_options=convert,
            )
            yield from _or_empty(reader, reader.schema)

    def _streams(self, spec: StudySpec) -> bool:
        """True when streaming gives one read's table: the header has every column and the
        file parses block by block at the first block's types. Runs once (cached)."""
        if self._probed is None:
            self._probed = self._probe(spec)
        return self._probed[0]

    def _probe(self, spec: StudySpec) -> tuple[bool, int | None]:
        try:
            header = _csv_header(self.location)
            if any(c not in header for c in _needed_columns(spec)):
                return False, None  # read_site_table names the missing columns
            rows = 0
            for block in self._blocks(spec):
                rows += block.num_rows
            return True, rows
        except Exception:  # the reader's text is dropped; read_site_table reports the problem
            return False, None
