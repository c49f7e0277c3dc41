"""The parts of a published site report (:mod:`dpate.schemas.reports._report`): the public estimate
(:class:`PublicEstimate`, a :class:`dpate_core.release.SiteEstimate`'s public fields as a strict
model), the ledger head (:class:`LedgerHead`) and the lifetime spend (:class:`LifetimeSpend`, two
exact :class:`BudgetAmount`). Every model forbids unknown fields and coerces nothing; exact privacy
parameters stay exact strings (``"1/3"``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from dpate.schemas.spec import EstimatorName
from dpate_core.privacy import BudgetSplit, PrivacyParams, exact
from dpate_core.release import SiteEstimate

__all__ = [
    "BalanceDoc",
    "BalanceRowDoc",
    "BudgetAmount",
    "LedgerHead",
    "LifetimeSpend",
    "PublicEstimate",
]


def _exact_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an exact number written as a string, e.g. '1/3'")
    return str(exact(value, name))


class PublicEstimate(BaseModel):
    """The public form of a :class:`SiteEstimate` (``SiteEstimate.public_fields()``) as a strict,
    validated model: the same fields under the same names, exact numbers as exact strings, the
    estimator one of the registry's names. It is converted from and back to a
    :class:`SiteEstimate` only through that dataclass's own definition (:meth:`of`,
    :meth:`to_estimate`), never field by field; ``tests/schemas/test_report.py`` holds the field
    names equal to the dataclass's.

    A resolved release has finite ``tau``, ``variance`` and ``raw_variance`` and leaves
    ``resolved`` and ``unresolved_reason`` out of its JSON; an unresolved one (report version 3)
    has ``resolved`` false, a non-empty ``unresolved_reason``, and ``tau``, ``variance`` and
    ``raw_variance`` null: no number that could be read as an estimate."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    estimator: EstimatorName
    tau: float | None
    variance: float | None
    raw_variance: float | None
    n: int
    n_treated: int | None
    n_control: int | None
    epsilon: str
    delta: str
    bound: float
    budget_split: list[str] = Field(min_length=1)
    diagnostics: dict[str, float]
    resolved: bool = Field(default=True, exclude_if=lambda v: v is True)
    unresolved_reason: str | None = Field(
        default=None, min_length=1, max_length=300, exclude_if=lambda v: v is None
    )

    @classmethod
    def of(cls, estimate: SiteEstimate) -> PublicEstimate:
        """The public form of ``estimate``: its ``public_fields()``, validated."""
        return cls.model_validate(estimate.public_fields())

    def to_estimate(self) -> SiteEstimate:
        """The :class:`SiteEstimate` these public fields describe, read through the dataclass's
        own annotations (exact strings back to :class:`~fractions.Fraction`; an unresolved
        release's null numbers as NaN)."""
        fields = self.model_dump()
        for k in ("tau", "variance", "raw_variance"):
            if fields[k] is None:
                fields[k] = math.nan
        return _SITE_ESTIMATE.validate_python(fields)

    @field_validator("epsilon", "delta")
    @classmethod
    def _exact(cls, v: str, info: Any) -> str:
        return _exact_str(v, info.field_name)

    @field_validator("budget_split")
    @classmethod
    def _split(cls, v: list[str]) -> list[str]:
        shares = [_exact_str(s, "budget share") for s in v]
        BudgetSplit(tuple(Fraction(s) for s in shares))
        return shares

    @model_validator(mode="after")
    def _check(self) -> PublicEstimate:
        numbers = ("tau", "variance", "raw_variance")
        if not self.resolved:
            published = [k for k in numbers if getattr(self, k) is not None]
            if published or self.unresolved_reason is None:
                raise ValueError(
                    "an unresolved release publishes no estimate: tau, variance and raw_variance "
                    "must be null and unresolved_reason given"
                    + (f" (got numbers for {', '.join(published)})" if published else "")
                )
        elif self.unresolved_reason is not None:
            raise ValueError("unresolved_reason is given, but the release says it is resolved")
        bad = [k for k in numbers if self.resolved and getattr(self, k) is None]
        bad += [
            k
            for k in (*numbers, "bound")
            if getattr(self, k) is not None and not math.isfinite(getattr(self, k))
        ]
        bad += [f"diagnostics.{k}" for k, v in self.diagnostics.items() if not math.isfinite(v)]
        if bad:
            raise ValueError(f"{', '.join(bad)} must be finite numbers")
        if self.n < 2:
            raise ValueError(f"n ({self.n}) must be at least 2")
        if self.variance is not None and not self.variance > 0:
            raise ValueError(
                f"variance ({self.variance}) must be positive: a released variance includes the "
                f"positive DP-noise term"
            )
        if not self.bound > 0:
            raise ValueError(f"bound ({self.bound}) must be positive")
        p = PrivacyParams(Fraction(self.epsilon), Fraction(self.delta))
        if p.epsilon <= 0:
            raise ValueError(f"epsilon ({p.epsilon}) must be positive")
        if (self.n_treated is None) != (self.n_control is None):
            raise ValueError("n_treated and n_control must both be given or both be null")
        if self.n_treated is not None and self.n_control is not None:
            if self.n_treated < 1 or self.n_control < 1:
                raise ValueError("n_treated and n_control must be at least 1")
            if self.n_treated + self.n_control != self.n:
                raise ValueError(
                    f"n_treated ({self.n_treated}) + n_control ({self.n_control}) must equal "
                    f"n ({self.n})"
                )
        return self


