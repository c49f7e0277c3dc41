"""The study spec: a TOML file read into :class:`StudySpec` (validated, canonically hashed).

The model and its loading (``_model``), the treatment, outcome and covariate columns
(``_columns``), the sites and their caps (``_sites``), the balance table (``_balance``), the rules
across fields (``_checks``), the errors (``_errors``) and the shared field types (``_fields``) are
private modules of this package: import every name from ``dpate.schemas.spec``.
:mod:`dpate.schemas.spec.reference` writes the spec's field reference in
docs/reference/study-spec.md from these models.
"""

from dpate.schemas.spec._balance import BalanceSpec
from dpate.schemas.spec._checks import (
    MAX_DOMAIN_SIZE,
    cross_field_problems,
    keyed_options,
    option_object,
    option_values,
)
from dpate.schemas.spec._columns import (
    CategoricalCovariate,
    Covariate,
    NumericCovariate,
    OutcomeSpec,
    TreatmentSpec,
)
from dpate.schemas.spec._errors import SpecError
from dpate.schemas.spec._fields import ExactNumber
from dpate.schemas.spec._model import (
    SPEC_VERSION,
    EstimatorName,
    StudySpec,
    canonical_json,
    load_spec,
)
from dpate.schemas.spec._sites import PrivacyCap, SiteSpec

__all__ = [
    "MAX_DOMAIN_SIZE",
    "SPEC_VERSION",
    "BalanceSpec",
    "CategoricalCovariate",
    "Covariate",
    "EstimatorName",
    "ExactNumber",
    "NumericCovariate",
    "OutcomeSpec",
    "PrivacyCap",
    "SiteSpec",
    "SpecError",
    "StudySpec",
    "TreatmentSpec",
    "canonical_json",
    "cross_field_problems",
    "keyed_options",
    "load_spec",
    "option_object",
    "option_values",
]
