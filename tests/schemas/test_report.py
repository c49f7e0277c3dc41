"""The published site report: built from a release, canonical bytes, validated on read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import numpy as np
import pytest

from dpate.schemas.reports import (
    REPORT_SCHEMA_VERSION,
    LifetimeSpend,
    ReportError,
    SiteReport,
    read_report,
    software_version,
)
from dpate.schemas.spec import StudySpec
from dpate_core.mechanisms.difference_in_means import dp_difference_in_means
from dpate_core.mechanisms.matching import smooth_dp_matching
from dpate_core.privacy import PrivacyParams

from .test_spec import UNSIGNED, base

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def spec() -> StudySpec:
    return StudySpec.from_dict({**base(), **UNSIGNED})


@pytest.fixture(scope="module")
def estimate():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 6, 500)
    w = rng.integers(0, 2, 500)
    y = rng.random(500)
    return smooth_dp_matching(w, y, x, bound=1.0, epsilon="1", delta="1e-5", domain_size=6, rng=rng)


@pytest.fixture(scope="module")
def report(spec, estimate) -> SiteReport:
    return SiteReport.from_estimate(estimate, spec=spec, site_id="a", created_at=T0)


def tampered(report: SiteReport, change) -> bytes:
    d = json.loads(report.to_json_bytes())
    change(d)
    return json.dumps(d).encode()


def test_report_fields(report, spec, estimate):
    d = json.loads(report.to_json_bytes())
    assert d["schema"] == "dpate.site-report" and d["schema_version"] == 3 == REPORT_SCHEMA_VERSION
    assert d["study_id"] == "s1" and d["site_id"] == "a"
    assert d["spec_hash"] == spec.spec_hash
    assert d["software_version"] == software_version() != ""
    assert d["release_id"] == "s1:1:a"
    assert d["created_at"] == "2026-01-31T12:00:00.000000Z"
    assert d["estimate"] == estimate.public_fields()
    assert d["estimate"]["delta"] == "1/100000"  # exact strings


def test_canonical_bytes_and_round_trip(report, spec, estimate):
    again = SiteReport.from_estimate(
        estimate, spec=spec, site_id="a", created_at=T0.astimezone(timezone(timedelta(hours=2)))
    )
    assert again.to_json_bytes() == report.to_json_bytes()
    data = report.to_json_bytes()
    assert (
        b" " not in data
        and data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    )
    read = read_report(data, spec, site_id="a")
    assert read == report and read.to_json_bytes() == data
    assert read.to_estimate() == estimate


def test_dim_report_with_public_arm_sizes():
    d = {**base(), **UNSIGNED}
    d.update(design="randomized", estimator="dim", covariates=[], arm_sizes_public=True)
    d["sites"][1].pop("budget_split")
    spec = StudySpec.from_dict(d)
    rng = np.random.default_rng(1)
    w, y = rng.integers(0, 2, 100), rng.random(100)
    est = dp_difference_in_means(w, y, bound=1.0, epsilon="1/2", delta="1/100000", rng=rng)
    rep = read_report(SiteReport.from_estimate(est, spec=spec, site_id="b").to_json_bytes(), spec)
    assert rep.estimate.n_treated + rep.estimate.n_control == 100
    assert rep.to_estimate().epsilon == Fraction(1, 2)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(study_id="other"), "study id 'other' is not this study's"),
        (lambda d: d.update(spec_hash="0" * 64), "differs from this study spec's"),
        (lambda d: d.update(spec_hash="xyz"), "spec_hash"),
        (lambda d: d.update(site_id="zz"), "site 'zz' is not one of the study's sites"),
        (lambda d: d.update(schema_version=5), "this software reads versions 1, 2, 3, 4"),
        (lambda d: d.update(schema_version=4), "a version-4 report carries it"),
        (lambda d: d.pop("release_id"), "release_id: required field is missing"),
        (lambda d: d.update(extra=1), "unknown field"),
        (lambda d: d.update(created_at="2026-01-31T12:00:00"), "time zone"),
        (lambda d: d["estimate"].update(tau="0.5"), "estimate.tau"),
        # non-finite numbers are refused by the bounded parse (dpate.schemas.reports)
        (lambda d: d["estimate"].update(tau=float("nan")), "NaN is not a JSON number"),
        (lambda d: d["estimate"].update(variance=float("inf")), "Infinity is not a JSON number"),
        (lambda d: d["estimate"].update(variance=0.0), "variance (0.0) must be positive"),
        (
            lambda d: d["estimate"]["diagnostics"].update(s=float("nan")),
            "NaN is not a JSON number",
        ),
        (lambda d: d["estimate"].update(n=1), "n (1) must be at least 2"),
        (lambda d: d["estimate"].update(n=500.0), "estimate.n"),
        (lambda d: d["estimate"].update(n=True), "estimate.n"),
        (lambda d: d["estimate"].update(epsilon="0"), "epsilon (0) must be positive"),
        (
            lambda d: d["estimate"].update(epsilon=1),
            "estimate.epsilon: Input should be a valid string",
        ),
        (
            lambda d: d["estimate"].update(epsilon="2"),
            "is not what the spec's release spends at this site",
        ),
        (lambda d: d["estimate"].update(estimator="dim"), "estimator 'dim' is not the study's"),
        (lambda d: d["estimate"].update(bound=2.0), "not the spec's outcome bound"),
        (lambda d: d["estimate"].update(budget_split=["1/2", "1/2"]), "not the spec's"),
        (lambda d: d["estimate"].update(budget_split=["1/2", "1/3"]), "not 1"),
        (lambda d: d["estimate"].update(n_treated=3, n_control=None), "both be given"),
        (lambda d: d["estimate"].update(n_treated=3, n_control=4), "must equal n"),
    ],
)
def test_bad_reports_are_rejected_with_a_reason(report, spec, change, reason):
    with pytest.raises(ReportError) as info:
        read_report(tampered(report, change), spec, source="s3://r/a.json")
    assert reason in str(info.value), str(info.value)
    assert "s3://r/a.json" in str(info.value)


def test_not_json_and_wrong_site(report, spec):
    with pytest.raises(ReportError, match="not valid JSON"):
        read_report(b"{not json", spec)
    with pytest.raises(ReportError, match="site id 'a' is not the expected 'b'"):
        read_report(report.to_json_bytes(), spec, site_id="b")


def test_from_estimate_refuses_an_estimate_that_does_not_match_the_spec(spec, estimate):
    with pytest.raises(ReportError, match="not what the spec's release spends"):
        SiteReport.from_estimate(estimate, spec=spec, site_id="b")


def test_public_estimate_is_the_site_estimate_in_public_form(spec, estimate):
    """PublicEstimate has exactly SiteEstimate's fields, and converts both ways through the
    dataclass's definition: a field added to SiteEstimate fails here until the report has it."""
    import dataclasses

    from dpate.schemas.reports import PublicEstimate
    from dpate_core.release import SiteEstimate

    assert list(PublicEstimate.model_fields) == [f.name for f in dataclasses.fields(SiteEstimate)]
    public = PublicEstimate.of(estimate)
    assert public.model_dump(mode="json") == estimate.public_fields()
    back = public.to_estimate()
    assert back == estimate and type(back.epsilon) is Fraction
    assert all(type(s) is Fraction for s in back.budget_split)
    assert isinstance(back.budget_split, tuple)


