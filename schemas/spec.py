"""The study spec: one TOML file that says everything public about a multi-site study.

A spec names the design and estimator, the aggregator, the outcome's public bound ``B`` and what to
do with values outside ``[0, B]``, how the site's columns map to ``(W, Y, X)``, the public covariate
discretisation (which fixes the strata and the domain size ``|X|``), and per site its data location,
its per-release privacy budget ``(epsilon, delta)``, the split of that budget among the parts of the
release, and its lifetime privacy cap. Everything in a spec is public and chosen without looking at
the data (invariant 4); ``docs/study-spec.md`` walks through a worked example.

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
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from fractions import Fraction
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)

from dpate_core.aggregators import AGGREGATORS
from dpate_core.privacy import BudgetSplit, PrivacyParams, exact
from dpate_core.registry import ESTIMATORS, Estimator, estimator_of

__all__ = [
    "MAX_DOMAIN_SIZE",
    "SPEC_VERSION",
    "CategoricalCovariate",
    "Covariate",
    "ExactNumber",
    "NumericCovariate",
    "OutcomeSpec",
    "PrivacyCap",
    "SiteSpec",
    "SpecError",
    "StudySpec",
    "TreatmentSpec",
    "canonical_json",
    "load_spec",
]

SPEC_VERSION: Literal[1] = 1
#: Largest allowed |X|: stratum ids must fit comfortably in int64 and the smooth sensitivity's
#: O(N min(|X|, N)) cost must stay sane.
MAX_DOMAIN_SIZE = 10**9

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ID_HINT = "1-128 characters: letters, digits, '_', '.', '-', starting with a letter or digit"


class _CrossFieldProblems(ValueError):
    """Problems found across fields, each with its own field path (unpacked by SpecError)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in problems))


