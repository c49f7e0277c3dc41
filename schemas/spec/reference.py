"""The study spec's reference (docs/reference/study-spec.md, "Reference"), generated from the spec's models:
every table and key with its type and allowed values, its default, the estimators that accept it
and its meaning (the field's ``description``), in the tables of :mod:`dpate.field_tables` (the
machinery of the site settings table). Estimator-specific keys are found from the estimators
themselves (:mod:`dpate_core.mechanisms`): an option's top-level key, the ``[estimator_options]``
entries, a field whose ``json_schema_extra["accepted_by"]`` names the :class:`Estimator` flag an
estimator must have. A field's ``json_schema_extra`` may also give ``doc_type`` and
``doc_default`` where the annotation alone would read poorly."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Sequence
from fractions import Fraction
from types import NoneType, UnionType
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, WithJsonSchema
from pydantic.fields import FieldInfo

from dpate.field_tables import Column, extra, field_table
from dpate.schemas.spec import BalanceSpec, StudySpec
from dpate.schemas.spec._checks import keyed_options
from dpate.schemas.spec._columns import (
    CategoricalCovariate,
    NumericCovariate,
    OutcomeSpec,
    TreatmentSpec,
)
from dpate.schemas.spec._fields import _ID
from dpate.schemas.spec._sites import PrivacyCap, SiteSpec
from dpate_core.mechanisms import ESTIMATORS, Estimator

__all__ = ["SECTIONS", "spec_reference"]

#: the reference's sections: heading, what it says, the model whose fields are its rows
SECTIONS: tuple[tuple[str, str, type[BaseModel]], ...] = (
    ("Top level", "The keys before any table.", StudySpec),
    ("`[treatment]`", "The treatment column `W`.", TreatmentSpec),
    ("`[outcome]`", "The outcome `Y` and its public bound `B`.", OutcomeSpec),
    (
        '`[[covariates]]` with `kind = "categorical"`',
        "A categorical covariate: one stratum per level.",
        CategoricalCovariate,
    ),
    (
        '`[[covariates]]` with `kind = "numeric"`',
        "A numeric covariate: bin edges (one stratum per bin), or public bounds and no bins.",
        NumericCovariate,
    ),
    ("`[[sites]]`", "One entry per site.", SiteSpec),
    ("`lifetime_cap` (of a site)", "`lifetime_cap = { epsilon = ..., delta = ... }`.", PrivacyCap),
    ("`[balance]`", "The optional DP covariate-balance table.", BalanceSpec),
)


#: what every table below shares
INTRO = (
    "Every key of a spec, table by table: its type and allowed values, its default, the "
    "estimators that accept it (a key for other estimators is refused) and what it means. An "
    '*exact number* is written `"1/3"`, `"1e-5"` or `0.5` and kept exact (a privacy parameter '
    "is never rounded); the spec hash reads it as a reduced fraction.\n"
)


def _code(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float) and math.isinf(value):
        return "`inf`" if value > 0 else "`-inf`"
    if isinstance(value, float) and value == int(value):
        return f"`{int(value)}`"
    return f"`{value}`"


def _bounds(metadata: Sequence[Any]) -> str:
    """The numeric and length bounds pydantic keeps in a field's metadata, in words."""
    words = []
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            words.append(f">= {m.ge}")
        elif isinstance(m, annotated_types.Gt):
            words.append(f"> {m.gt}")
        elif isinstance(m, annotated_types.MinLen) and m.min_length > 1:
            words.append(f"at least {m.min_length}")
        elif isinstance(m, annotated_types.MaxLen):
            words.append(f"at most {m.max_length} characters")
    return ", ".join(words)


