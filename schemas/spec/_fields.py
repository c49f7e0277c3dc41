"""What every model of the study spec shares: the identifier rule, exact numbers (privacy
parameters are kept as :class:`fractions.Fraction`, written as exact strings) and the strict,
frozen base model (unknown fields refused)."""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, WithJsonSchema

from dpate_core.privacy import exact

__all__ = ["ExactNumber"]

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ID_HINT = "1-128 characters: letters, digits, '_', '.', '-', starting with a letter or digit"


def _exact_fraction(value: Any) -> Fraction:
    if isinstance(value, Fraction):
        return value
    return exact(value, "value")


#: An exact number: accepts ``"1/3"``, ``"1e-5"``, ``0.5``, ``2``; held as a Fraction; written as
#: its exact string (``"1/3"``).
ExactNumber = Annotated[
    Fraction,
    PlainValidator(_exact_fraction),
    PlainSerializer(lambda f: str(f), return_type=str),
    WithJsonSchema({"type": "string", "examples": ["1", "1/3", "1e-5"]}),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
