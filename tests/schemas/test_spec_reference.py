"""docs/reference/study-spec.md's reference is the one the spec's models generate
(:func:`dpate.schemas.spec.reference.spec_reference`), every key of every table is in it with a
description, and the estimators a key names are the ones that accept it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from dpate.schemas.spec import SiteSpec, StudySpec
from dpate.schemas.spec.reference import SECTIONS, spec_reference
from tests.golden import REPO, Golden

DOCS = REPO / "docs" / "reference" / "study-spec.md"


def test_the_docs_spec_reference_is_the_generated_one(golden):
    golden.same_block(DOCS, "spec reference", spec_reference())


def test_a_stale_reference_fails_naming_the_command_that_regenerates_it(tmp_path):
    page = tmp_path / "study-spec.md"
    page.write_text(DOCS.read_text(encoding="utf-8"), encoding="utf-8")
    changed = spec_reference().replace("The study's name", "The study's title")
    check = Golden(Path(__file__), regenerate=False)
    with pytest.raises(AssertionError) as failed:
        check.same_block(page, "spec reference", changed)
    assert "regenerate with python -m pytest tests/schemas/test_spec_reference.py --regenerate" in (
        str(failed.value)
    )
    Golden(Path(__file__), regenerate=True).same_block(page, "spec reference", changed)
    check.same_block(page, "spec reference", changed)  # rewritten between its markers
    assert page.read_text(encoding="utf-8").count("The study's title") == 1


def _models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """``model`` and every model its fields hold (a table, a list of tables, a union)."""
    found = {model}
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in found:
                found |= _models(tp)
            stack += list(getattr(tp, "__args__", ()))
    return found


def test_every_table_of_the_spec_is_a_section_and_every_key_is_described():
    assert _models(StudySpec) == {model for _, _, model in SECTIONS}
    for _, _, model in SECTIONS:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def _row(section: str, key: str) -> list[str]:
    text = spec_reference()
    part = text[text.index(f"### {section}") :]
    line = next(ln for ln in part.splitlines() if ln.startswith(f"| `{key}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_a_key_names_the_estimators_that_accept_it():
    assert _row("Top level", "arm_sizes_public")[3] == "`dim`"
    assert _row("Top level", "variance")[3] == "`smooth_matching`, `global_matching`"
    assert _row("Top level", "adjusted_weighting")[3] == "`adjusted`"
    assert _row('`[[covariates]]` with `kind = "numeric"`', "lower")[3] == "`propensity`"
    assert _row("`[estimator_options]`", "bands")[2:4] == ['`"auto"`', "`propensity`"]
    assert _row("`[estimator_options]`", "model_share")[2:4] == ['`"auto"`', "`propensity`"]
    assert _row("Top level", "design")[3] == "all"


def test_types_defaults_and_allowed_values_come_from_the_fields():
    design = _row("Top level", "design")
    assert design[1:3] == ['`"randomized"` \\| `"observational"`', "required"]
    assert _row("Top level", "aggregator")[2] == '`"mvagg"`'
    assert _row("`[[sites]]`", "n")[1] == "whole number, >= 2"
    assert _row("`[[sites]]`", "delta")[1:3] == ["exact number", "`0`"]
    assert "Not in the spec hash" in _row("`[[sites]]`", "n")[4]
    assert "Not in the spec hash" not in _row("`[[sites]]`", "epsilon")[4]
    assert SiteSpec.model_fields["n"].exclude_if is not None