class SpecError(ValueError):
    """A study spec is invalid. ``problems`` holds ``(field path, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        where = f" in {source}" if source else ""
        lines = [f"invalid study spec{where} ({len(problems)} problem(s)):"]
        lines += [f"  - {loc}: {msg}" for loc, msg in problems]
        super().__init__("\n".join(lines))


def _exact_fraction(value: Any) -> Fraction:
    if isinstance(value, Fraction):
        return value
    return exact(value, "value")


#: An exact number: accepts ``"1/3"``, ``"1e-5"``, ``0.5``, ``2``; held as a Fraction; written as
#: its exact string (``"1/3"``).
ExactNumber = Annotated[
    Fraction,
    PlainValidator(_exact_fraction),
    PlainSerializer(lambda f: str(f), return_type=str),
    WithJsonSchema({"type": "string", "examples": ["1", "1/3", "1e-5"]}),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------------------
# columns


class TreatmentSpec(_Model):
    """The treatment column ``W``.

    Without labels the column must hold 0/1 (integers, floats 0.0/1.0 or booleans). With labels,
    ``treated`` and ``control`` are the two values the column may hold (e.g. ``"small"`` and
    ``"regular"``); anything else is an error.
    """

    column: str = Field(min_length=1)
    treated: str | int | None = None
    control: str | int | None = None

    @model_validator(mode="after")
    def _labels(self) -> TreatmentSpec:
        if (self.treated is None) != (self.control is None):
            raise ValueError("give both 'treated' and 'control' labels, or neither (then 0/1)")
        if self.treated is not None and self.treated == self.control:
            raise ValueError("'treated' and 'control' labels must differ")
        if self.treated is not None and type(self.treated) is not type(self.control):
            raise ValueError("'treated' and 'control' labels must both be strings or both integers")
        return self

    @property
    def labels(self) -> tuple[str | int, str | int] | None:
        """``(treated, control)`` or None for 0/1 coding."""
        if self.treated is None:
            return None
        return (self.treated, self.control)  # type: ignore[return-value]


class OutcomeSpec(_Model):
    """The outcome ``Y`` and its public bound ``B``.

    The value used is ``Y - offset`` (``offset`` is public, default 0), which must lie in
    ``[0, bound]``. ``policy = "clip"`` (default) clips values outside to the interval and counts
    them for the site operator; ``"reject"`` refuses the file if any value is outside.

    ``labels`` maps an outcome stored as text to numbers, e.g. ``{ "Yes" = 1, "No" = 0 }``: the
    column must then hold only those labels (anything else is an error, as for treatment labels)
    and each label's number goes through ``offset`` and ``bound`` like a numeric value. The
    numbers are public and must lie in ``[offset, offset + bound]`` (checked here).
    """

    column: str = Field(min_length=1)
    bound: float = Field(description="the public outcome bound B (> 0)")
    offset: float = 0.0
    policy: Literal["clip", "reject"] = "clip"
    labels: dict[str, float] | None = None
    #: every value is 0 or B after the offset (checked on the data by the release): the
    #: difference in means then needs no sums of squares (one budget part fewer)
    binary: bool = Field(default=False, exclude_if=lambda v: not v)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_in(cls, v: Any) -> Any:
        if v is None:
            return v
        if not isinstance(v, dict) or not v:
            raise ValueError(
                'labels must be a table of text labels to numbers, e.g. { "Yes" = 1, "No" = 0 }'
            )
        if any(isinstance(x, bool) or not isinstance(x, int | float) for x in v.values()):
            raise ValueError('each label maps to a number, e.g. { "Yes" = 1, "No" = 0 }')
        if any(not k for k in v):
            raise ValueError("outcome labels must be non-empty text")
        return v

    @model_validator(mode="after")
    def _labels_within(self) -> OutcomeSpec:
        if self.labels is None:
            return self
        if not all(math.isfinite(x) for x in self.labels.values()):
            raise ValueError("outcome label values must be finite numbers")
        lo, hi = self.offset, self.offset + self.bound
        if self.binary:
            other = sorted(k for k, x in self.labels.items() if x not in (lo, hi))
            if other:
                raise ValueError(
                    f"outcome labels {other} map to numbers other than offset and offset + bound "
                    f"([{lo:g}, {hi:g}]): a binary outcome takes only those two values"
                )
        outside = sorted(k for k, x in self.labels.items() if not lo <= x <= hi)
        if outside:
            raise ValueError(
                f"outcome labels {outside} map to numbers outside [offset, offset + bound] = "
                f"[{lo:g}, {hi:g}]: change the labels' numbers or the bound"
            )
        return self

    @field_validator("bound")
    @classmethod
    def _bound(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError("the outcome bound B must be positive and finite, e.g. 1.0")
        return float(v)

    @field_validator("offset")
    @classmethod
    def _offset(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("offset must be finite")
        return float(v)


class CategoricalCovariate(_Model):
    """A categorical covariate with its public levels (one stratum each, in the order given).

    A value not among ``levels`` is an error, unless ``other`` names a level to map it to (either
    one of ``levels`` or a new level appended after them).
    """

    kind: Literal["categorical"]
    column: str = Field(min_length=1)
    levels: list[str] | list[int] = Field(min_length=1)
    other: str | int | None = None

    @model_validator(mode="after")
    def _check(self) -> CategoricalCovariate:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels of {self.column!r} must be distinct")
        if self.other is not None and type(self.other) is not type(self.levels[0]):
            raise ValueError(f"'other' of {self.column!r} must have the same type as its levels")
        return self

    @property
    def all_levels(self) -> list[str | int]:
        """The levels in stratum order, including an appended ``other`` level."""
        levels: list[str | int] = list(self.levels)
        if self.other is not None and self.other not in levels:
            levels.append(self.other)
        return levels

    @property
    def size(self) -> int:
        return len(self.all_levels)


class NumericCovariate(_Model):
    """A numeric covariate cut at fixed public bin edges ``e_0 < e_1 < ... < e_k``.

    Bin ``i`` is ``[e_i, e_{i+1})``; the last bin also holds ``e_k``. The first edge may be
    ``-inf`` and the last ``inf`` for open-ended bins; a value outside ``[e_0, e_k]`` is an error.
    """

    kind: Literal["numeric"]
    column: str = Field(min_length=1)
    edges: list[float] = Field(min_length=2)

    @field_validator("edges", mode="before")
    @classmethod
    def _edges(cls, v: Any) -> list[float]:
        if not isinstance(v, list | tuple):
            raise ValueError("edges must be a list of numbers, e.g. [0, 18, 40, 65, inf]")
        try:
            edges = [float(e) for e in v if not isinstance(e, bool)] if v else []
        except (TypeError, ValueError):
            raise ValueError("bin edges must be numbers (or 'inf' / '-inf' at the ends)") from None
        if any(math.isnan(e) for e in edges) or any(math.isinf(e) for e in edges[1:-1]):
            raise ValueError("bin edges must be numbers; only the first may be -inf, the last inf")
        if edges[0] == math.inf or edges[-1] == -math.inf:
            raise ValueError("the first edge may be -inf and the last inf, not the other way round")
        if any(b <= a for a, b in pairwise(edges)):
            raise ValueError("bin edges must be strictly increasing, e.g. [0, 18, 40, 65, inf]")
        return edges

    @field_serializer("edges")
    def _edges_json(self, v: list[float]) -> list[float | str]:
        # JSON has no infinity: open ends are written "inf" / "-inf" (read back by the validator)
        return [e if math.isfinite(e) else ("inf" if e > 0 else "-inf") for e in v]

    @property
    def size(self) -> int:
        return len(self.edges) - 1


Covariate = Annotated[CategoricalCovariate | NumericCovariate, Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------------
# sites


class PrivacyCap(_Model):
    """A site's lifetime privacy cap: the ledger refuses a release that would pass it."""

    epsilon: ExactNumber
    delta: ExactNumber = Fraction(0)

    @model_validator(mode="after")
    def _check(self) -> PrivacyCap:
        PrivacyParams(self.epsilon, self.delta)  # negative / delta >= 1 -> error
        if self.epsilon <= 0:
            raise ValueError("the lifetime epsilon cap must be positive")
        return self

    @property
    def params(self) -> PrivacyParams:
        return PrivacyParams(self.epsilon, self.delta)