def test_from_estimate_takes_the_public_form_and_the_recorded_software(spec, estimate):
    from dpate.schemas.reports import PublicEstimate

    public = PublicEstimate.model_validate(json.loads(json.dumps(estimate.public_fields())))
    built = SiteReport.from_estimate(
        public, spec=spec, site_id="a", created_at=T0, software="0.0.1"
    )
    direct = SiteReport.from_estimate(estimate, spec=spec, site_id="a", created_at=T0)
    assert built.software_version == "0.0.1"
    assert built.model_copy(update={"software_version": direct.software_version}) == direct


# --- lifetime spend (version 2) and version 1 ------------------------------------------------

#: site a: this release spends (1, 1/100000); its lifetime cap in the spec is (3, 1/10000)
SPEND = {"spent": {"epsilon": "2", "delta": "1/50000"}, "cap": {"epsilon": "3", "delta": "1/10000"}}


@pytest.fixture(scope="module")
def spent_report(spec, estimate) -> SiteReport:
    spend = LifetimeSpend.model_validate(SPEND)
    return SiteReport.from_estimate(
        estimate, spec=spec, site_id="a", created_at=T0, lifetime_spend=spend
    )


def test_lifetime_spend_round_trip(spent_report, spec):
    data = spent_report.to_json_bytes()
    d = json.loads(data)
    assert d["schema_version"] == 3
    assert d["lifetime_spend"] == SPEND  # exact strings, as the ledger writes them
    read = read_report(data, spec, site_id="a")
    assert read == spent_report and read.to_json_bytes() == data
    assert read.lifetime_spend is not None
    assert read.lifetime_spend.spent.params == PrivacyParams.of(2, "1/50000")
    assert read.lifetime_spend.cap.params == spec.site("a").lifetime_cap.params


