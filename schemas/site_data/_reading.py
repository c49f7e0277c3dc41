"""Reading a site's data for a release: validated, then reduced to the statistics its estimator
needs, all in the engine; and the records themselves for tests and simulations."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpate.schemas.spec import StudySpec
from dpate_core.release import NOT_BINARY

from ._engine import open_site_table
from ._errors import SiteDataError
from ._matching import RecordOrder, SecureOrder, matching_statistics_of
from ._records import SiteData, SiteStatistics
from ._rules import needed_columns, record_codes
from ._statistics import raise_problems, records_of, site_summary
from ._table import SiteTable

__all__ = ["prepare_site_data", "read_site_records", "site_statistics"]


def _validated(site: SiteTable, spec: StudySpec, centred: bool) -> tuple[Any, Any, Any]:
    """The rules, the operator's report and the cell statistics, or the error of the rules
    broken (one query; a small one per rule broken, for its positions)."""
    rules = record_codes(site.table, spec, site.dialect)
    guess = site.estimated_rows()
    summary, cells = site_summary(site, rules, spec, centred=centred, n_guess=guess)
    if summary.broken:
        raise_problems(site, spec, summary)
    if summary.not_binary:
        raise SiteDataError([], hint=NOT_BINARY)
    return rules, summary.report, cells


def site_statistics(
    source: str | Path | Any,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
    order: Callable[[int], RecordOrder] | None = None,
    matching: bool = True,
) -> SiteStatistics:
    """The site's records validated against ``spec`` and reduced, in the engine, to what its
    estimator's release needs (:class:`~._records.SiteStatistics`): the per-cell counts and exact
    grid sums (centred, or not for the difference in means), and for an order-dependent
    estimator (Algorithm 1) with ``matching``, its statistics in the order ``order(N)`` gives
    (default: a fresh secure order, :class:`~._matching.SecureOrder`). Raises
    :class:`~._errors.SiteDataError` (columns, rules, counts, first row positions; never a
    value)."""
    site = open_site_table(source, needed_columns(spec), fmt, query=query, secret=secret)
    try:
        _, report, cells = _validated(site, spec, centred=spec.estimator_info.centred_cells)
        n = report.n_used
        stats = None
        if matching and spec.estimator_info.order_dependent and n > 0:
            chosen = (order or (lambda _: SecureOrder()))(n)
            stats = matching_statistics_of(site, spec, n, chosen)
        return SiteStatistics(cells, report, stats)
    finally:
        site.close()


def read_site_records(
    spec: StudySpec,
    site_id: str,
    location: str | Path,
    *,
    query: str | None = None,
    secret: str | None = None,
    order: Callable[[int], RecordOrder] | None = None,
    matching: bool = True,
) -> SiteStatistics:
    """:func:`site_statistics` of the site ``site_id``'s data at ``location`` (the site's own
    setting; the spec's ``format`` for a file), with the site's query and Secret block for a
    database source (else ``DPATE_DATA_QUERY``/``DPATE_DATA_SECRET``)."""
    return site_statistics(
        str(location),
        spec,
        fmt=spec.site(site_id).format,
        query=query,
        secret=secret,
        order=order,
        matching=matching,
    )


def prepare_site_data(
    source: str | Path | Any,
    spec: StudySpec,
    *,
    fmt: str | None = None,
    query: str | None = None,
    secret: str | None = None,
) -> SiteData:
    """The records path (tests and simulations): the site's records validated as a release
    validates them, then ``(w, y, x)`` of the records used, in the source's order, and the values
    of the covariates with public bounds and no bins (``z``). ``source``:
    a location (with ``query``/``secret`` for a database), a pandas DataFrame or an Arrow
    table."""
    site = open_site_table(source, needed_columns(spec), fmt, query=query, secret=secret)
    try:
        summary, (w, y, x, z) = records_of(site, record_codes(site.table, spec, site.dialect))
    finally:
        site.close()
    if summary.not_binary:
        raise SiteDataError([], hint=NOT_BINARY)
    return SiteData(w, y, x, spec.domain_size, spec.outcome.bound, summary.report, z)
