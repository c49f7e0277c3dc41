"""JSON from outside the site or the aggregator, read with every number and the nesting bounded
before any arithmetic is done on it.

A published report or result is written by someone else (a site, the aggregator), so nothing in
it is trusted to be small: an integer of 400 digits, a float of ``1e999``, an exact string
``"1e-999999999"`` (whose :class:`~fractions.Fraction` is a billion-digit integer) or a document
nested ten thousand deep are each refused here with a reason, as a :class:`BoundedJSONError`
(a ``ValueError``), never an ``OverflowError``, ``RecursionError`` or minutes of CPU. The exact
strings themselves are bounded where they are read (:func:`dpate_core.privacy.exact`).

The bounds:

* nesting: at most :data:`MAX_DEPTH` arrays/objects deep (checked on the bytes before parsing);
* integers: at most :data:`MAX_INT_DIGITS` digits (every count a report carries is far below
  ``2**63``);
* other numbers: finite as a float, written in at most :data:`MAX_NUMBER_CHARS` characters;
  ``NaN`` and ``Infinity`` are refused.

API::

    doc = loads_bounded(data, what="site report")   # or BoundedJSONError naming the rule
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_NUMBER_CHARS",
    "BoundedJSONError",
    "loads_bounded",
]

#: arrays and objects nested deeper than this are refused (a result document is 4 deep)
MAX_DEPTH = 32
#: an integer written with more digits than this is refused (2**63 has 19)
MAX_INT_DIGITS = 19
#: a non-integer number written with more characters than this is refused
MAX_NUMBER_CHARS = 40


class BoundedJSONError(ValueError):
    """A JSON document breaks one of the bounds of :mod:`dpate.schemas.reports._bounded_json`, or is not
    JSON at all; the message names the rule, never the offending text."""


def _depth_problem(text: str) -> str | None:
    """Whether ``text`` nests arrays/objects deeper than :data:`MAX_DEPTH` (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
        elif ch in "]}":
            depth -= 1
    return None


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BoundedJSONError(
            f"an integer has more than {MAX_INT_DIGITS} digits (no count in a report or result "
            f"is that large)"
        )
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise BoundedJSONError(f"a number is written with more than {MAX_NUMBER_CHARS} characters")
    value = float(text)
    if not math.isfinite(value):
        raise BoundedJSONError("a number is beyond the range of a float (e.g. 1e999)")
    return value


def _constant(name: str) -> Any:
    raise BoundedJSONError(f"{name} is not a JSON number (non-finite numbers are refused)")


def loads_bounded(data: bytes | str, *, what: str = "document") -> Any:
    """``data`` parsed as JSON with the nesting and every number bounded (see the module)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    except UnicodeDecodeError:
        raise BoundedJSONError(f"the {what} is not UTF-8 text") from None
    problem = _depth_problem(text)
    if problem is not None:
        raise BoundedJSONError(f"the {what} is {problem}")
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except BoundedJSONError as exc:
        raise BoundedJSONError(f"the {what}: {exc}") from None
    except (ValueError, RecursionError):
        raise BoundedJSONError(f"the {what} is not valid JSON") from None
