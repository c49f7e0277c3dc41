"""The spec's optional DP covariate-balance table (``[balance]``): its model, the rules a study
with one must meet, and the covariates' layout the table is released in
(docs/reference/study-spec.md; docs/explanation/privacy.md)."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from dpate.schemas.spec._columns import Covariate
from dpate.schemas.spec._fields import ExactNumber, _Model
from dpate_core.balance import BalanceLayout, bounded_bins
from dpate_core.privacy import PrivacyParams

if TYPE_CHECKING:
    from dpate.schemas.spec._model import StudySpec

__all__ = ["MAX_BALANCE_ROWS", "BalanceSpec", "balance_layout", "balance_problems"]

#: the most rows a balance table may have (one per numeric covariate with finite bins, one per
#: level of the others): what fits in a site report (schemas/reports/, MAX_REPORT_BYTES)
MAX_BALANCE_ROWS = 200


class BalanceSpec(_Model):
    """The optional DP covariate-balance table (docs/reference/study-spec.md, ``[balance]``): a release of
    its own at every site, charged to the site's ledger with its own ``epsilon`` (exact; pure
    DP, no delta) on top of the estimate's, before any noise (docs/explanation/privacy.md)."""

    epsilon: ExactNumber = Field(
        description="The table's own budget at every site, on top of the estimate's (pure DP: "
        "no delta); must be positive. One round then spends both, within the lifetime cap."
    )

    @model_validator(mode="after")
    def _check(self) -> BalanceSpec:
        if not self.epsilon > 0:
            raise ValueError(
                f"the balance table's epsilon ({self.epsilon}) must be positive, e.g. '1/10'; "
                f"remove [balance] for no table"
            )
        return self


def balance_problems(spec: StudySpec) -> list[tuple[str, str]]:
    if spec.balance is None:
        return []
    if not spec.covariates:
        return [
            (
                "balance",
                "a balance table needs covariates: add [[covariates]] or remove [balance]",
            )
        ]
    layout = spec.balance_layout
    rows = sum(
        1 if v is not None else len(lab)
        for v, lab in zip(layout.values, layout.labels, strict=True)
    )
    if rows > MAX_BALANCE_ROWS:
        return [
            (
                "balance",
                f"the covariates give a balance table of {rows} rows, more than the "
                f"{MAX_BALANCE_ROWS} a report carries: bin the many-level covariates more "
                f"coarsely or remove [balance]",
            )
        ]
    out = []
    for i, s in enumerate(spec.sites):
        total = PrivacyParams(s.epsilon + spec.balance.epsilon, s.delta)
        if not total <= s.lifetime_cap.params:
            out.append(
                (
                    f"sites.{i}.lifetime_cap",
                    f"one round (the estimate's epsilon {s.epsilon} plus the balance "
                    f"table's {spec.balance.epsilon}) exceeds the lifetime cap (epsilon "
                    f"{s.lifetime_cap.epsilon}): lower one of them or raise the cap",
                )
            )
    return out


def balance_layout(covariates: list[Covariate]) -> BalanceLayout:
    """The covariates as the balance table reads them (public): each covariate's levels,
    and each level's value where it has one (a numeric covariate with finite bins: each
    bin's midpoint; otherwise indicator rows). A numeric covariate with public bounds and no
    bins is read in ``NUMERIC_BALANCE_BINS`` equal bins of its bounds
    (:func:`dpate_core.balance.bounded_bins`: one row, their midpoints)."""
    names: list[str] = []
    labels: list[tuple[str, ...]] = []
    values: list[tuple[float, ...] | None] = []
    for c in covariates:
        names.append(c.column)
        if c.kind == "categorical":
            labels.append(tuple(str(v) for v in c.all_levels))
            values.append(None)
            continue
        edges = c.edges or [*bounded_bins(*c.bounds)]  # without bins: the table's own
        labels.append(
            tuple(
                f"[{a:g}, {b:g}{']' if i == len(edges) - 2 else ')'}"
                for i, (a, b) in enumerate(itertools.pairwise(edges))
            )
        )
        finite = all(math.isfinite(e) for e in edges)
        values.append(
            tuple((a + b) / 2.0 for a, b in itertools.pairwise(edges)) if finite else None
        )
    return BalanceLayout(tuple(names), tuple(labels), tuple(values))
