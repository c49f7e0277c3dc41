"""A toy aggregator, written as a plug-in would be: this one module and nothing edited elsewhere
(docs/how-to/extending.md). Registering :data:`MEDIAN_SITE` makes ``aggregator = "median_site"`` valid
and every command combine with it: the site of median variance."""

from __future__ import annotations

import numpy as np

from dpate_core.aggregation import Aggregator, Combination, Rows


def median_site(r: Rows) -> Combination:
    key = np.where(r.ok, r.var, np.inf)  # unusable sites sort last
    order = np.argsort(key, axis=1, kind="stable")
    k = (r.ok.sum(axis=1) - 1) // 2
    j = np.take_along_axis(order, k[:, None], axis=1)[:, 0]
    pick = np.zeros_like(r.ok)
    pick[np.arange(r.ok.shape[0]), j] = True
    return Combination(chosen=pick & r.ok, weights=np.ones_like(r.n), var=r.var)


MEDIAN_SITE = Aggregator(
    name="median_site",
    label="Median site",
    why_used="the site of median variance",
    why_not_used="only the site of median variance is used",
    style={"color": "#7f7f7f", "marker": "x", "ls": "-."},
    combine=median_site,
)