class SiteSpec(_Model):
    """One site: its id, where its data is, and what one release of this study may spend.

    ``data`` is a local path or an fsspec URL (``s3://bucket/key.parquet``); a relative path is read
    relative to the spec file's folder (see :meth:`StudySpec.data_location`). ``format`` is
    inferred from the suffix (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``; a trailing ``/``: a
    partitioned Parquet dataset, ``"parquet-dataset"``) unless given. A site's own data location
    may also be a database (schemas/sources.py); that is site configuration, never the spec's.
    ``budget_split`` defaults to the even split over the estimator's parts.
    ``ledger`` overrides the study-level ledger URL for this site.
    """

    id: str = Field(pattern=_ID)
    data: str = Field(min_length=1)
    format: Literal["csv", "parquet", "parquet-dataset"] | None = None
    epsilon: ExactNumber
    delta: ExactNumber = Fraction(0)
    #: explicit shares, or a preset: "paper" (the even split) or "default" (the estimator's
    #: searched split, docs/results.md); None: the estimator's default (even for the paper's)
    budget_split: list[ExactNumber] | Literal["paper", "default"] | None = None
    lifetime_cap: PrivacyCap
    ledger: str | None = None
    #: the site's Ed25519 report-signing key (``dpate site keygen``); the aggregator then refuses
    #: a report of this site that is unsigned or wrongly signed (docs/deploying.md, Trust)
    public_key: str | None = Field(
        default=None, pattern=r"^ed25519:[A-Za-z0-9+/]{43}=$", exclude_if=lambda v: v is None
    )

    @model_validator(mode="after")
    def _check(self) -> SiteSpec:
        p = PrivacyParams(self.epsilon, self.delta)
        if p.epsilon <= 0:
            raise ValueError(f"epsilon ({p.epsilon}) must be positive for a release, e.g. '1'")
        if not p <= self.lifetime_cap.params:
            raise ValueError(
                f"one release (epsilon {p.epsilon}, delta {p.delta}) exceeds the lifetime cap "
                f"(epsilon {self.lifetime_cap.epsilon}, delta {self.lifetime_cap.delta}): "
                f"lower the release budget or raise the cap"
            )
        if isinstance(self.budget_split, list):
            BudgetSplit(tuple(self.budget_split))  # positive shares summing to exactly 1
        return self

    @property
    def privacy(self) -> PrivacyParams:
        return PrivacyParams(self.epsilon, self.delta)

    @property
    def data_format(self) -> Literal["csv", "parquet", "parquet-dataset"]:
        if self.format is not None:
            return self.format
        name = self.data.lower().split("?")[0]
        if name.endswith("/"):
            return "parquet-dataset"
        if name.endswith((".parquet", ".pq")):
            return "parquet"
        if name.endswith((".csv", ".csv.gz", ".csv.bz2", ".csv.zst")):
            return "csv"
        raise ValueError(
            f"site {self.id!r}: cannot tell the format of {self.data!r} from its suffix: "
            f"set format = 'csv', 'parquet' or 'parquet-dataset'"
        )