#: reads a SiteEstimate from its public fields through the dataclass's own annotations
_SITE_ESTIMATE: TypeAdapter[SiteEstimate] = TypeAdapter(SiteEstimate)


class LedgerHead(BaseModel):
    """The site ledger's head right after the release's COMMIT row (dpate.ledger)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    seq: int = Field(ge=1)
    row_hash: str = Field(pattern=r"^[0-9a-f]{64}$")


class BudgetAmount(BaseModel):
    """An exact ``(epsilon, delta)`` as the ledger writes it (``"1/3"``, ``"1/100000"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    epsilon: str
    delta: str

    @field_validator("epsilon", "delta")
    @classmethod
    def _exact(cls, v: str, info: Any) -> str:
        return _exact_str(v, info.field_name)

    @model_validator(mode="after")
    def _range(self) -> BudgetAmount:
        PrivacyParams(Fraction(self.epsilon), Fraction(self.delta))  # < 0 or delta >= 1: refused
        return self

    @property
    def params(self) -> PrivacyParams:
        return PrivacyParams(Fraction(self.epsilon), Fraction(self.delta))

    @classmethod
    def of(cls, p: PrivacyParams) -> BudgetAmount:
        return cls.model_validate(p.as_strings())

    def text(self) -> str:
        return f"epsilon {self.epsilon}, delta {self.delta}"


class LifetimeSpend(BaseModel):
    """The site ledger's totals right after this release's reservation: the lifetime ``spent``
    (every RESERVE row of the site up to and including this release's) and the ``cap`` that
    reservation was checked against. Public amounts: each reservation is a spec's public budget;
    no count, no data, no ledger location."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    spent: BudgetAmount
    cap: BudgetAmount

    @classmethod
    def of(cls, spent: PrivacyParams, cap: PrivacyParams) -> LifetimeSpend:
        return cls(spent=BudgetAmount.of(spent), cap=BudgetAmount.of(cap))


class BalanceRowDoc(BaseModel):
    """One row of a published balance table (:class:`dpate_core.balance.BalanceRow`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    covariate: str = Field(min_length=1, max_length=128)
    level: str | None = Field(default=None, max_length=128)
    mean_treated: float | None
    mean_control: float | None
    smd_before: float | None
    smd_within: float | None

    @field_validator("mean_treated", "mean_control", "smd_before", "smd_within")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number or null")
        return v


class BalanceDoc(BaseModel):
    """A site's published DP covariate-balance table (report version 4; a release of its own:
    ``epsilon`` its budget, ``noise_scale`` its discrete Laplace scale ``2 p / epsilon``;
    :mod:`dpate_core.balance`). Post-processing of one noisy count vector: nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    schema_: str = Field(default="dpate.balance", alias="schema", pattern=r"^dpate\.balance$")
    epsilon: str
    noise_scale: float = Field(gt=0)
    sensitivity: str = Field(max_length=64)
    within: str = Field(pattern=r"^(released|by construction|none)$")
    #: the number of public bands of a released within column (propensity bands); else absent
    bands: int | None = Field(default=None, ge=1, le=50, exclude_if=lambda v: v is None)
    rows: list[BalanceRowDoc] = Field(max_length=200)  # StudySpec's MAX_BALANCE_ROWS

    @field_validator("epsilon")
    @classmethod
    def _exact(cls, v: str) -> str:
        return _exact_str(v, "epsilon")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
