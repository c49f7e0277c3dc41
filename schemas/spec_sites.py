"""The study spec's sites: each site's data location, per-release budget and lifetime cap."""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from dpate.schemas.spec_fields import _ID, ExactNumber, _Model
from dpate_core.privacy import BudgetSplit, PrivacyParams

__all__ = ["PrivacyCap", "SiteSpec"]


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
    #: the record count the study declares for this site (public; None: not declared); omitted
    #: from the canonical form when unset, so specs without it keep their hash
    n: int | None = Field(default=None, ge=2, exclude_if=lambda v: v is None)
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
