"""Markdown reference tables generated from pydantic fields: a row per field, a column per
:class:`Column`, every cell read from the field's own declaration (its description, annotation,
default and ``json_schema_extra``), so a reference page cannot drift from the code.

Two pages carry such tables: docs/reference/pipeline.md, "Settings" (:func:`dpate.settings.settings_table`,
from :class:`dpate.settings.SiteSettings`) and docs/reference/study-spec.md, "Reference"
(:func:`dpate.schemas.spec.reference.spec_reference`, from the study spec's models). Each table
sits between two marker comments; a test compares it with the generated one and rewrites it
under ``python -m pytest FILE --regenerate`` (docs/how-to/extending.md, "Pinned outputs and golden
files").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo

__all__ = ["Column", "extra", "field_table"]


@dataclass(frozen=True)
class Column:
    """One column of a field table: its header and the cell of a field ``(name, field)``."""

    header: str
    cell: Callable[[str, FieldInfo], str]


def extra(field: FieldInfo) -> dict[str, Any]:
    """The field's ``json_schema_extra`` (a dict; empty when it has none)."""
    found = field.json_schema_extra
    return dict(found) if isinstance(found, dict) else {}


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` escaped, line breaks joined."""
    return " ".join(text.split("\n")).replace("\\|", "|").replace("|", "\\|")


def field_table(fields: Iterable[tuple[str, FieldInfo]], columns: Sequence[Column]) -> str:
    """The Markdown table of ``fields`` (``(name, field)`` pairs, e.g. a model's
    ``model_fields.items()``), one row each, ``columns`` left to right; ends with a newline."""
    rows = [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for name, field in fields:
        rows.append("| " + " | ".join(_cell(c.cell(name, field)) for c in columns) + " |")
    return "\n".join(rows) + "\n"
