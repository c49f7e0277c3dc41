"""The published site report: the one document a site sends out of its walls.

A report holds the public fields of one :class:`dpate_core.release.SiteEstimate` (a DP output,
public design constants and post-processing of those: nothing else), the study and site ids, the
hash of the study spec the site ran, the software version, a release id and the creation time.
It is versioned (``schema``/``schema_version``) and written as canonical JSON: the same content
always gives the same bytes. Exact privacy parameters stay exact strings (``"1/3"``).

API::

    report = SiteReport.from_estimate(estimate, spec=spec, site_id="site-a", release_id=rid)
    data = report.to_json_bytes()                       # publish these bytes
    report = read_report(data, spec)                    # aggregator side: validate or ReportError
    estimate = report.to_estimate()                     # back to a SiteEstimate for aggregation

:func:`read_report` refuses (with :class:`ReportError` naming the reason) malformed JSON, a wrong
schema version, wrong types (no coercion: ``"0.5"`` is not a number), non-finite numbers, ``n < 2``,
``epsilon <= 0``, a non-positive variance, arm sizes that do not add up to ``n``, another study id,
another spec hash, a site not in the spec, and a budget or bound that is not the one the spec gives
that site. It also refuses a document larger than :data:`MAX_REPORT_BYTES` before parsing it, a
document whose nesting or numbers are out of bounds before any arithmetic on them
(:mod:`dpate.schemas.reports._bounded_json`; exact strings: :func:`dpate_core.privacy.exact`), then, when
an unsigned or wrongly signed report (:mod:`dpate.signing`: reports are signed by
default, so every site needs its public key in the spec unless the study opts out with
``signing = "none"``) before any of its numbers is checked, and last
numbers the spec's mechanism cannot produce (:mod:`dpate.schemas.reports._plausibility`).

Optional fields (left out of the JSON when absent, so older reports keep their bytes):
``ledger_head`` (the ``seq`` and ``row_hash`` of the release's COMMIT row in the site's ledger:
published heads anchor the ledger, ``dpate ledger verify --against-reports``), ``signature``
(``ed25519:<base64>`` over the canonical JSON of every other field) and, from version 2,
``lifetime_spend``: the site ledger's lifetime ``spent`` and ``cap`` right after this release was
reserved, as exact strings (public amounts: sums of releases' spec budgets and the cap, never
data; docs/explanation/privacy.md). A report whose spend passes its cap, falls short of this release's own
budget, or names a cap other than the spec's for the site is refused
(:func:`dpate.schemas.reports._plausibility.spend_problems`).

Version 4 adds the optional ``balance``: the site's DP covariate-balance table
(:class:`BalanceDoc`, a release of its own with the spec's ``[balance]`` epsilon, committed to the
site's ledger under its own release id before the report is published); a report without one is
written as version 3, so its bytes are those of earlier software.

From version 3, a release that is not resolved (``SiteEstimate.resolved``: its noisy values do not
determine an estimate at this budget) is published as such: the estimate's ``resolved`` is false
with an ``unresolved_reason``, and its ``tau``, ``variance`` and ``raw_variance`` are null. A
resolved release leaves both keys out.

Versions: every model here forbids unknown fields, so a field an older reader would refuse needs
a new ``schema_version``. This software writes version :data:`REPORT_SCHEMA_VERSION` and reads
every version in :data:`REPORT_SCHEMA_VERSIONS` (version 1: no ``lifetime_spend``; versions 1
and 2: no unresolved release); a newer version is refused with a reason.

The report's parts (:class:`PublicEstimate`, :class:`LedgerHead`, :class:`LifetimeSpend`,
:class:`BudgetAmount`) are in this package's ``_parts`` module.
"""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from importlib import metadata
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from dpate.errors import DpateError, ExitCode
from dpate.schemas.reports._bounded_json import BoundedJSONError, loads_bounded
from dpate.schemas.reports._parts import (
    BalanceDoc,
    BudgetAmount,
    LedgerHead,
    LifetimeSpend,
    PublicEstimate,
)
from dpate.schemas.reports._plausibility import estimate_problems, spend_problems
from dpate.schemas.spec import StudySpec, canonical_json
from dpate_core.release import SiteEstimate

