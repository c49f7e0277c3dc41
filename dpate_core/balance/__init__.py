"""The DP covariate-balance table: standardized mean differences of each covariate by arm, as
epidemiologists check a comparison, released at a site as a release of its own (its own budget,
its own ledger row, one draw; ``docs/explanation/privacy.md``, "The covariate-balance table").

:func:`plan_balance` builds the release from the per-cell counts the site's engine computes
(``g = 2 x + w``, :class:`dpate_core.statistics.CellStatistics`): one vector of counts per
covariate level and arm (and per band, when a public band of each stratum is given), released
with discrete Laplace noise as one vector query; :func:`balance_table` is its post-processing
into standardized mean differences (:class:`BalanceTable`). :func:`plan_balance_records` is the
same query counted from records, when a covariate is numeric with bounds and no bins (read in
:func:`bounded_bins`) or a record's band depends on its values. Public: the covariates' levels and
bins (so each level's value: a numeric bin's midpoint) and the bands; no record is read here.
"""

from ._records import (
    NUMERIC_BALANCE_BINS,
    bin_levels,
    bounded_bins,
    plan_balance_records,
    record_counts,
)
from ._table import (
    BALANCE_SCHEMA,
    BalanceLayout,
    BalancePlan,
    BalanceRow,
    BalanceTable,
    balance_scale,
    balance_sensitivity,
    balance_table,
    dp_balance,
    level_counts,
    plan_balance,
    smd_noise_sd,
)

__all__ = [
    "BALANCE_SCHEMA",
    "NUMERIC_BALANCE_BINS",
    "BalanceLayout",
    "BalancePlan",
    "BalanceRow",
    "BalanceTable",
    "balance_scale",
    "balance_sensitivity",
    "balance_table",
    "bin_levels",
    "bounded_bins",
    "dp_balance",
    "level_counts",
    "plan_balance",
    "plan_balance_records",
    "record_counts",
    "smd_noise_sd",
]
