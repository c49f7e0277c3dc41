"""Writing the tidy tables: CSV (and parquet for ``experiments``), one row per dict; and the
Markdown tables of the summaries (``claims.md``, ``coverage.md``, ...), one line per row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["markdown_table", "write_csv", "write_csv_columns", "write_table"]


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """``rows`` as CSV, columns in the order of the first row's keys."""
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)


def write_csv_columns(rows: Sequence[dict[str, Any]], path: Path, columns: Sequence[str]) -> None:
    """``rows`` as CSV with exactly ``columns`` (so that an empty run still has its header)."""
    import pandas as pd

    pd.DataFrame(rows, columns=list(columns)).to_csv(path, index=False)


def write_table(rows: Sequence[dict[str, Any]], stem: Path, columns: Sequence[str]) -> None:
    """``rows`` with ``columns`` as ``stem.csv`` and ``stem.parquet``."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(columns))
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    frame.to_parquet(stem.with_suffix(".parquet"), index=False)


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table's lines: ``| a | b |`` for the header, its ``|---|---|`` rule, then one
    line per row, each cell formatted as an f-string would (``f"{cell}"``)."""

    def line(cells: Iterable[object]) -> str:
        return "| " + " | ".join(f"{c}" for c in cells) + " |"

    return [line(columns), "|" + "---|" * len(columns), *(line(r) for r in rows)]