__all__ = [
    "BALANCE_SCHEMA_VERSION",
    "MAX_REPORT_BYTES",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "REPORT_SCHEMA_VERSIONS",
    "BalanceDoc",
    "BudgetAmount",
    "LedgerHead",
    "LifetimeSpend",
    "PublicEstimate",
    "ReportError",
    "SiteReport",
    "default_release_id",
    "read_report",
    "software_version",
]

REPORT_SCHEMA: Literal["dpate.site-report"] = "dpate.site-report"
#: the version this software writes (2 added ``lifetime_spend``, 3 the unresolved release)
REPORT_SCHEMA_VERSION: Literal[3] = 3
#: the version of a report that carries a balance table (4 added ``balance``)
BALANCE_SCHEMA_VERSION: Literal[4] = 4
#: the versions this software reads
REPORT_SCHEMA_VERSIONS: tuple[int, ...] = (1, 2, 3, 4)

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_RELEASE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,255}$"
#: a report is a few hundred bytes; anything past this is refused before it is parsed
MAX_REPORT_BYTES = 64 * 1024


class ReportError(DpateError, ValueError):
    """A site report cannot be used; the message says why (one reason per line)."""

    exit_code = ExitCode.REPORT
    cause = "invalid report"

    def __init__(self, reasons: list[str], source: str | None = None):
        self.reasons = reasons
        where = f" {source}" if source else ""
        super().__init__(
            f"rejected site report{where}: "
            + "; ".join(reasons)
            + " (the report is not aggregated; ask the site to re-publish a valid report)"
        )


def software_version() -> str:
    """The installed ``dpate`` distribution's version (importlib.metadata)."""
    try:
        return metadata.version("dpate")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "0+unknown"


def default_release_id(spec: StudySpec, site_id: str) -> str:
    """``study_id:release:site_id``: one release per site per study round."""
    spec.site(site_id)
    return f"{spec.study_id}:{spec.release}:{site_id}"


