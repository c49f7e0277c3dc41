"""The pandera schema of a site's records, built from the study spec at run time.

Every check is public and comes from the spec (treatment values or labels, outcome finite and,
under ``policy = "reject"``, within ``[0, B]`` after the offset, declared levels, declared bin
edges). A check's ``error`` is its rule text, never a value: pandera reports it as the failed
check, and :func:`dpate.schemas.site_errors._redact` drops the failure cases that do hold values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pandera.pandas as pda

from dpate.schemas.site_errors import (
    _R_EDGES,
    _R_LEVEL,
    _R_NOT_FINITE,
    _R_OUT_OF_BOUNDS,
    _R_TREATMENT_01,
    _R_TREATMENT_LABEL,
)
from dpate.schemas.spec import StudySpec
from dpate.schemas.spec_columns import CategoricalCovariate

__all__ = ["build_schema"]


def _check(fn: Callable[[pd.Series], Any], rule: str) -> pda.Check:
    # ``error`` is what pandera reports as the failed check: our rule text, never a value
    return pda.Check(fn, name=rule, error=rule)


def build_schema(spec: StudySpec) -> pda.DataFrameSchema:
    """The pandera schema of a site's records after
    :func:`~dpate.schemas.site_preparation.prepare_site_data`'s conversions (numeric columns as
    float64, text columns as strings). Nulls are allowed here only when the spec's missing policy
    drops them (they are gone before validation then)."""
    nullable = False
    t, o = spec.treatment, spec.outcome
    columns = {
        t.column: pda.Column(None, checks=[_treatment_check(spec)], nullable=nullable),
        o.column: pda.Column("float64", checks=_outcome_checks(spec), nullable=nullable),
    }
    for c in spec.covariates:
        if isinstance(c, CategoricalCovariate):
            checks = []
            if c.other is None:
                levels: list[Any] = list(c.levels)

                def declared(s: pd.Series, lv: list[Any] = levels) -> pd.Series:
                    return _in_levels(s, lv)

                checks.append(_check(declared, _R_LEVEL))
            columns[c.column] = pda.Column(None, checks=checks, nullable=nullable)
        else:
            lo, hi = c.edges[0], c.edges[-1]

            def within(s: pd.Series, lo: float = lo, hi: float = hi) -> pd.Series:
                v = s.to_numpy()
                return pd.Series((v >= lo) & (v <= hi), index=s.index)

            columns[c.column] = pda.Column(
                "float64", checks=[_check(within, _R_EDGES)], nullable=nullable
            )
    return pda.DataFrameSchema(
        columns, strict=False, coerce=False, name=f"site data of {spec.study_id}"
    )


def _treatment_check(spec: StudySpec) -> pda.Check:
    t = spec.treatment
    # (s == a) | (s == b), not isin: pandas' isin on small integer dtypes hashes every row
    if t.labels is None:
        return _check(lambda s: (s == 0) | (s == 1), _R_TREATMENT_01)
    if isinstance(t.treated, str):
        labels = list(t.labels)
        return _check(lambda s: s.isin(labels), _R_TREATMENT_LABEL)
    a, b = t.labels
    return _check(lambda s: (s == a) | (s == b), _R_TREATMENT_LABEL)


def _outcome_checks(spec: StudySpec) -> list[pda.Check]:
    o = spec.outcome
    checks = [_check(lambda s: pd.Series(np.isfinite(s.to_numpy()), index=s.index), _R_NOT_FINITE)]
    if o.policy == "reject":
        off, b = o.offset, o.bound

        def in_bounds(s: pd.Series) -> pd.Series:
            v = s.to_numpy() - off
            return pd.Series((v >= 0.0) & (v <= b), index=s.index)

        checks.append(_check(in_bounds, _R_OUT_OF_BOUNDS))
    return checks


def _in_levels(s: pd.Series, levels: Sequence[Any]) -> pd.Series:
    """``s.isin(levels)``, decided once per category for a Categorical (pandas' isin on the
    codes hashes every row)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        ok = np.append(s.cat.categories.isin(levels), False)  # code -1 (missing) -> False
        return pd.Series(ok.take(s.cat.codes.to_numpy()), index=s.index)
    return s.isin(levels)
