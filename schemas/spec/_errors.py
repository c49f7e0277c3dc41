"""What an invalid study spec says: :class:`SpecError`, every problem as ``field.path: what is
wrong; what would be valid``, pydantic's errors translated so (the valid alternatives spelled out,
no input value echoed)."""

from __future__ import annotations

from pydantic import ValidationError

from dpate.errors import DpateError, ExitCode
from dpate.schemas.spec._fields import _ID_HINT

__all__ = ["SpecError"]


class _CrossFieldProblems(ValueError):
    """Problems found across fields, each with its own field path (unpacked by SpecError)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in problems))


class SpecError(DpateError, ValueError):
    """A study spec is invalid. ``problems`` holds ``(field path, message)`` pairs."""

    exit_code = ExitCode.SPEC
    cause = "invalid study spec"

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        where = f" in {source}" if source else ""
        lines = [f"invalid study spec{where} ({len(problems)} problem(s)):"]
        lines += [f"  - {loc}: {msg}" for loc, msg in problems]
        super().__init__("\n".join(lines))


_FIELD_HINTS: dict[str, str] = {
    "design": "one of 'randomized', 'observational'",
    "policy": "one of 'clip', 'reject'",
    "missing": "one of 'reject', 'drop'",
    "signing": "one of 'required' (the default), 'none' (with unsigned_reason)",
    "kind": "one of 'categorical', 'numeric'",
}


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    """pydantic's errors as ``(dotted path, message)``, with the valid alternatives spelled out.
    (A spec holds no patient data, but we still do not echo input values back.)"""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False, include_input=False):
        cross = err.get("ctx", {}).get("error")
        if isinstance(cross, _CrossFieldProblems):
            prefix = ".".join(str(p) for p in err["loc"])
            out += [(f"{prefix}.{loc}" if prefix else loc, msg) for loc, msg in cross.problems]
            continue
        loc_parts = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
        # pydantic adds the union member tag to the path: drop it
        loc_parts = [p for p in loc_parts if p not in ("categorical", "numeric")]
        loc = ".".join(loc_parts) or "(spec)"
        msg = err["msg"]
        typ = err["type"]
        last = loc_parts[-1] if loc_parts else ""
        if typ == "extra_forbidden" and loc == "require_signed_reports":
            msg = (
                "signed reports are the default: remove require_signed_reports (the opt-out is "
                'signing = "none" with an unsigned_reason)'
            )
        elif typ == "extra_forbidden":
            msg = "unknown field: check its spelling against docs/reference/study-spec.md"
        elif typ == "missing":
            msg = "required field is missing"
        elif typ == "string_pattern_mismatch":
            msg = f"invalid identifier: use {_ID_HINT}"
        elif typ in ("literal_error", "union_tag_invalid") and last in _FIELD_HINTS:
            msg = f"must be {_FIELD_HINTS[last]}"
        elif typ == "union_tag_not_found":
            msg = "each covariate needs kind = 'categorical' or 'numeric'"
        elif msg.startswith("Value error, "):
            msg = msg.removeprefix("Value error, ")
        out.append((loc, msg))
    return out