class SiteReport(BaseModel):
    """One site's published report (schema ``dpate.site-report``, versions 1 to 4)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    schema_: Literal["dpate.site-report"] = Field(default=REPORT_SCHEMA, alias="schema")
    schema_version: Literal[1, 2, 3, 4] = REPORT_SCHEMA_VERSION
    study_id: str = Field(pattern=_ID)
    site_id: str = Field(pattern=_ID)
    spec_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    software_version: str = Field(min_length=1, max_length=64)
    release_id: str = Field(pattern=_RELEASE_ID)
    created_at: datetime
    estimate: PublicEstimate
    ledger_head: LedgerHead | None = Field(default=None, exclude_if=lambda v: v is None)
    lifetime_spend: LifetimeSpend | None = Field(default=None, exclude_if=lambda v: v is None)
    balance: BalanceDoc | None = Field(default=None, exclude_if=lambda v: v is None)
    signature: str | None = Field(
        default=None, pattern=r"^ed25519:[A-Za-z0-9+/]{86}==$", exclude_if=lambda v: v is None
    )

    @field_validator("created_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("created_at must carry a time zone (UTC, e.g. 2026-01-31T12:00:00Z)")
        return v.astimezone(UTC)

    @model_validator(mode="after")
    def _fields_of_the_version(self) -> SiteReport:
        if self.schema_version < 2 and self.lifetime_spend is not None:
            raise ValueError(
                f"lifetime_spend is a version-2 field, but the report says schema_version "
                f"{self.schema_version}"
            )
        if (self.balance is not None) != (self.schema_version >= 4):
            raise ValueError(
                f"balance is a version-4 field, and a version-4 report carries it, but the "
                f"report says schema_version {self.schema_version}"
                + (" with a balance table" if self.balance is not None else " without one")
            )
        if self.schema_version < 3 and "resolved" in self.estimate.model_fields_set:
            raise ValueError(
                f"estimate.resolved is a version-3 field, but the report says schema_version "
                f"{self.schema_version}"
            )
        return self

    @field_serializer("created_at")
    def _created_json(self, v: datetime) -> str:
        return v.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def from_estimate(
        cls,
        estimate: SiteEstimate | PublicEstimate,
        *,
        spec: StudySpec,
        site_id: str,
        release_id: str | None = None,
        created_at: datetime | None = None,
        software: str | None = None,
        lifetime_spend: LifetimeSpend | None = None,
        schema_version: int = REPORT_SCHEMA_VERSION,
        balance: BalanceDoc | dict[str, Any] | None = None,
    ) -> SiteReport:
        """The report of ``estimate`` released by ``site_id`` under ``spec``.

        ``estimate`` is the release itself or its public form (a ledger's COMMIT payload,
        validated); ``release_id`` defaults to :func:`default_release_id`, ``created_at`` to now
        (UTC) and ``software`` to this :func:`software_version`; ``lifetime_spend`` is the site
        ledger's totals after the release (omitted when None); ``schema_version=1`` or ``2`` is
        an earlier software's report (version 1: no ``lifetime_spend``; neither can hold an
        unresolved release). ``balance``: the site's committed balance table (the report is
        then version 4). The result is checked against ``spec`` exactly as :func:`read_report`
        would check it.
        """
        public = estimate if isinstance(estimate, PublicEstimate) else PublicEstimate.of(estimate)
        report = cls.model_validate(
            {
                "schema": REPORT_SCHEMA,
                "schema_version": BALANCE_SCHEMA_VERSION if balance is not None else schema_version,
                "study_id": spec.study_id,
                "site_id": site_id,
                "spec_hash": spec.spec_hash,
                "software_version": software or software_version(),
                "release_id": release_id or default_release_id(spec, site_id),
                "created_at": created_at or datetime.now(UTC),
                "estimate": public,
                "lifetime_spend": lifetime_spend,
                "balance": balance,
            }
        )
        problems = report.problems_against(spec)
        if problems:
            raise ReportError(problems, f"for site {site_id!r}")
        return report

    # --- writing ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def to_json_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace, UTF-8): same content, same bytes."""
        return canonical_json(self.to_dict())

    def signed_bytes(self) -> bytes:
        """What a signature covers: the canonical JSON of every field but ``signature``."""
        d = self.to_dict()
        d.pop("signature", None)
        return canonical_json(d)

    def signed_with(self, key: Any) -> SiteReport:
        """This report signed with an Ed25519 private key (deterministic: same bytes again)."""
        from dpate.signing import sign_bytes

        return self.model_copy(update={"signature": sign_bytes(key, self.signed_bytes())})

    # --- reading ----------------------------------------------------------------------------

    def problems_against(self, spec: StudySpec) -> list[str]:
        """Why this report does not belong to ``spec`` (empty when it does)."""
        out: list[str] = []
        if self.study_id != spec.study_id:
            out.append(f"study id {self.study_id!r} is not this study's ({spec.study_id!r})")
        if self.spec_hash != spec.spec_hash:
            out.append(
                f"spec hash {self.spec_hash[:12]}... differs from this study spec's "
                f"{spec.spec_hash[:12]}...: the site ran a different version of the spec"
            )
        try:
            site = spec.site(self.site_id)
        except KeyError:
            out.append(f"site {self.site_id!r} is not one of the study's sites")
            return out
        e = self.estimate
        if e.estimator != spec.estimator:
            out.append(f"estimator {e.estimator!r} is not the study's ({spec.estimator!r})")
        cost = spec.release_cost(site.id)  # a pure mechanism spends (epsilon, 0)
        if Fraction(e.epsilon) != cost.epsilon or Fraction(e.delta) != cost.delta:
            out.append(
                f"privacy (epsilon {e.epsilon}, delta {e.delta}) is not what the spec's release "
                f"spends at this site (epsilon {cost.epsilon}, delta {cost.delta})"
            )
        if e.bound != spec.outcome.bound:
            out.append(f"bound {e.bound} is not the spec's outcome bound {spec.outcome.bound}")
        want_split = [str(s) for s in spec.budget_split(site.id).shares]
        if e.budget_split != want_split:
            out.append(f"budget split {e.budget_split} is not the spec's {want_split}")
        if not out:  # the mechanism's public values are the spec's: check what they imply
            out += estimate_problems(e, spec)
        out += self._balance_problems(spec)
        if self.lifetime_spend is not None:
            out += spend_problems(
                self.lifetime_spend.spent.params,
                self.lifetime_spend.cap.params,
                release=cost,
                spec_cap=site.lifetime_cap.params,
            )
        return out

    def _balance_problems(self, spec: StudySpec) -> list[str]:
        """A balance table is one the spec's ``[balance]`` release can produce: its epsilon,
        its noise scale ``2 p / epsilon``, one row set per covariate of the spec."""
        b = self.balance
        if b is None:
            return []
        if spec.balance is None:
            return ["balance: the spec has no [balance] table, so a report carries none"]
        from dpate_core.balance import balance_scale

        out = []
        if Fraction(b.epsilon) != spec.balance.epsilon:
            out.append(
                f"balance.epsilon ({b.epsilon}) is not the spec's [balance] epsilon "
                f"({spec.balance.epsilon})"
            )
        layout = spec.balance_layout
        scale = balance_scale(layout, spec.balance.epsilon)
        if abs(b.noise_scale - scale) > 1e-9 * scale:
            out.append(
                f"balance.noise_scale ({b.noise_scale}) is not 2 p / epsilon = {scale} for the "
                f"spec's {len(layout.names)} covariate(s)"
            )
        names = set(layout.names)
        if {r.covariate for r in b.rows} != names:
            out.append("balance.rows must cover exactly the spec's covariates")
        if (b.bands is not None) != (b.within == "released"):
            out.append(
                f"balance.bands ({b.bands}) is given exactly when the within column is released "
                f"within public bands (within = {b.within!r})"
            )
        return out

    def to_estimate(self) -> SiteEstimate:
        """The :class:`SiteEstimate` this report carries (for the aggregator)."""
        return self.estimate.to_estimate()