# ---------------------------------------------------------------------------------------------
# the study


def _estimator_name(value: str) -> str:
    if value not in ESTIMATORS:
        names = ", ".join(repr(n) for n in ESTIMATORS)
        raise ValueError(f"must be one of {names}")
    return value


def _aggregator_name(value: str) -> str:
    if value not in AGGREGATORS:
        names = ", ".join(repr(n) for n in AGGREGATORS)
        raise ValueError(f"must be one of {names}")
    return value


#: an aggregator registered in :data:`dpate_core.aggregators.AGGREGATORS`
AggregatorName = Annotated[
    str,
    AfterValidator(_aggregator_name),
    WithJsonSchema({"type": "string", "enum": sorted(AGGREGATORS)}),
]

#: an estimator registered in :data:`dpate_core.registry.ESTIMATORS`
EstimatorName = Annotated[
    str,
    AfterValidator(_estimator_name),
    WithJsonSchema({"type": "string", "enum": sorted(ESTIMATORS)}),
]


class StudySpec(_Model):
    """A whole study. See the module docstring and ``docs/study-spec.md``.

    ``missing``: what to do with a row whose treatment, outcome or covariate is missing or not
    finite: ``"reject"`` (default: refuse the file, naming columns and counts) or ``"drop"`` (drop
    those rows; the operator's report says how many, and the released ``N`` is the count kept).

    ``arm_sizes_public``: required with estimator ``"dim"`` (no silent default: ``true``
    publishes ``N_t`` and ``N_c`` exactly as public design facts, ``false`` spends a third budget
    part on a DP treated count, ERRATA section 5); refused with the matching estimators, which
    publish no arm sizes (and in an observational design arm sizes are never public).

    ``require_all_sites``: the aggregation fails unless every site has published a valid report
    (True, default); otherwise it proceeds with the valid reports and lists the missing sites.
    ``release``: the round label of this run (e.g. ``"2026-q1"``), part of every release id.
    ``reports``: base URL (fsspec) where sites publish their reports (None: the pipeline's
    default storage). ``ledger``: default URL of
    each site's privacy ledger (a site's own ``ledger`` wins); None leaves it to the pipeline's
    default.
    """

    spec_version: Literal[1] = SPEC_VERSION
    study_id: str = Field(pattern=_ID)
    title: str = ""
    design: Literal["randomized", "observational"]
    estimator: EstimatorName
    aggregator: AggregatorName = "mvagg"
    arm_sizes_public: bool | None = None
    #: the matching estimators' sampling variance: "appendix" (the paper's V_hat, the default) or
    #: "stratified" (within-cell, docs/inference.md); omitted from the canonical form when unset
    variance: Literal["appendix", "stratified"] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    #: the adjusted estimator's post-processing (docs/adjusted.md, "Two weightings"): "auto" (the
    #: default: a public rule on N, |X| and eps), "subclassification" or "fixed_effects"; omitted
    #: from the canonical form when unset, so specs without it keep their hash
    adjusted_weighting: Literal["auto", "subclassification", "fixed_effects"] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    missing: Literal["reject", "drop"] = "reject"
    treatment: TreatmentSpec
    outcome: OutcomeSpec
    covariates: list[Covariate] = Field(default_factory=list)
    sites: list[SiteSpec] = Field(min_length=1)
    require_all_sites: bool = True
    #: every site must list a public_key and sign its reports (docs/deploying.md, Trust)
    require_signed_reports: bool = Field(default=False, exclude_if=lambda v: not v)
    release: str = Field(default="1", pattern=_ID)
    reports: str | None = Field(default=None, min_length=1)
    ledger: str | None = None

    @model_validator(mode="after")
    def _check(self) -> StudySpec:
        est = self.estimator_info
        problems: list[tuple[str, str]] = []  # (field path, message)
        if self.design not in est.designs:
            valid = [e.name for e in ESTIMATORS.values() if self.design in e.designs]
            problems.append(
                (
                    "estimator",
                    f"{est.name!r} ({est.label}) is only valid for a {' or '.join(est.designs)} "
                    f"design: use one of {valid} for an {self.design} study",
                )
            )
        if self.estimator == "dim" and self.arm_sizes_public is None:
            problems.append(
                (
                    "arm_sizes_public",
                    "estimator 'dim' publishes the arm sizes N_t and N_c exactly when they are "
                    "public design facts: say so explicitly, arm_sizes_public = true (the paper's "
                    "randomized-trial setting) or false (a DP treated count, a third budget part)",
                )
            )
        elif self.estimator != "dim" and self.arm_sizes_public is not None:
            why = (
                "arm sizes are not public in an observational design"
                if self.design == "observational"
                else f"estimator {self.estimator!r} publishes no arm sizes"
            )
            problems.append(
                (
                    "arm_sizes_public",
                    f"{why}: remove arm_sizes_public (it applies to estimator 'dim' only)",
                )
            )
        if (est.needs_covariates or self.design == "observational") and not self.covariates:
            why = (
                f"estimator {self.estimator!r} matches on covariates"
                if est.needs_covariates
                else "an observational study must adjust for its confounders"
            )
            problems.append(("covariates", f"{why}: declare at least one [[covariates]] entry"))
        cols = [self.treatment.column, self.outcome.column, *(c.column for c in self.covariates)]
        dup = sorted({c for c in cols if cols.count(c) > 1})
        if dup:
            problems.append(
                (
                    "(columns)",
                    f"columns {dup} are used more than once: each role needs its own column",
                )
            )
        ids = [s.id for s in self.sites]
        dup_ids = sorted({i for i in ids if ids.count(i) > 1})
        if dup_ids:
            problems.append(("sites", f"site ids {dup_ids} are repeated: site ids must be unique"))
        if self.variance is not None and self.variance not in est.variance_modes:
            problems.append(
                (
                    "variance",
                    f"estimator {self.estimator!r} has no variance option: remove variance (it "
                    f"applies to 'smooth_matching' and 'global_matching')",
                )
            )
        if self.adjusted_weighting is not None and self.estimator != "adjusted":
            problems.append(
                (
                    "adjusted_weighting",
                    f"estimator {self.estimator!r} has no weighting option: remove "
                    f"adjusted_weighting (it applies to estimator 'adjusted' only)",
                )
            )
        if self.outcome.binary and est.binary_parts is None:
            problems.append(
                (
                    "outcome.binary",
                    f"estimator {self.estimator!r} has no binary-outcome mode: remove "
                    f"outcome.binary (it applies to estimator 'dim')",
                )
            )
        parts = self.release_parts
        for j, s in enumerate(self.sites):
            if isinstance(s.budget_split, list) and len(s.budget_split) != parts:
                problems.append(
                    (
                        f"sites.{j}.budget_split",
                        f"estimator {self.estimator!r} splits its budget into {parts} parts, but "
                        f"budget_split has {len(s.budget_split)} shares: give exactly {parts}",
                    )
                )
            if not est.pure and s.delta <= 0:
                problems.append(
                    (
                        f"sites.{j}.delta",
                        f"estimator {self.estimator!r} is (epsilon, delta)-DP and needs delta > 0: "
                        f"give a small delta such as '1e-5'",
                    )
                )
        if self.domain_size > MAX_DOMAIN_SIZE:
            problems.append(
                (
                    "covariates",
                    f"the covariates define {self.domain_size} strata, more than {MAX_DOMAIN_SIZE}: "
                    f"coarsen the bins or drop a covariate",
                )
            )
        if self.require_signed_reports:  # docs/deploying.md, Trust
            for j, s in enumerate(self.sites):
                if s.public_key is None:
                    problems.append(
                        (
                            f"sites.{j}.public_key",
                            f"require_signed_reports is set but site {s.id!r} has no public_key: "
                            f"add the line printed by dpate site keygen {s.id}",
                        )
                    )
        if problems:
            raise _CrossFieldProblems(problems)
        return self

    # --- derived, public quantities ---------------------------------------------------------

    @property
    def estimator_info(self) -> Estimator:
        """The registered estimator this study names (:mod:`dpate_core.registry`)."""
        return estimator_of(self.estimator)

    @property
    def release_parts(self) -> int:
        """How many parts one release splits its budget into (the length of a budget split)."""
        return self.estimator_info.n_parts(self.arm_sizes_public, self.outcome.binary)

    @property
    def publishes_exact_arm_sizes(self) -> bool:
        """Whether a release publishes ``N_t`` and ``N_c`` exactly (``dim`` with public arm
        sizes); every release publishes its ``N`` exactly."""
        return self.estimator == "dim" and bool(self.arm_sizes_public)

    @property
    def domain_size(self) -> int:
        """``|X|``: the number of possible strata, the product of the covariates' level counts
        (1 without covariates). Public: it comes from the spec, never from the data."""
        return math.prod(c.size for c in self.covariates)

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
        split for the paper's mechanisms, ``docs/adjusted.md`` for the adjusted one; the presets
        ``"paper"`` and ``"default"`` per :meth:`dpate_core.registry.Estimator.split`)."""
        return self.estimator_info.split(
            self.site(site_id).budget_split, self.arm_sizes_public, self.outcome.binary
        )

    @property
    def variance_mode(self) -> str:
        """The matching estimators' variance mode (``"appendix"`` unless the spec says
        ``"stratified"``); pass it as ``PlanInputs.variance``."""
        return self.variance or "appendix"

    @property
    def weighting(self) -> str:
        """The adjusted estimator's weighting as written (``"auto"`` unless the spec says
        otherwise); pass it as ``PlanInputs.weighting``. :meth:`resolved_weighting` gives the one
        a site's release uses."""
        return self.adjusted_weighting or "auto"

    def resolved_weighting(self, site_id: str, n: int) -> str | None:
        """The weighting the site's adjusted release would use with ``n`` records (its public,
        published ``N``): :attr:`weighting`, or for ``"auto"`` the public rule
        ``N / (2 |X|) >= AUTO_RATIO * 2 / eps_n`` (:func:`dpate_core.predictors.adjusted_weighting`).
        None for the other estimators."""
        if self.estimator != "adjusted":
            return None
        from dpate_core.predictors import adjusted_weighting

        s = self.site(site_id)
        return adjusted_weighting(
            self.weighting, n, self.domain_size, s.epsilon, self.budget_split(site_id).shares
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


_FIELD_HINTS: dict[str, str] = {
    "design": "one of 'randomized', 'observational'",
    "policy": "one of 'clip', 'reject'",
    "missing": "one of 'reject', 'drop'",
    "kind": "one of 'categorical', 'numeric'",
}


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    """pydantic's errors as ``(dotted path, message)``, with the valid alternatives spelled out.
    (A spec holds no patient data, but we still do not echo input values back.)"""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False, include_input=False):
        cross = err.get("ctx", {}).get("error")
        if isinstance(cross, _CrossFieldProblems):
            prefix = ".".join(str(p) for p in err["loc"])
            out += [(f"{prefix}.{loc}" if prefix else loc, msg) for loc, msg in cross.problems]
            continue
        loc_parts = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
        # pydantic adds the union member tag to the path: drop it
        loc_parts = [p for p in loc_parts if p not in ("categorical", "numeric")]
        loc = ".".join(loc_parts) or "(spec)"
        msg = err["msg"]
        typ = err["type"]
        last = loc_parts[-1] if loc_parts else ""
        if typ == "extra_forbidden":
            msg = "unknown field: check its spelling against docs/study-spec.md"
        elif typ == "missing":
            msg = "required field is missing"
        elif typ == "string_pattern_mismatch":
            msg = f"invalid identifier: use {_ID_HINT}"
        elif typ in ("literal_error", "union_tag_invalid") and last in _FIELD_HINTS:
            msg = f"must be {_FIELD_HINTS[last]}"
        elif typ == "union_tag_not_found":
            msg = "each covariate needs kind = 'categorical' or 'numeric'"
        elif msg.startswith("Value error, "):
            msg = msg.removeprefix("Value error, ")
        out.append((loc, msg))
    return out