def _type_text(tp: Any, metadata: Sequence[Any] = (), plural: bool = False) -> str:
    """The type ``tp`` in a reader's words (``plural``: of a list's items), its allowed values
    where it has a finite set."""
    for m in metadata:
        if isinstance(m, WithJsonSchema) and m.json_schema and "enum" in m.json_schema:
            return " | ".join(_code(v) for v in m.json_schema["enum"])
    if getattr(tp, "__metadata__", None) is not None:  # Annotated[T, ...]
        return _type_text(tp.__origin__, tp.__metadata__, plural)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return " | ".join(_code(v) for v in args)
    if origin in (typing.Union, UnionType):
        parts = [_type_text(a) for a in args if a is not NoneType]
        return " or ".join(dict.fromkeys(parts))
    if origin is list:
        return f"list of {_type_text(args[0], plural=True)}"
    if origin is dict:
        return f"table of {_type_text(args[0])} to {_type_text(args[1])}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table (below)"
    words = {
        bool: "`true` or `false`",
        int: "whole number",
        float: "number",
        str: "text",
        Fraction: "exact number",
        Any: "any value",
    }
    if tp in words:
        return words[tp] + ("s" if plural and tp in (int, float, Fraction) else "")
    return str(tp)


def _field_type(name: str, field: FieldInfo) -> str:
    if "doc_type" in extra(field):
        return str(extra(field)["doc_type"])
    if any(getattr(m, "pattern", None) == _ID for m in field.metadata):
        return "identifier: letters, digits, `_`, `.`, `-` (at most 128)"
    text = _type_text(field.annotation, field.metadata)
    bounds = _bounds(field.metadata)
    return f"{text}, {bounds}" if bounds else text


def _field_default(name: str, field: FieldInfo) -> str:
    if "doc_default" in extra(field):
        return str(extra(field)["doc_default"])
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "none"
    if default in ({}, []):
        return "empty"
    return _code(default)


def _accepted_by(estimators: Sequence[Estimator]) -> Any:
    keyed = keyed_options()

    def cell(name: str, field: FieldInfo) -> str:
        flag = extra(field).get("accepted_by")
        if flag == "options":  # the table of every option without a top-level key
            names = [e.name for e in estimators if _table_options(e)]
        elif flag is not None:
            names = [e.name for e in estimators if getattr(e, str(flag))]
        elif name in keyed:
            names = keyed[name]
        else:
            return "all"
        return ", ".join(f"`{n}`" for n in names)

    return cell


def _meaning(name: str, field: FieldInfo) -> str:
    text = str(field.description or "")
    if field.exclude_if is not None:
        text += " Not in the spec hash when left at its default."
    return text


def _columns(estimators: Sequence[Estimator]) -> tuple[Column, ...]:
    return (
        Column("key", lambda name, field: f"`{name}`"),
        Column("type and allowed values", _field_type),
        Column("default", _field_default),
        Column("estimators", _accepted_by(estimators)),
        Column("meaning", _meaning),
    )


def _table_options(est: Estimator) -> list[dataclasses.Field[Any]]:
    """The estimator's options read from ``[estimator_options]`` (no top-level key)."""
    return [f for f in est.option_fields() if f.metadata.get("spec_key") is None]


def _option_rows(estimators: Sequence[Estimator]) -> Iterable[tuple[str, FieldInfo]]:
    """Each ``[estimator_options]`` entry as a field: its type, default and ``doc``."""
    for est in estimators:
        hints = typing.get_type_hints(est.options) if est.options is not None else {}
        for f in _table_options(est):
            default = f.default if f.default is not dataclasses.MISSING else ...
            field = FieldInfo.from_annotated_attribute(hints[f.name], default)
            field.description = str(f.metadata.get("doc", ""))
            field.json_schema_extra = {"estimator": est.name}
            yield f.name, field


def spec_reference(estimators: Sequence[Estimator] | None = None) -> str:
    """The Markdown of docs/reference/study-spec.md's generated reference: a table per section of
    :data:`SECTIONS`, then the ``[estimator_options]`` of ``estimators`` (by default every
    registered one)."""
    ests = list(ESTIMATORS.values()) if estimators is None else list(estimators)
    columns = _columns(ests)
    out = [INTRO]
    for heading, lead, model in SECTIONS:
        out += [f"### {heading}\n", f"{lead}\n", field_table(model.model_fields.items(), columns)]
    option_columns = (
        *columns[:3],
        Column("estimators", lambda name, field: f"`{extra(field)['estimator']}`"),
        columns[4],
    )
    out += [
        "### `[estimator_options]`\n",
        "The options of an estimator that have no top-level key, by name.\n",
        field_table(_option_rows(ests), option_columns),
    ]
    return "\n".join(out)