def read_report(
    data: bytes | str, spec: StudySpec, *, site_id: str | None = None, source: str | None = None
) -> SiteReport:
    """Parse and validate a published report against ``spec`` (and ``site_id`` if given).

    Raises :class:`ReportError` listing every reason the report cannot be aggregated.
    ``source`` (e.g. the report's URL) is named in the error.
    """
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(
            [
                f"the document is {len(data)} bytes, more than the {MAX_REPORT_BYTES} a report may be"
            ],
            source,
        )
    try:
        doc = loads_bounded(data, what="report")
    except BoundedJSONError as exc:
        raise ReportError([str(exc)], source) from None
    claimed = doc.get("site_id") if isinstance(doc, dict) else None
    if site_id is not None and claimed != site_id:
        raise ReportError(
            [f"site id {str(claimed)[:64]!r} is not the expected {site_id!r}"], source
        )
    if isinstance(claimed, str):  # the signature before anything else is read from the numbers
        unsigned = _signature_problems(data, claimed, spec)
        if unsigned:
            raise ReportError(unsigned, source)
    try:
        report = SiteReport.model_validate_json(data, strict=True)
    except ValidationError as exc:
        raise ReportError(_reasons(exc), source) from None
    problems = report.problems_against(spec)
    if problems:
        raise ReportError(problems, source)
    return report


def _signature_problems(data: bytes | str, site_id: str, spec: StudySpec) -> list[str]:
    """Reports are signed by default: under ``signing = "required"`` every site's report must be
    signed by the site's public_key in the spec (a site without one cannot be accepted); under
    ``signing = "none"`` a site that still lists a key must sign (dpate.signing)."""
    from dpate.signing import signature_problems, unsigned_site_problem

    try:
        key = spec.site(site_id).public_key
        missing = unsigned_site_problem(spec, site_id)
    except KeyError:
        return []  # already refused: not one of the study's sites
    if missing is not None:
        return [f"signature: {missing}"]
    if key is None:
        return []
    raw = data.encode() if isinstance(data, str) else data
    return [f"signature: {p}" for p in signature_problems(raw, key)]


def _reasons(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "json_invalid":
            msg = "not valid JSON"
        elif err["type"] == "literal_error" and loc == "schema_version":
            versions = ", ".join(str(v) for v in REPORT_SCHEMA_VERSIONS)
            msg = f"unsupported report schema version: this software reads versions {versions}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field (not part of the report schema)"
        out.append(f"{loc}: {msg}")
    return out
