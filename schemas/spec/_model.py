"""The study spec: one TOML file that says everything public about a multi-site study.

A spec names the design and estimator, the aggregator, the outcome's public bound ``B`` and what to
do with values outside ``[0, B]``, how the site's columns map to ``(W, Y, X)``, the public covariate
discretisation (which fixes the strata and the domain size ``|X|``), and per site its data location,
its per-release privacy budget ``(epsilon, delta)``, the split of that budget among the parts of the
release, and its lifetime privacy cap. Everything in a spec is public and chosen without looking at
the data (invariant 4); ``docs/reference/study-spec.md`` walks through a worked example.

API (small on purpose)::

    spec = load_spec("study.toml")          # or StudySpec.from_toml_text(text) / .model_validate(d)
    spec.spec_hash                           # sha256 of the canonical JSON of the validated spec
    spec.site("site-a")                      # SiteSpec by id
    spec.domain_size                         # |X|, the number of possible covariate strata
    spec.release_parts                       # how many parts the estimator splits a budget into

Exact privacy parameters: ``epsilon``, ``delta`` and budget shares are read with
:func:`dpate_core.privacy.exact` (write ``"1/3"``, ``"1e-5"``, ``0.5``) and kept as
:class:`fractions.Fraction`; in JSON they are exact strings (``"1/3"``).

Invalid specs raise :class:`SpecError`, whose message lists every problem as
``field.path: what is wrong; what would be valid``.

Modules: this one holds the study (:class:`StudySpec`), its loading, canonical form and hash; the
column models (treatment, outcome, covariates) are in ``_columns``, the site models in
``_sites``, the ``[balance]`` table in ``_balance``, the cross-field rules in ``_checks``, the
errors in ``_errors``, and what every model shares (identifiers, exact numbers, the strict base
model) in ``_fields``.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from dpate.plugins import load_plugins
from dpate.schemas.spec._balance import BalanceSpec, balance_layout, balance_problems
from dpate.schemas.spec._checks import cross_field_problems, option_object
from dpate.schemas.spec._columns import Covariate, NumericCovariate, OutcomeSpec, TreatmentSpec
from dpate.schemas.spec._errors import SpecError, _CrossFieldProblems, _problems
from dpate.schemas.spec._fields import _ID, _Model
from dpate.schemas.spec._sites import SiteSpec
from dpate_core.aggregation import AGGREGATORS
from dpate_core.balance import BalanceLayout
from dpate_core.mechanisms import ESTIMATORS, Estimator, StudyChoice, StudySite, estimator_of
from dpate_core.privacy import BudgetSplit, PrivacyParams

__all__ = [
    "SPEC_VERSION",
    "EstimatorName",
    "StudySpec",
    "canonical_json",
    "load_spec",
]

SPEC_VERSION: Literal[1] = 1


# ---------------------------------------------------------------------------------------------
# the study


def _estimator_name(value: str) -> str:
    load_plugins()  # estimators other distributions declare (dpate.plugins)
    if value not in ESTIMATORS:
        names = ", ".join(repr(n) for n in ESTIMATORS)
        raise ValueError(f"must be one of {names}")
    return value


def _aggregator_name(value: str) -> str:
    load_plugins()
    if value not in AGGREGATORS:
        names = ", ".join(repr(n) for n in AGGREGATORS)
        raise ValueError(f"must be one of {names}")
    return value


#: an aggregator registered in :data:`dpate_core.aggregation.AGGREGATORS`
AggregatorName = Annotated[
    str,
    AfterValidator(_aggregator_name),
    WithJsonSchema({"type": "string", "enum": sorted(AGGREGATORS)}),
]

#: an estimator registered in :data:`dpate_core.mechanisms.ESTIMATORS`
EstimatorName = Annotated[
    str,
    AfterValidator(_estimator_name),
    WithJsonSchema({"type": "string", "enum": sorted(ESTIMATORS)}),
]


class StudySpec(_Model):
    """A whole study. See the module docstring and ``docs/reference/study-spec.md``, whose reference table
    is generated from the fields' descriptions below (:mod:`dpate.schemas.spec.reference`).

    The estimator's options (:attr:`options`, an instance of its ``options`` dataclass): the
    built-in estimators' are read from the top-level keys ``arm_sizes_public``, ``variance`` and
    ``adjusted_weighting``; any estimator's from the ``[estimator_options]`` table. An option
    the estimator does not have is refused.
    """

    spec_version: Literal[1] = Field(
        default=SPEC_VERSION, description="The version of the spec format."
    )
    study_id: str = Field(
        pattern=_ID, description="The study's name, in every report, release id and ledger row."
    )
    title: str = Field(default="", description="A title for people; no rule reads it.")
    design: Literal["randomized", "observational"] = Field(
        description="How treatment was assigned. An observational study must declare covariates "
        "and an estimator that adjusts for them; `dim` is for randomized trials only."
    )
    estimator: EstimatorName = Field(
        description="The mechanism every site releases its estimate with (docs/explanation/privacy.md), or "
        "a plug-in's name (docs/how-to/extending.md)."
    )
    aggregator: AggregatorName = Field(
        default="mvagg",
        description="How the server combines the sites' estimates (post-processing, no privacy "
        "cost): MVAgg (the paper's), the sites' average, the largest site, inverse-variance "
        "weights, or DerSimonian-Laird random effects; or a plug-in's name.",
    )
    arm_sizes_public: bool | None = Field(
        default=None,
        json_schema_extra={"doc_default": "required with `dim`"},
        description="Whether the arm sizes `N_t` and `N_c` are public design facts (the paper's "
        "randomized-trial assumption, correction 5): `true` publishes them exactly in every "
        "report; `false` keeps them private: the arms' sizes and sums are released together "
        'as one DP (arm, outcome) histogram, part "arm outcome histogram" (with '
        "`outcome.binary` the only part). No default: a `dim` study must say which.",
    )
    variance: Literal["appendix", "stratified"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_default": '`"appendix"`'},
        description="The sampling variance a matching estimator releases: the paper's `V_hat` "
        '(`"appendix"`) or the within-stratum variance (`"stratified"`, docs/explanation/inference.md).',
    )
    adjusted_weighting: Literal["auto", "subclassification", "fixed_effects"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_default": '`"auto"`'},
        description="How the adjusted estimator weights its noisy stratum statistics, one "
        "estimand for the whole study: subclassification (the average effect over the patients "
        'of the strata with both arms), fixed effects (overlap weights), or `"auto"`, a public '
        "rule on every site's declared `n`, `|X|` and epsilon ([below](#the-adjusted-"
        "estimators-weighting)).",
    )
    estimator_options: dict[str, Any] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        json_schema_extra={
            "doc_type": "table `[estimator_options]` (below)",
            "accepted_by": "options",
        },
        description="The estimator's options that have no top-level key, by name; an option the "
        "estimator does not have is refused.",
    )
    missing: Literal["reject", "drop"] = Field(
        default="reject",
        description="A row whose treatment, outcome or covariate is missing or not finite: "
        "`\"reject\"` refuses the site's file (naming the columns and counts, for the site's "
        'operator only); `"drop"` leaves those rows out, and the released `N` counts the rows '
        "kept.",
    )
    treatment: TreatmentSpec = Field(
        json_schema_extra={"doc_type": "table `[treatment]` (below)"},
        description="The treatment column `W`.",
    )
    outcome: OutcomeSpec = Field(
        json_schema_extra={"doc_type": "table `[outcome]` (below)"},
        description="The outcome `Y` and its public bound `B`.",
    )
    covariates: list[Covariate] = Field(
        default_factory=list,
        json_schema_extra={"doc_type": "tables `[[covariates]]` (below)", "doc_default": "none"},
        description="The covariates, in order: their public levels and bins make the strata, "
        "whose number `|X|` (the product of their sizes, at most 10^9) the privacy proofs use.",
    )
    sites: list[SiteSpec] = Field(
        min_length=1,
        json_schema_extra={"doc_type": "tables `[[sites]]` (below), at least one"},
        description="The sites, each with its data, per-release budget and lifetime cap.",
    )
    target_width: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_default": "none"},
        description="The full width of the combined 95% interval the study needs to inform its "
        "decision, on the outcome's scale (e.g. `0.12` for a risk difference): `dpate plan` "
        "gives the epsilon per site that reaches it, and a result whose interval is wider says "
        "so in every view. At most `2B`. Public; no privacy rule reads it.",
    )
    require_all_sites: bool = Field(
        default=True,
        description="`true`: the study fails unless every site publishes a valid report; "
        "`false`: it combines the valid reports that arrived and lists the missing sites.",
    )
    signing: Literal["required", "none"] = Field(
        default="required",
        exclude_if=lambda v: v == "required",
        description='`"required"`: every site\'s report must be signed by the `public_key` '
        "this spec lists for the site, else the server rejects it ([below](#signed-reports)); "
        '`"none"`: the explicit opt-out, with `unsigned_reason`.',
    )
    unsigned_reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        exclude_if=lambda v: v is None,
        description='Why the study\'s reports are unsigned: required with `signing = "none"`, '
        "refused otherwise; public.",
    )
    release: str = Field(
        default="1",
        pattern=_ID,
        description='The round label of this run (e.g. `"2026-q1"`), part of every release id: '
        "a new round at the same site is a new release.",
    )
    reports: str | None = Field(
        default=None,
        min_length=1,
        json_schema_extra={"doc_type": "path or URL", "doc_default": "the pipeline's default"},
        description="Where the sites publish their reports in a local run (an fsspec URL); a "
        'deployed site\'s publication root is its own setting (docs/reference/pipeline.md, "Settings").',
    )
    ledger: str | None = Field(
        default=None,
        json_schema_extra={"doc_type": "URL"},
        description="Ignored: a ledger's location is a site setting (docs/how-to/ledger.md).",
    )
    balance: BalanceSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_type": "table `[balance]` (below)", "doc_default": "none (off)"},
        description="The DP covariate-balance table, a release of its own at every site with "
        "its own epsilon ([below](#balance-a-dp-covariate-balance-table-optional)).",
    )

    @model_validator(mode="after")
    def _check(self) -> StudySpec:
        problems = cross_field_problems(self)  # schemas/spec/
        problems += balance_problems(self)
        if problems:
            raise _CrossFieldProblems(problems)
        return self

    # --- derived, public quantities ---------------------------------------------------------

    @property
    def balance_layout(self) -> BalanceLayout:
        """The covariates as the balance table reads them (public):
        :func:`~dpate.schemas.spec._balance.balance_layout`."""
        return balance_layout(self.covariates)

    @property
    def balance_values(self) -> dict[str, tuple[float, ...]]:
        """Each numeric covariate's public level values in the balance table (its bins'
        midpoints, :attr:`balance_layout`), by column: what a reader of a published table
        needs to give its numeric rows' noise (:func:`~dpate.schemas.reports.smd_noise_floor`);
        empty for a study without covariates (it has no table)."""
        if not self.covariates:
            return {}
        layout = self.balance_layout
        return {n: v for n, v in zip(layout.names, layout.values, strict=True) if v is not None}

    @property
    def balance_within(self) -> str:
        """How the balance table's within-strata column is obtained without bands: "by
        construction" (0) for an estimator that compares arms within the covariates' strata,
        else "none" (an estimator with ``balance_bands`` releases it within its bands)."""
        est = self.estimator_info
        return "by construction" if est.stratified and est.covariate_strata else "none"

    def balance_cost(self) -> PrivacyParams:
        """What a site's balance release charges its ledger: ``(epsilon_b, 0)``."""
        if self.balance is None:
            raise ValueError("the study has no [balance] table")
        return PrivacyParams(self.balance.epsilon, Fraction(0))

    @property
    def estimator_info(self) -> Estimator:
        """The registered estimator this study names (:mod:`dpate_core.mechanisms`)."""
        return estimator_of(self.estimator)

    @property
    def options(self) -> Any:
        """The estimator's options (an instance of its ``options`` dataclass; None when it has
        none), read from the spec's top-level keys and ``[estimator_options]``
        (:func:`dpate.schemas.spec._checks.option_object`; validated with the spec)."""
        return option_object(self)

    @property
    def release_parts(self) -> int:
        """How many parts one release splits its budget into (the length of a budget split)."""
        return self.estimator_info.n_parts(self.study_options, self.outcome.binary)

    @property
    def publishes_exact_arm_sizes(self) -> bool:
        """Whether a release publishes ``N_t`` and ``N_c`` exactly (the difference in means with
        public arm sizes); every release publishes its ``N`` exactly."""
        return self.estimator_info.publishes_arm_sizes(self.options)

    @property
    def study_choice(self) -> StudyChoice:
        """The options every site releases with, the variant they pick and why: one estimand for
        the whole study, chosen from the spec alone (each site's declared ``n``, ``|X|``, its
        epsilon and split; :meth:`dpate_core.mechanisms.Estimator.study_choice`), never per
        site."""
        opts = self.options  # the spec's own: "auto" not yet resolved (its default split)
        sites = [
            StudySite(s.n, s.epsilon, self._split(s.id, opts).shares, s.budget_split is not None)
            for s in self.sites
        ]
        return self.estimator_info.study_choice(opts, self.domain_size, sites)

    @property
    def study_options(self) -> Any:
        """The options every site's release uses (:attr:`study_choice`: ``"auto"`` resolved)."""
        return self.study_choice.options

    @property
    def variant(self) -> str | None:
        """The variant every site's release uses (the adjusted estimator's weighting), None for
        an estimator with one."""
        return self.study_choice.variant

    @property
    def estimand(self) -> str:
        """What the study estimates at every site, in words a clinician reads."""
        return self.estimator_info.estimand_of(self.study_options)

    @property
    def domain_size(self) -> int:
        """``|X|``: the number of possible strata, the product of the covariates' level counts
        (1 without covariates). Public: it comes from the spec, never from the data."""
        return math.prod(c.size for c in self.covariates)

    @property
    def binned_covariates(self) -> list[Covariate]:
        """The covariates that give strata (categorical, or numeric with bins), in spec order:
        the stratum id is the mixed-radix number of their level or bin indices."""
        return [c for c in self.covariates if c.kind == "categorical" or c.binned]

    @property
    def unbinned_covariates(self) -> list[NumericCovariate]:
        """The numeric covariates with public bounds and no bins, in spec order (only an
        estimator with ``unbinned_covariates`` accepts them: their values enter its release
        clipped to the bounds, not as strata)."""
        return [c for c in self.covariates if isinstance(c, NumericCovariate) and not c.binned]

    def site(self, site_id: str) -> SiteSpec:
        for s in self.sites:
            if s.id == site_id:
                return s
        raise KeyError(
            f"site {site_id!r} is not in study {self.study_id!r}; its sites are "
            f"{[s.id for s in self.sites]}"
        )

    def budget_split(self, site_id: str) -> BudgetSplit:
        """The site's split (the estimator's default split when not given: the paper's even
        split for the paper's mechanisms, ``docs/explanation/adjusted.md`` for the adjusted one; the presets
        ``"paper"`` and ``"default"`` per :meth:`dpate_core.mechanisms.Estimator.split`), with
        the study's options (:attr:`study_options`: a default split that the options move, the
        propensity model's share, follows the study's choice)."""
        return self._split(site_id, self.study_options)

    def _split(self, site_id: str, options: Any) -> BudgetSplit:
        return self.estimator_info.split(
            self.site(site_id).budget_split, options, self.outcome.binary
        )

    def release_cost(self, site_id: str) -> PrivacyParams:
        """What one release of the site charges its ledger: its ``(epsilon, delta)``, with delta 0
        for a pure mechanism (it spends none)."""
        return self.estimator_info.cost(self.site(site_id).privacy)

    def ledger_url(self, site_id: str) -> str | None:
        """The site's ledger URL: its own ``ledger``, else the study's, else None."""
        s = self.site(site_id)
        return s.ledger if s.ledger is not None else self.ledger

    def data_location(self, site_id: str, base_dir: str | Path | None = None) -> str:
        """The site's data location; a relative local path is joined to ``base_dir`` (by
        default the folder of the spec file this spec was loaded from, if any)."""
        loc = self.site(site_id).data
        if "://" in loc or Path(loc).is_absolute():
            return loc
        base = base_dir if base_dir is not None else self._source_dir
        return str(Path(base) / loc) if base is not None else loc

    # --- canonical form and hash ---------------------------------------------------------------

    def canonical_dict(self) -> dict[str, Any]:
        """The validated spec as JSON-ready data (exact numbers as strings, defaults filled)."""
        return self.model_dump(mode="json")

    @cached_property
    def spec_hash(self) -> str:
        """sha256 (hex) of :func:`canonical_json` of the validated spec. Two files that validate
        to the same spec (key order, ``0.5`` vs ``"1/2"``, defaults written or omitted) share a
        hash; any change to a public parameter changes it. Reports carry it; the aggregator
        refuses a report whose hash differs from its own spec's."""
        return hashlib.sha256(canonical_json(self.canonical_dict())).hexdigest()

    # --- loading ----------------------------------------------------------------------------

    _source_dir: str | None = PrivateAttr(default=None)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None) -> StudySpec:
        try:
            spec = cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(_problems(exc), source) from None
        return spec

    @classmethod
    def from_toml_text(cls, text: str, source: str | None = None) -> StudySpec:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError([("(file)", f"not valid TOML: {exc}")], source) from None
        return cls.from_dict(data, source)

    def to_json_bytes(self) -> bytes:
        return canonical_json(self.canonical_dict())

    def __eq__(self, other: object) -> bool:
        # equal when the validated content is equal (where the file was read from does not count)
        return isinstance(other, StudySpec) and self.spec_hash == other.spec_hash

    def __hash__(self) -> int:
        return hash(self.spec_hash)


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec from a TOML file. Raises :class:`SpecError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([("(file)", f"cannot read the spec: {exc.strerror}")], str(path)) from None
    spec = StudySpec.from_toml_text(text, str(path))
    spec._source_dir = str(path.resolve().parent)
    return spec


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8, no NaN/inf (they are refused)."""
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
