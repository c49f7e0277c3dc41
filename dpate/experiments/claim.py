"""What a checked claim is (:class:`Claim`), how the claims read the run's table (panels and
points by data set, split and estimator), and ``claims.md``.

A claim is a function of the run's rows (or of the sensitivity curves) returning a
:class:`Claim`, or None when the run lacks the points it speaks about (a run restricted to some
data sets); :mod:`dpate.experiments.paper_claims` and :mod:`dpate.experiments.adjusted_claims`
hold one function per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpate.experiments.settings import ESTIMATOR_LABELS
from dpate.experiments.tables import markdown_table

__all__ = [
    "OBSERVATIONAL",
    "RANDOMIZED",
    "TOL",
    "Claim",
    "ClaimCheck",
    "Panel",
    "Row",
    "by_point",
    "claims_markdown",
    "mae",
    "panels",
    "point_label",
    "points",
]

#: one row of ``experiments.csv`` (:data:`dpate.experiments.sweep.TABLE_COLUMNS`) or of
#: ``sensitivity.csv``
Row = Mapping[str, Any]
#: ``(dataset, J, proportions, estimator)``: one panel of the figures
Panel = tuple[str, int, str, str]
#: a point's rows by combiner: ``{aggregator: row}``
ByCombiner = dict[str, Row]

#: the paper's two designs, by the estimators run on them
RANDOMIZED: tuple[str, ...] = ("dim",)
OBSERVATIONAL: tuple[str, ...] = ("smooth_matching", "global_matching")

TOL = 1.05  # "at or below" allows 5%: the MAE of 100 repetitions has a few % of Monte Carlo error


@dataclass(frozen=True)
class Claim:
    """One claim checked against a run: the statement (``name``), whether this run reproduces it
    (``holds``), the sentence with the numbers (``detail``, as in ``claims.md``) and the numbers
    the verdict was taken on (``numbers``, by name)."""

    name: str
    holds: bool
    detail: str
    numbers: dict[str, float] = field(default_factory=dict)


#: a claim's check: the run's rows (or sensitivity curves) in, its verdict out (None: the run
#: has none of the points the claim speaks about)
ClaimCheck = Callable[[Sequence[Row]], Claim | None]


def panels(rows: Sequence[Row], **filters: Any) -> dict[Panel, dict[str, ByCombiner]]:
    """``{(dataset, J, proportions, estimator): {alpha: {aggregator: row}}}`` for the matches."""
    out: dict[Panel, dict[str, ByCombiner]] = {}
    for r in rows:
        if all(r[k] == v for k, v in filters.items()):
            key = (r["dataset"], r["J"], r["proportions"], r["estimator"])
            out.setdefault(key, {}).setdefault(r["alpha"], {})[r["aggregator"]] = r
    return out


def points(rows: Sequence[Row], **filters: Any) -> list[tuple[Panel, str, ByCombiner]]:
    """Every (panel, alpha) with its ``{aggregator: row}``."""
    return [
        (key, alpha, aggs)
        for key, by_alpha in panels(rows, **filters).items()
        for alpha, aggs in by_alpha.items()
    ]


def by_point(
    rows: Sequence[Row], dataset: str, estimator: str
) -> dict[tuple[tuple[str, int, str], str], ByCombiner]:
    """One estimator's points on one data set, keyed by ``((dataset, J, proportions), alpha)``
    so that two estimators' points can be paired."""
    return {(k[:3], a): v for k, a, v in points(rows, dataset=dataset, estimator=estimator)}


def mae(aggs: ByCombiner, aggregator: str) -> float:
    """The combiner's mean absolute error at a point."""
    value: float = aggs[aggregator]["mae_mean"]
    return value


def point_label(key: Panel, alpha: str | None = None) -> str:
    """``"IST J=3 18:1:1 DP difference in means alpha=1/8"``."""
    ds, j, prop, est = key
    text = f"{ds} J={j} {prop} {ESTIMATOR_LABELS.get(est, est)}"
    return text if alpha is None else f"{text} alpha={alpha}"


def claims_markdown(claims: Sequence[Claim], comparison: Sequence[Mapping[str, Any]] = ()) -> str:
    """``claims.md``: one line per claim, then the combiner comparison
    (:func:`dpate.experiments.comparison.combiner_comparison`)."""
    lines = markdown_table(
        ("claim", "reproduced", "numbers"),
        [(c.name, "yes" if c.holds else "no", c.detail) for c in claims],
    )
    if comparison:
        columns = ("combiner", "design", "points", "beats MVAgg (>5%)", "loses (>5%)",
                   "median MAE ratio to MVAgg", "best", "worst")  # fmt: skip
        body = [(m["combiner"], m["family"], m["points"], f"{m['beats_mvagg']:.0%}",
                 f"{m['loses']:.0%}", f"{m['median_ratio']:.3g}", m["best"], m["worst"])
                for m in comparison]  # fmt: skip
        lines += ["", *markdown_table(columns, body)]
    return "\n".join(lines) + "\n"
