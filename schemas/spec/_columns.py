"""The study spec's columns: the treatment ``W``, the outcome ``Y`` with its public bound ``B``, and
the covariates whose public discretisation fixes the strata and the domain size ``|X|``."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from dpate.schemas.spec._fields import _Model

__all__ = ["CategoricalCovariate", "Covariate", "NumericCovariate", "OutcomeSpec", "TreatmentSpec"]


class TreatmentSpec(_Model):
    """The treatment column ``W``.

    Without labels the column must hold 0/1 (integers, floats 0.0/1.0 or booleans). With labels,
    ``treated`` and ``control`` are the two values the column may hold (e.g. ``"small"`` and
    ``"regular"``); anything else is an error.
    """

    column: str = Field(min_length=1, description="The column that holds the treatment.")
    treated: str | int | None = Field(
        default=None,
        json_schema_extra={"doc_default": "none: the column holds 0/1"},
        description="The value that marks a treated record (with `control`; both text or both "
        "whole numbers). Without labels the column holds 0/1, 0.0/1.0 or booleans.",
    )
    control: str | int | None = Field(
        default=None,
        json_schema_extra={"doc_default": "none: the column holds 0/1"},
        description="The value that marks a control record (with `treated`); any other value "
        "is an error.",
    )

    @model_validator(mode="after")
    def _labels(self) -> TreatmentSpec:
        if (self.treated is None) != (self.control is None):
            raise ValueError("give both 'treated' and 'control' labels, or neither (then 0/1)")
        if self.treated is not None and self.treated == self.control:
            raise ValueError("'treated' and 'control' labels must differ")
        if self.treated is not None and type(self.treated) is not type(self.control):
            raise ValueError("'treated' and 'control' labels must both be strings or both integers")
        return self

    @property
    def labels(self) -> tuple[str | int, str | int] | None:
        """``(treated, control)`` or None for 0/1 coding."""
        if self.treated is None:
            return None
        return (self.treated, self.control)  # type: ignore[return-value]


class OutcomeSpec(_Model):
    """The outcome ``Y`` and its public bound ``B``.

    The value used is ``Y - offset`` (``offset`` is public, default 0), which must lie in
    ``[0, bound]``. ``policy = "clip"`` (default) clips values outside to the interval and counts
    them for the site operator; ``"reject"`` refuses the file if any value is outside.

    ``labels`` maps an outcome stored as text to numbers, e.g. ``{ "Yes" = 1, "No" = 0 }``: the
    column must then hold only those labels (anything else is an error, as for treatment labels)
    and each label's number goes through ``offset`` and ``bound`` like a numeric value. The
    numbers are public and must lie in ``[offset, offset + bound]`` (checked here).
    """

    column: str = Field(min_length=1, description="The column that holds the outcome.")
    bound: float = Field(
        description="The public bound `B` (> 0, finite): the value used, `Y - offset`, lies in "
        "`[0, B]`, and every mechanism's noise is scaled to `B`. Take it from the instrument's "
        "documented scale or a declared cap, never from the observed values."
    )
    offset: float = Field(
        default=0.0,
        description="A public shift: the value used is `Y - offset` (e.g. 40 for a score on 40 "
        "to 160 with `bound = 120`).",
    )
    policy: Literal["clip", "reject"] = Field(
        default="clip",
        description='A value outside `[offset, offset + bound]`: `"clip"` moves it to the '
        'nearer end and counts it for the site\'s operator; `"reject"` refuses the file.',
    )
    labels: dict[str, float] | None = Field(
        default=None,
        json_schema_extra={"doc_type": "table of text labels to numbers"},
        description='An outcome stored as text, mapped to public numbers (`{ "Yes" = 1, "No" '
        "= 0 }`) within `[offset, offset + bound]`; any other text is an error.",
    )
    binary: bool = Field(
        default=False,
        exclude_if=lambda v: not v,
        json_schema_extra={"accepted_by": "binary_outcome"},
        description="Every value is `offset` or `offset + bound` (checked on the data by the "
        "release): the variance follows from the sums, so no sums of squares are released. The "
        "difference in means drops their budget part (one part fewer); the adjusted and "
        "propensity releases query their cells as one (cell, outcome) histogram at the whole of "
        "the cells' budget, whose counts and sums are both less noisy than two queries sharing "
        "it (one part for adjusted, two for propensity: the model and the histogram).",
    )

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_in(cls, v: Any) -> Any:
        if v is None:
            return v
        if not isinstance(v, dict) or not v:
            raise ValueError(
                'labels must be a table of text labels to numbers, e.g. { "Yes" = 1, "No" = 0 }'
            )
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in v.values()):
            raise ValueError('each label maps to a number, e.g. { "Yes" = 1, "No" = 0 }')
        if any(not k for k in v):
            raise ValueError("outcome labels must be non-empty text")
        return v

    @model_validator(mode="after")
    def _labels_within(self) -> OutcomeSpec:
        if self.labels is None:
            return self
        if not all(math.isfinite(x) for x in self.labels.values()):
            raise ValueError("outcome label values must be finite numbers")
        lo, hi = self.offset, self.offset + self.bound
        if self.binary:
            other = sorted(k for k, x in self.labels.items() if x not in (lo, hi))
            if other:
                raise ValueError(
                    f"outcome labels {other} map to numbers other than offset and offset + bound "
                    f"([{lo:g}, {hi:g}]): a binary outcome takes only those two values"
                )
        outside = sorted(k for k, x in self.labels.items() if not lo <= x <= hi)
        if outside:
            raise ValueError(
                f"outcome labels {outside} map to numbers outside [offset, offset + bound] = "
                f"[{lo:g}, {hi:g}]: change the labels' numbers or the bound"
            )
        return self

    @field_validator("bound")
    @classmethod
    def _bound(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError("the outcome bound B must be positive and finite, e.g. 1.0")
        return float(v)

    @field_validator("offset")
    @classmethod
    def _offset(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("offset must be finite")
        return float(v)


class CategoricalCovariate(_Model):
    """A categorical covariate with its public levels (one stratum each, in the order given).

    A value not among ``levels`` is an error, unless ``other`` names a level to map it to (either
    one of ``levels`` or a new level appended after them).
    """

    kind: Literal["categorical"] = Field(description="Which kind of covariate this is.")
    column: str = Field(min_length=1, description="The column that holds the covariate.")
    levels: list[str] | list[int] = Field(
        min_length=1,
        json_schema_extra={"doc_type": "list of text or list of whole numbers, at least one"},
        description="The public levels, one stratum each, in the order given; text levels are "
        'compared with the value\'s text (a level `"01"` matches a CSV field `01`).',
    )
    other: str | int | None = Field(
        default=None,
        json_schema_extra={"doc_default": "none: an unknown value is an error"},
        description="The level a value not among `levels` counts as: one of `levels`, or a new "
        "level appended after them.",
    )

    @model_validator(mode="after")
    def _check(self) -> CategoricalCovariate:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels of {self.column!r} must be distinct")
        if self.other is not None and type(self.other) is not type(self.levels[0]):
            raise ValueError(f"'other' of {self.column!r} must have the same type as its levels")
        return self

    @property
    def all_levels(self) -> list[str | int]:
        """The levels in stratum order, including an appended ``other`` level."""
        levels: list[str | int] = list(self.levels)
        if self.other is not None and self.other not in levels:
            levels.append(self.other)
        return levels

    @property
    def size(self) -> int:
        return len(self.all_levels)


class NumericCovariate(_Model):
    """A numeric covariate, in one of two public forms.

    - Binned: fixed public bin edges ``e_0 < e_1 < ... < e_k``. Bin ``i`` is ``[e_i, e_{i+1})``;
      the last bin also holds ``e_k``. The first edge may be ``-inf`` and the last ``inf`` for
      open-ended bins; a value outside ``[e_0, e_k]`` is an error. Each bin is a stratum.
    - Bounded (no bins): public bounds ``lower < upper``, fixed before the data are seen; a value
      outside them is clipped to them (``policy = "clip"``, the default, counted for the site
      operator) or refused (``"reject"``). The value enters the estimator directly, not as
      strata (``size`` 1), so only an estimator that takes record-level covariates accepts it
      (``Estimator.unbinned_covariates``: the propensity estimator's model).
    """

    kind: Literal["numeric"] = Field(description="Which kind of covariate this is.")
    column: str = Field(min_length=1, description="The column that holds the covariate.")
    edges: list[float] | None = Field(
        default=None,
        min_length=2,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_default": "none: give `lower` and `upper`"},
        description="Public bin edges `e_0 < e_1 < ... < e_k`, one stratum per bin `[e_i, "
        "e_{i+1})` (the last bin holds `e_k`); the first may be `-inf`, the last `inf`. A value "
        "outside `[e_0, e_k]` is an error.",
    )
    lower: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"accepted_by": "unbinned_covariates"},
        description="Without `edges`: the public lower bound (finite, below `upper`), from the "
        "variable's documented range, never from the data. The value enters the estimator "
        "clipped to the bounds, not as strata (it counts 1 in `|X|`).",
    )
    upper: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"accepted_by": "unbinned_covariates"},
        description="Without `edges`: the public upper bound (finite, above `lower`).",
    )
    policy: Literal["clip", "reject"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"accepted_by": "unbinned_covariates", "doc_default": '`"clip"`'},
        description='Without `edges`, a value outside `[lower, upper]`: `"clip"` moves it to '
        'the nearer bound and counts it for the site\'s operator; `"reject"` refuses the file.',
    )

    @field_validator("edges", mode="before")
    @classmethod
    def _edges(cls, v: Any) -> list[float] | None:
        if v is None:
            return None
        if not isinstance(v, list | tuple):
            raise ValueError("edges must be a list of numbers, e.g. [0, 18, 40, 65, inf]")
        try:
            edges = [float(e) for e in v if not isinstance(e, bool)] if v else []
        except (TypeError, ValueError):
            raise ValueError("bin edges must be numbers (or 'inf' / '-inf' at the ends)") from None
        if any(math.isnan(e) for e in edges) or any(math.isinf(e) for e in edges[1:-1]):
            raise ValueError("bin edges must be numbers; only the first may be -inf, the last inf")
        if edges and (edges[0] == math.inf or edges[-1] == -math.inf):
            raise ValueError("the first edge may be -inf and the last inf, not the other way round")
        if any(b <= a for a, b in pairwise(edges)):
            raise ValueError("bin edges must be strictly increasing, e.g. [0, 18, 40, 65, inf]")
        return edges

    @field_validator("lower", "upper", mode="before")
    @classmethod
    def _bound(cls, v: Any) -> float | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError("bounds must be numbers, e.g. lower = 18, upper = 100")
        if not math.isfinite(float(v)):
            raise ValueError("bounds must be finite numbers (public, fixed before the data)")
        return float(v)

    @model_validator(mode="after")
    def _form(self) -> NumericCovariate:
        bounded = self.lower is not None or self.upper is not None
        if self.edges is not None and (bounded or self.policy is not None):
            raise ValueError(
                f"numeric covariate {self.column!r}: give either bin edges (edges = [...]) or "
                f"public bounds without bins (lower, upper and optional policy), not both"
            )
        if self.edges is None and (self.lower is None or self.upper is None):
            raise ValueError(
                f"numeric covariate {self.column!r} needs bin edges (edges = [0, 18, 65, inf]) "
                f"or both public bounds without bins (lower = 18, upper = 100)"
            )
        if self.edges is None and not self.lower < self.upper:  # type: ignore[operator]
            raise ValueError(
                f"numeric covariate {self.column!r}: lower ({self.lower}) must be below upper "
                f"({self.upper}); take both from the variable's documented range, never from "
                f"the data"
            )
        return self

    @field_serializer("edges")
    def _edges_json(self, v: list[float] | None) -> list[float | str] | None:
        # JSON has no infinity: open ends are written "inf" / "-inf" (read back by the validator)
        if v is None:
            return None
        return [e if math.isfinite(e) else ("inf" if e > 0 else "-inf") for e in v]

    @property
    def binned(self) -> bool:
        """Whether the covariate has bins (strata); else public bounds and no bins."""
        return self.edges is not None

    @property
    def bounds(self) -> tuple[float, float]:
        """The public clipping bounds ``(lower, upper)`` of a covariate without bins."""
        if self.lower is None or self.upper is None:
            raise ValueError(f"numeric covariate {self.column!r} has bins, not bounds")
        return self.lower, self.upper

    @property
    def clip_policy(self) -> Literal["clip", "reject"]:
        """What a value outside the bounds gets (a covariate without bins): ``policy``, default
        ``"clip"`` as the outcome's."""
        return self.policy or "clip"

    @property
    def size(self) -> int:
        """Its strata: one per bin; 1 without bins (the value does not enter the strata)."""
        return 1 if self.edges is None else len(self.edges) - 1


Covariate = Annotated[CategoricalCovariate | NumericCovariate, Field(discriminator="kind")]
