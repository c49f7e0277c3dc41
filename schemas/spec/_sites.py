"""The study spec's sites: each site's data location, per-release budget and lifetime cap."""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from dpate.schemas.spec._fields import _ID, ExactNumber, _Model
from dpate_core.privacy import BudgetSplit, PrivacyParams

__all__ = ["PrivacyCap", "SiteSpec"]


class PrivacyCap(_Model):
    """A site's lifetime privacy cap: the ledger refuses a release that would pass it."""

    epsilon: ExactNumber = Field(
        description="The most epsilon the site's ledger lets this study spend over all its "
        "releases (> 0)."
    )
    delta: ExactNumber = Field(
        default=Fraction(0), description="The most delta over all releases, in `[0, 1)`."
    )

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
    relative to the spec file's folder (see :meth:`dpate.schemas.spec.StudySpec.data_location`). ``format`` is
    inferred from the suffix (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``; a trailing ``/``: a
    partitioned Parquet dataset, ``"parquet-dataset"``) unless given. A site's own data location
    may also be a database or Spark (dpate.schemas.site_data); that is site configuration, never
    the spec's.
    ``budget_split`` defaults to the even split over the estimator's parts.
    ``ledger`` overrides the study-level ledger URL for this site.
    ``n``: the site's record count as the study declares it in advance (public: every report
    publishes the site's ``N`` exactly); a study-wide public rule reads it (the adjusted
    estimator's ``adjusted_weighting = "auto"``, one estimand for the whole study), and nothing
    else does: a release whose ``N`` differs still releases, with the choice the spec made.
    """

    id: str = Field(pattern=_ID, description="The site's name, unique in the study.")
    data: str = Field(
        min_length=1,
        json_schema_extra={"doc_type": "path or URL"},
        description="The site's records in a local run: a CSV or Parquet path relative to the "
        "spec file's folder (and inside it, unless the site sets `DPATE_ALLOW_SPEC_DATA=1`). A "
        'deployed site reads its own data location (docs/reference/pipeline.md, "Settings").',
    )
    format: Literal["csv", "parquet", "parquet-dataset"] | None = Field(
        default=None,
        json_schema_extra={"doc_default": "from the suffix"},
        description="The file format, when the suffix does not say it (`.csv`, `.csv.gz`, "
        '`.parquet`, `.pq`; a trailing `/`: `"parquet-dataset"`, a folder of Parquet files).',
    )
    epsilon: ExactNumber = Field(description="What one release of the study spends (> 0).")
    delta: ExactNumber = Field(
        default=Fraction(0),
        description="One release's delta, in `[0, 1)`: > 0 for the matching estimators, "
        "which are `(epsilon, delta)`-DP; the pure estimators charge the ledger no delta.",
    )
    budget_split: list[ExactNumber] | Literal["paper", "default"] | None = Field(
        default=None,
        json_schema_extra={"doc_default": "the estimator's default"},
        description="How one release's budget is shared among its parts: exact shares summing "
        'to 1, one per part of the estimator\'s release, or a preset: `"paper"` (the even '
        'split) or `"default"` (the estimator\'s searched split, docs/explanation/results.md).',
    )
    lifetime_cap: PrivacyCap = Field(
        json_schema_extra={"doc_type": "`{ epsilon, delta }` (below)"},
        description="The cap over all releases of the study at this site; must equal the cap "
        "pinned in the site's ledger (`dpate ledger init`), else the release is refused.",
    )
    ledger: str | None = Field(
        default=None,
        json_schema_extra={"doc_type": "URL"},
        description="Ignored: a ledger's location is a site setting (docs/how-to/ledger.md).",
    )
    n: int | None = Field(
        default=None,
        ge=2,
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_default": "none: not declared"},
        description="The site's record count as the study declares it in advance (public: "
        "every report publishes `N`). Only a study-wide public choice reads it "
        '(`adjusted_weighting = "auto"`; the propensity estimator\'s `bands` and `model_share` '
        '`"auto"`, from `n` times the site\'s epsilon); a release with another `N` still '
        "releases, with the spec's choice.",
    )
    public_key: str | None = Field(
        default=None,
        pattern=r"^ed25519:[A-Za-z0-9+/]{43}=$",
        exclude_if=lambda v: v is None,
        json_schema_extra={"doc_type": '`"ed25519:<base64>"`'},
        description="The site's report-signing key, as `dpate site keygen SITE` prints it: "
        'needed for the site to release unless the study sets `signing = "none"`; when given, '
        "the server refuses an unsigned or wrongly signed report in the site's name "
        "(docs/how-to/deploying.md, Trust).",
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
