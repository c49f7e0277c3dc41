"""A site's Parquet data as a data source: one file, or a partitioned dataset read file by file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpate.schemas.arrow_batches import _empty_batch, _encode, _open_plain, _or_empty
from dpate.schemas.site_errors import _missing_columns, _Redacted
from dpate.schemas.site_reading import _needed_columns, _string_columns
from dpate.schemas.source_redaction import _guarded, redact_location
from dpate.schemas.spec import StudySpec

__all__ = ["ParquetDatasetSource", "ParquetFileSource"]


@dataclass
class ParquetFileSource:
    """One Parquet file (local path or fsspec URL), read ``batch_rows`` rows at a time; text
    columns the spec compares to labels are read as dictionaries."""

    location: str
    fmt: str = "parquet"

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def count_rows(self) -> int | None:
        import pyarrow.parquet as pq

        try:
            with _open_plain(self.location) as fh:
                return int(pq.ParquetFile(fh).metadata.num_rows)
        except Exception:  # the batches report the error
            return None

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        def read() -> Iterator[pa.RecordBatch]:
            needed = _needed_columns(spec)
            text_cols = _string_columns(spec)
            with _open_plain(self.location) as fh:
                pf = pq.ParquetFile(fh, pre_buffer=False)
                missing = [c for c in needed if c not in pf.schema_arrow.names]
                if missing:
                    raise _Redacted(_missing_columns(missing))
                # pre_buffer=False: with it, iter_batches buffers every row group's column chunks
                # up front (the whole file in memory, measured in bench/bench_sources.py)
                pf = pq.ParquetFile(
                    fh, metadata=pf.metadata, read_dictionary=text_cols, pre_buffer=False
                )
                seen = False
                for batch in pf.iter_batches(batch_size=batch_rows, columns=needed):
                    seen = True
                    yield _encode(batch, text_cols)
                if not seen:
                    yield _empty_batch(pa.schema([pf.schema_arrow.field(c) for c in needed]))

        return _guarded(self.name, self.fmt, read)


@dataclass
class ParquetDatasetSource:
    """A partitioned Parquet dataset: a directory of Parquet files (hive partitions such as
    ``year=2024/`` become columns), local or any URL pyarrow or fsspec can list. Files are read in
    path order (row positions in messages count in that order)."""

    location: str
    fmt: str = "parquet-dataset"

    @property
    def name(self) -> str:
        return redact_location(self.location)

    def _dataset(self, text_cols: list[str] | None = None) -> Any:
        import pyarrow.dataset as ds

        fmt = ds.ParquetFileFormat(
            read_options=ds.ParquetReadOptions(dictionary_columns=text_cols or [])
        )
        loc = self.location
        if "://" in loc and not loc.startswith("file://"):
            import pyarrow.fs as pafs

            try:
                fs, path = pafs.FileSystem.from_uri(loc)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
                import fsspec

                fsys, path = fsspec.core.url_to_fs(loc)
                fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsys))
            return ds.dataset(path, format=fmt, filesystem=fs, partitioning="hive")
        return ds.dataset(loc.removeprefix("file://"), format=fmt, partitioning="hive")

    def count_rows(self) -> int | None:
        try:
            return int(self._dataset().count_rows())
        except Exception:
            return None

    def batches(self, spec: StudySpec, batch_rows: int) -> Iterator[pa.RecordBatch]:
        def read() -> Iterator[pa.RecordBatch]:
            needed = _needed_columns(spec)
            text_cols = _string_columns(spec)
            dataset = self._dataset(text_cols)
            missing = [c for c in needed if c not in dataset.schema.names]
            if missing:
                raise _Redacted(_missing_columns(missing))
            # file by file, pulled synchronously: the dataset scanner reads ahead of a slow
            # consumer (1.5 GB queued at 10^8 rows, bench/bench_sources.py)
            schema = pa.schema([dataset.schema.field(c) for c in needed])
            batches = _fragment_batches(dataset, schema, text_cols, batch_rows)
            for batch in _or_empty(batches, schema):
                yield _encode(batch, text_cols) if batch.num_rows else batch

        return _guarded(self.name, self.fmt, read)


def _fragment_batches(
    dataset: Any, schema: pa.Schema, text_cols: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """A dataset's rows in ``schema``, one Parquet file at a time (path order), without
    pre-buffering: partition keys become constant columns, a column a file lacks is null (as the
    dataset scanner does), and every column is cast to the dataset's type."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    for frag in dataset.get_fragments():
        keys = ds.get_partition_keys(frag.partition_expression) or {}
        with dataset.filesystem.open_input_file(frag.path) as fh:
            pf = pq.ParquetFile(fh, pre_buffer=False, read_dictionary=text_cols)
            in_file = [c for c in schema.names if c in pf.schema_arrow.names and c not in keys]
            for batch in pf.iter_batches(batch_size=batch_rows, columns=in_file):
                n = batch.num_rows
                arrays = []
                for field in schema:
                    if field.name in keys:
                        arr = pa.array([keys[field.name]] * n).cast(field.type)
                    elif field.name in in_file:
                        arr = batch.column(field.name)
                        if arr.type != field.type and not (
                            field.name in text_cols and pa.types.is_dictionary(arr.type)
                        ):
                            arr = arr.cast(field.type)
                    else:
                        arr = pa.nulls(n, field.type)
                    arrays.append(arr)
                yield pa.RecordBatch.from_arrays(arrays, names=schema.names)