def test_a_report_without_lifetime_spend_has_no_such_key(report):
    assert "lifetime_spend" not in json.loads(report.to_json_bytes())


@pytest.mark.parametrize("version", [1, 2])
def test_earlier_versions_are_still_read(report, spec, estimate, version):
    """A report written by an earlier software: schema_version 1 (no lifetime_spend) or 2."""
    old = tampered(report, lambda d: d.update(schema_version=version))
    read = read_report(old, spec, site_id="a")
    assert read.schema_version == version and read.lifetime_spend is None
    assert read.to_estimate() == estimate
    assert (
        read.to_json_bytes()
        == json.dumps(json.loads(old), sort_keys=True, separators=(",", ":")).encode()
    )  # read back, it keeps its version and its bytes


def test_version_1_report_cannot_carry_lifetime_spend(spent_report, spec):
    with pytest.raises(ReportError, match="lifetime_spend is a version-2 field"):
        read_report(tampered(spent_report, lambda d: d.update(schema_version=1)), spec)


@pytest.mark.parametrize(
    ("spend", "reason"),
    [
        (  # more than the cap
            {"spent": {"epsilon": "7/2", "delta": "1/50000"}, "cap": SPEND["cap"]},
            "spent (epsilon 7/2, delta 1/50000) exceeds the cap (epsilon 3, delta 1/10000)",
        ),
        (  # delta past the cap
            {"spent": {"epsilon": "2", "delta": "1/1000"}, "cap": SPEND["cap"]},
            "exceeds the cap",
        ),
        (  # less than this release's own budget (1, 1/100000)
            {"spent": {"epsilon": "1/2", "delta": "1/50000"}, "cap": SPEND["cap"]},
            "below this release's own budget (epsilon 1, delta 1/100000)",
        ),
        (
            {"spent": {"epsilon": "2", "delta": "0"}, "cap": SPEND["cap"]},
            "below this release's own budget",
        ),
        (  # not the spec's cap for the site
            {"spent": SPEND["spent"], "cap": {"epsilon": "10", "delta": "1/10000"}},
            "cap (epsilon 10, delta 1/10000) is not the spec's lifetime cap",
        ),
        ({"spent": {"epsilon": "-1", "delta": "0"}, "cap": SPEND["cap"]}, "must not be negative"),
        ({"spent": {"epsilon": "two", "delta": "0"}, "cap": SPEND["cap"]}, "is not a number"),
        ({"spent": {"epsilon": 2, "delta": "0"}, "cap": SPEND["cap"]}, "valid string"),
        ({"spent": SPEND["spent"]}, "lifetime_spend.cap: required field is missing"),
        ({**SPEND, "remaining": SPEND["cap"]}, "unknown field"),
    ],
)
def test_implausible_lifetime_spend_is_rejected(spent_report, spec, spend, reason):
    with pytest.raises(ReportError) as info:
        read_report(tampered(spent_report, lambda d: d.update(lifetime_spend=spend)), spec)
    assert reason in str(info.value), str(info.value)


def test_from_estimate_refuses_an_implausible_lifetime_spend(spec, estimate):
    over = LifetimeSpend.of(PrivacyParams.of(4, "1/50000"), PrivacyParams.of(3, "1/10000"))
    with pytest.raises(ReportError, match="exceeds the cap"):
        SiteReport.from_estimate(estimate, spec=spec, site_id="a", lifetime_spend=over)
