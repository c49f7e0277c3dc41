"""What leaves a site and what the server publishes, with the checks a reader applies to them:
the site report (``_report``, its parts in ``_parts``), the study result (``_result``), the
numbers each estimator's report must satisfy (``_plausibility``) and JSON parsed with bounded
size and exponent before any arithmetic (``_bounded_json``). The modules are private to this
package: import every name from ``dpate.schemas.reports``.
"""

from dpate.schemas.reports._bounded_json import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_NUMBER_CHARS,
    BoundedJSONError,
    loads_bounded,
)
from dpate.schemas.reports._parts import (
    BalanceDoc,
    BalanceRowDoc,
    BudgetAmount,
    LedgerHead,
    LifetimeSpend,
    PublicEstimate,
)
from dpate.schemas.reports._plausibility import (
    UNRESOLVED_DIAGNOSTICS,
    estimate_problems,
    required_diagnostics,
    spend_problems,
)
from dpate.schemas.reports._report import (
    BALANCE_SCHEMA_VERSION,
    MAX_REPORT_BYTES,
    REPORT_SCHEMA,
    REPORT_SCHEMA_VERSION,
    REPORT_SCHEMA_VERSIONS,
    ReportError,
    SiteReport,
    default_release_id,
    read_report,
    software_version,
)
from dpate.schemas.reports._result import (
    MAX_RESULT_BYTES,
    NO_ANSWER,
    NO_INTERVAL,
    RESULT_SCHEMA,
    AbsentSite,
    ReleasedSite,
    ResultBudget,
    ResultInterval,
    ResultSpend,
    SiteResult,
    StudyResult,
    interval_ends,
    interval_text,
    smd_noise_floor,
    spend_text,
    table_noise_floors,
)

__all__ = [
    "BALANCE_SCHEMA_VERSION",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_NUMBER_CHARS",
    "MAX_REPORT_BYTES",
    "MAX_RESULT_BYTES",
    "NO_ANSWER",
    "NO_INTERVAL",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "REPORT_SCHEMA_VERSIONS",
    "RESULT_SCHEMA",
    "UNRESOLVED_DIAGNOSTICS",
    "AbsentSite",
    "BalanceDoc",
    "BalanceRowDoc",
    "BoundedJSONError",
    "BudgetAmount",
    "LedgerHead",
    "LifetimeSpend",
    "PublicEstimate",
    "ReleasedSite",
    "ReportError",
    "ResultBudget",
    "ResultInterval",
    "ResultSpend",
    "SiteReport",
    "SiteResult",
    "StudyResult",
    "default_release_id",
    "estimate_problems",
    "interval_ends",
    "interval_text",
    "loads_bounded",
    "read_report",
    "required_diagnostics",
    "smd_noise_floor",
    "software_version",
    "spend_problems",
    "spend_text",
    "table_noise_floors",
]
