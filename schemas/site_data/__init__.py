"""A site's data: read, validated and reduced where it lives (DuckDB, PostgreSQL, Spark, any Ibis
backend), so that only counts and sums come back.

- :func:`read_site_records` / :func:`site_statistics`: what a release reads
  (:class:`SiteStatistics`: per-cell counts and exact grid sums, Algorithm 1's statistics for
  the matching estimators, the operator-only :class:`PreparationReport`);
- :func:`prepare_site_data`: the validated records themselves (:class:`SiteData`), for tests and
  simulations;
- :class:`SiteDataError`, :class:`Problem`: what a failed check says (columns, rules, counts, row
  positions; never a value); :func:`redact_location`: a location as a message may show it;
- :class:`SecureOrder`, :class:`PermutationOrder`: the data-independent order Algorithm 1 ranks
  records in.

Modules: the engines and locations in ``_engine.py`` and the opened table in ``_table.py``, the
spec's rules as Ibis expressions in ``_rules.py`` and what their codes mean in ``_codes.py``, the
queries in ``_statistics.py`` and ``_matching.py``, the entry points in ``_reading.py``, errors
and redaction in ``_errors.py`` and ``_redaction.py``.
"""

from ._engine import ENGINE_MEMORY_ENV, open_site_table, secret_value
from ._errors import MAX_ROWS_LISTED, Problem, SiteDataError
from ._matching import PermutationOrder, RecordOrder, SecureOrder
from ._reading import prepare_site_data, read_site_records, site_statistics
from ._records import PreparationReport, SiteData, SiteStatistics
from ._redaction import QUERY_ENV, SECRET_ENV, SQL_DIALECTS, is_sql_url, redact_location
from ._table import SiteTable

__all__ = [
    "ENGINE_MEMORY_ENV",
    "MAX_ROWS_LISTED",
    "QUERY_ENV",
    "SECRET_ENV",
    "SQL_DIALECTS",
    "PermutationOrder",
    "PreparationReport",
    "Problem",
    "RecordOrder",
    "SecureOrder",
    "SiteData",
    "SiteDataError",
    "SiteStatistics",
    "SiteTable",
    "is_sql_url",
    "open_site_table",
    "prepare_site_data",
    "read_site_records",
    "redact_location",
    "secret_value",
    "site_statistics",
]
