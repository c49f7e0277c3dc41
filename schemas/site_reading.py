"""Reading a site's records: only the spec's columns of a CSV or Parquet file (local path or
fsspec URL), a pandas DataFrame or a pyarrow Table, as the frame that preparation validates.

Text columns the spec gives text values for are read as dictionaries (validation and binning then
touch each distinct value once, not every row). A reader's own error text may quote file contents:
it is dropped, and :class:`~dpate.schemas.site_errors.SiteDataError` names the file, the missing
columns or the type of the reader's error only. Batched reading of a location lives in
:mod:`dpate.schemas.sources` (and the modules it names), which share the helpers here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dpate.schemas.site_errors import SiteDataError, _missing_columns, _Redacted
from dpate.schemas.spec import StudySpec
from dpate.schemas.spec_columns import CategoricalCovariate

__all__ = ["read_site_table"]

_DICT_STRING = pa.dictionary(pa.int32(), pa.string())


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


def _open(location: str | Path) -> Any:
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
    failure: SiteDataError | None = None
    try:
        with _open(location) as fh:
            if fmt == "parquet":
                table = _read_parquet(fh, spec)
            else:
                table = _read_csv(fh, location, spec)
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


def _read_parquet(fh: Any, spec: StudySpec) -> pa.Table:
    needed = _needed_columns(spec)
    text_cols = _string_columns(spec)
    pf = pq.ParquetFile(fh)
    names = pf.schema_arrow.names
    missing = [c for c in needed if c not in names]
    if missing:
        raise _Redacted(_missing_columns(missing))
    pf = pq.ParquetFile(fh, metadata=pf.metadata, read_dictionary=text_cols)
    table = pf.read(columns=needed)
    # text columns as dictionaries: validation and binning then touch each distinct value once,
    # not every row
    return _dictionary_encode(table, text_cols)


def _read_csv(fh: Any, location: str | Path, spec: StudySpec) -> pa.Table:
    needed = _needed_columns(spec)
    string_cols = set(_string_columns(spec))
    convert = pacsv.ConvertOptions(
        include_columns=needed,
        include_missing_columns=True,
        column_types={c: _DICT_STRING for c in string_cols},
        strings_can_be_null=True,
    )
    read = pacsv.ReadOptions(block_size=1 << 24)
    table = pacsv.read_csv(fh, read_options=read, convert_options=convert)
    # include_missing_columns fills absent columns with nulls; tell them apart by the header,
    # which names columns (schema), never values.
    header = _csv_header(location)
    missing = [c for c in needed if c not in header]
    if missing:
        raise _Redacted(_missing_columns(missing))
    return table


def _shown(location: str) -> str:
    """The location as a message may show it: no password (schemas/source_redaction.py)."""
    from dpate.schemas.source_redaction import redact_location

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


def _as_frame(source: Any, spec: StudySpec, fmt: str | None) -> pd.DataFrame:
    """The spec's columns of a DataFrame, a pyarrow Table or a file, as a pandas frame."""
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
