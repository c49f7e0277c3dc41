"""The aggregator takes nothing at face value: plausibility of the numbers, size, signatures."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime

import numpy as np
import pytest

from dpate.schemas.reports import (
    MAX_REPORT_BYTES,
    ReportError,
    SiteReport,
    estimate_problems,
    read_report,
)
from dpate.schemas.spec import SpecError, StudySpec
from dpate.signing import (
    SigningError,
    generate_key_pair,
    load_private_key,
    seal_site_report,
    site_signing_key,
)
from dpate_core.mechanisms.adjusted import UNRESOLVED_FIXED_EFFECTS, dp_adjusted, plan_adjusted
from dpate_core.mechanisms.difference_in_means import dp_difference_in_means
from dpate_core.mechanisms.matching import global_dp_matching, smooth_dp_matching

from .test_spec import UNSIGNED, base

T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def spec_for(estimator: str, *, arm_sizes_public: bool = True, **extra) -> StudySpec:
    """A spec of ``estimator`` that opts out of signed reports (the plausibility rules are the
    subject here; signatures have their own tests below)."""
    d = {**base(), **UNSIGNED}
    d["estimator"] = estimator
    if estimator == "dim":
        d["design"] = "randomized"
        d["covariates"] = []
        d["arm_sizes_public"] = arm_sizes_public
        for s in d["sites"]:
            s["delta"] = "0"
        d["sites"][1]["budget_split"] = None if arm_sizes_public else ["9/10", "1/10"]
    elif estimator == "global_matching":
        d["sites"][1]["budget_split"] = ["1/2", "1/2"]
    elif estimator == "adjusted":
        d["sites"][1]["budget_split"] = None
    d.update(extra)
    return StudySpec.from_dict(d)


def release(spec: StudySpec, site: str, rng) -> SiteReport:
    s = spec.site(site)
    split = [str(x) for x in spec.budget_split(site).shares]
    n = 400
    w = np.r_[np.ones(n // 4, int), np.zeros(n - n // 4, int)]
    y = rng.random(n)
    x = rng.integers(0, spec.domain_size, n)
    kw = dict(bound=1.0, epsilon=s.epsilon, delta=s.delta, split=split, rng=rng)
    if spec.estimator == "dim":
        est = dp_difference_in_means(w, y, arm_sizes_public=spec.arm_sizes_public, **kw)
    elif spec.estimator == "smooth_matching":
        est = smooth_dp_matching(w, y, x, domain_size=spec.domain_size, **kw)
    elif spec.estimator == "adjusted":
        est = dp_adjusted(w, y, x, domain_size=spec.domain_size, **kw)
    else:
        est = global_dp_matching(w, y, x, domain_size=spec.domain_size, **kw)
    return SiteReport.from_estimate(est, spec=spec, site_id=site, created_at=T0)


SPECS = {
    "dim-public-arms": lambda: spec_for("dim"),
    "dim-private-arms": lambda: spec_for("dim", arm_sizes_public=False),
    "smooth_matching": lambda: spec_for("smooth_matching"),
    "global_matching": lambda: spec_for("global_matching"),
    "adjusted": lambda: spec_for("adjusted"),
}


def edited(report: SiteReport, change) -> bytes:
    d = json.loads(report.to_json_bytes())
    change(d["estimate"])
    return json.dumps(d).encode()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_genuine_releases_of_every_estimator_pass_the_checks(name):
    spec = SPECS[name]()
    rng = np.random.default_rng(11)
    for site in ("a", "b"):
        for _ in range(20):
            report = release(spec, site, rng)
            assert read_report(report.to_json_bytes(), spec).estimate == report.estimate


@pytest.mark.parametrize("name", sorted(SPECS))
def test_huge_tau_with_tiny_variance_is_rejected(name):
    spec = SPECS[name]()
    report = release(spec, "a", np.random.default_rng(1))
    data = edited(report, lambda e: e.update(tau=1e308, variance=1e-300, raw_variance=1e-300))
    with pytest.raises(ReportError) as info:
        read_report(data, spec)
    text = str(info.value)
    assert "tau (1e+308) is outside the range" in text
    assert "is below the report's own noise variance" in text


@pytest.mark.parametrize("name", ["dim-public-arms", "dim-private-arms", "global_matching"])
def test_variance_below_the_public_noise_variance_is_rejected(name):
    """DiM: 2 (B/eps_1)^2 (1/N_t^2 + 1/N_c^2); GlobalDPMatching: 2 (2B/eps_1)^2, from the spec."""
    spec = SPECS[name]()
    report = release(spec, "a", np.random.default_rng(2))
    nv = report.estimate.diagnostics["noise_variance"]

    def lie(e):  # consistent with its own diagnostic, but not with the public values
        e.update(variance=nv / 4, raw_variance=nv / 4)
        e["diagnostics"]["noise_variance"] = nv / 4

    with pytest.raises(ReportError, match=r"is not (the mechanism's|a) noise variance"):
        read_report(edited(report, lie), spec)


def test_smooth_matching_noise_variance_must_be_positive_and_within_the_variance():
    spec = SPECS["smooth_matching"]()
    report = release(spec, "a", np.random.default_rng(3))
    neg = edited(report, lambda e: e["diagnostics"].update(noise_variance=-1.0))
    with pytest.raises(ReportError, match=r"noise_variance .* must be positive"):
        read_report(neg, spec)
    big = edited(report, lambda e: e["diagnostics"].update(noise_variance=e["variance"] * 2))
    with pytest.raises(ReportError, match="below the report's own noise variance"):
        read_report(big, spec)
    gone = edited(report, lambda e: e["diagnostics"].pop("smooth_sensitivity_dp"))
    with pytest.raises(ReportError, match="missing"):
        read_report(gone, spec)


def test_arm_sizes_must_follow_the_spec():
    public, private = SPECS["dim-public-arms"](), SPECS["dim-private-arms"]()
    r = release(private, "a", np.random.default_rng(4))
    # a report publishing arm sizes the spec keeps private is refused (not a DP output)
    leak = edited(r, lambda e: e.update(n_treated=100, n_control=e["n"] - 100))
    with pytest.raises(ReportError, match="treats arm sizes as private"):
        read_report(leak, private)
    r = release(public, "a", np.random.default_rng(4))
    gone = edited(r, lambda e: e.update(n_treated=None, n_control=None))
    with pytest.raises(ReportError, match="treats arm sizes as public"):
        read_report(gone, public)


def test_adjusted_post_processing_bounds_are_checked():
    spec = SPECS["adjusted"]()
    report = release(spec, "a", np.random.default_rng(9))
    d = report.estimate.diagnostics
    assert 0 < d["usable_strata"] <= spec.domain_size
    over = edited(report, lambda e: e.update(tau=1.01 * e["bound"]))
    with pytest.raises(ReportError, match=r"clips tau to \[-B, B\]"):
        read_report(over, spec)
    # a site that could use a small share of its records still averages over the strata it
    # used: any tau in [-B, B]
    bound = report.estimate.bound
    small = edited(
        report, lambda e: (e.update(tau=-0.9 * bound), e["diagnostics"].update(usable_weight=0.3))
    )
    assert read_report(small, spec).estimate.tau == -0.9 * bound
    heavy = edited(
        report, lambda e: e["diagnostics"].update(usable_weight=2.1 * d["usable_strata"])
    )
    with pytest.raises(ReportError, match="usable_weight"):
        read_report(heavy, spec)
    many = edited(report, lambda e: e["diagnostics"].update(usable_strata=spec.domain_size + 1.0))
    with pytest.raises(ReportError, match="usable_strata"):
        read_report(many, spec)


@pytest.mark.parametrize("name", ["dim-public-arms", "dim-private-arms", "smooth_matching",
                                  "global_matching"])  # fmt: skip
def test_every_release_publishes_tau_within_the_feasible_range(name):
    """Every release clips tau to [-B, B]: a tau past B by a fraction of the noise is not one a
    genuine release can publish (it was accepted up to B + 40 noise scales)."""
    spec = SPECS[name]()
    report = release(spec, "a", np.random.default_rng(21))

    def at_bound(e):
        e.update(tau=e["bound"])
        if name == "dim-private-arms":  # tau = B: arm means 1 and 0, which fix the histogram's
            nt = e["diagnostics"]["n_treated_dp"]  # noise variance B^2 v (1/N_t^2 + 1/N_c^2)
            eps_1 = spec.site("a").epsilon * spec.budget_split("a").shares[0]
            v_bin = 2.0 * (2.0 / float(eps_1)) ** 2
            nv = e["bound"] ** 2 * v_bin * (1 / nt**2 + 1 / (e["n"] - nt) ** 2)
            e["diagnostics"]["noise_variance"] = nv
            e.update(variance=nv + e["diagnostics"]["sampling_variance_dp"])

    at_b = edited(report, at_bound)
    assert read_report(at_b, spec).estimate.tau == report.estimate.bound
    past = edited(report, lambda e: e.update(tau=1.2 * e["bound"]))
    with pytest.raises(ReportError, match=r"every release clips tau to \[-B, B\]"):
        read_report(past, spec)


def _unresolved_report(spec: StudySpec) -> SiteReport:
    """A genuine unresolved adjusted release of site a: every noisy count at 0."""
    rng = np.random.default_rng(22)
    w, y, x = rng.integers(0, 2, 300), rng.random(300), rng.integers(0, spec.domain_size, 300)
    plan = plan_adjusted(w, y, x, bound=1.0, epsilon=1, domain_size=spec.domain_size,
                         weighting="fixed_effects")  # fmt: skip
    est = plan.estimate({k: np.zeros(2 * spec.domain_size) for k in ("counts", "sums", "squares")})
    assert not est.resolved
    return SiteReport.from_estimate(est, spec=spec, site_id="a", created_at=T0)


def test_an_unresolved_release_is_published_without_numbers_and_read():
    spec = SPECS["adjusted"]()
    report = _unresolved_report(spec)
    d = json.loads(report.to_json_bytes())["estimate"]
    assert (d["tau"], d["variance"], d["raw_variance"], d["resolved"]) == (None, None, None, False)
    assert d["unresolved_reason"] == UNRESOLVED_FIXED_EFFECTS
    assert d["diagnostics"] == {"usable_strata": 0.0, "usable_weight": 0.0}
    read = read_report(report.to_json_bytes(), spec)
    assert read == report and not read.to_estimate().resolved
    assert math.isnan(read.to_estimate().tau)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda e: e.update(tau=0.0), "publishes no estimate"),
        (lambda e: e.update(tau=0.0, variance=1 / 3, raw_variance=1 / 3), "publishes no estimate"),
        (lambda e: e.update(unresolved_reason="the data say the effect is 0.3"), "not one the"),
        (lambda e: e.pop("unresolved_reason"), "unresolved_reason given"),
        (lambda e: e["diagnostics"].update(noise_variance=0.1), "must be exactly"),
        (lambda e: e["diagnostics"].update(usable_strata=2.0), "must be exactly"),
        (lambda e: e.update(resolved=True), "says it is resolved"),
    ],
)
def test_a_forged_unresolved_report_is_refused(change, reason):
    spec = SPECS["adjusted"]()
    with pytest.raises(ReportError, match=reason):
        read_report(edited(_unresolved_report(spec), change), spec)


def test_only_an_estimator_that_can_fail_to_resolve_may_say_so():
    spec = SPECS["smooth_matching"]()
    report = release(spec, "a", np.random.default_rng(23))

    def unresolved(e):
        e.update(tau=None, variance=None, raw_variance=None, resolved=False)
        e.update(unresolved_reason=UNRESOLVED_FIXED_EFFECTS, diagnostics={})

    with pytest.raises(ReportError, match="every smooth_matching release resolves"):
        read_report(edited(report, unresolved), spec)
    with pytest.raises(ReportError, match="tau must be finite numbers"):
        read_report(edited(report, lambda e: e.update(tau=None)), spec)


def test_an_unresolved_release_needs_report_version_3():
    spec = SPECS["adjusted"]()
    data = json.loads(_unresolved_report(spec).to_json_bytes())
    data["schema_version"] = 2
    with pytest.raises(ReportError, match=r"estimate\.resolved is a version-3 field"):
        read_report(json.dumps(data).encode(), spec)


def test_a_resolved_adjusted_release_uses_a_stratum():
    spec = SPECS["adjusted"]()
    report = release(spec, "a", np.random.default_rng(24))
    none = edited(report, lambda e: e["diagnostics"].update(usable_strata=0.0, usable_weight=0.0))
    with pytest.raises(ReportError, match="a resolved release uses at least one stratum"):
        read_report(none, spec)


def test_estimate_problems_is_empty_for_a_genuine_estimate():
    spec = SPECS["global_matching"]()
    assert estimate_problems(release(spec, "b", np.random.default_rng(5)).estimate, spec) == []


def test_a_report_larger_than_the_limit_is_refused_before_parsing():
    spec = SPECS["smooth_matching"]()
    data = b"{" + b" " * MAX_REPORT_BYTES + b"}"
    with pytest.raises(ReportError, match="more than the 65536 a report may be"):
        read_report(data, spec)


# --- signatures ---------------------------------------------------------------------------


@pytest.fixture
def keys(tmp_path):
    a = generate_key_pair("a", tmp_path / "a")
    other = generate_key_pair("a", tmp_path / "forger")
    return a, other


def keyed_spec(public_key: str, **extra) -> StudySpec:
    d = base()
    d["sites"][0]["public_key"] = public_key
    d.update(extra)
    return StudySpec.from_dict(d)


def test_keygen_writes_a_private_file_and_refuses_to_overwrite(keys, tmp_path):
    (path, pub), _ = keys
    assert path.stat().st_mode & 0o777 == 0o600
    assert pub.startswith("ed25519:") and len(pub) == 52
    assert load_private_key(path) is not None
    with pytest.raises(SigningError, match="already exists"):
        generate_key_pair("a", tmp_path / "a")


def test_signed_report_is_accepted_forged_unsigned_and_tampered_are_not(keys):
    (path, pub), (forger_path, _) = keys
    spec = keyed_spec(pub)
    report = release(spec, "a", np.random.default_rng(6))
    good = report.signed_with(load_private_key(path)).to_json_bytes()
    assert read_report(good, spec).signature is not None
    assert good == report.signed_with(load_private_key(path)).to_json_bytes()  # deterministic

    forged = report.signed_with(load_private_key(forger_path)).to_json_bytes()
    with pytest.raises(ReportError, match="does not verify under the site's public key"):
        read_report(forged, spec)
    with pytest.raises(ReportError, match="unsigned, but the spec lists a public key"):
        read_report(report.to_json_bytes(), spec)

    # one byte changed anywhere: refused (bad JSON, not canonical, or bad signature)
    for i in range(len(good)):
        flipped = bytearray(good)
        flipped[i] = ord("0") if good[i] != ord("0") else ord("1")
        with pytest.raises(ReportError):
            read_report(bytes(flipped), spec)
    # same content, other bytes (not canonical): refused
    with pytest.raises(ReportError, match="not canonical JSON"):
        read_report(json.dumps(json.loads(good), indent=1).encode(), spec)


def test_reports_are_signed_by_default_and_the_opt_out_is_explicit(keys, tmp_path):
    (_, pub), _ = keys
    spec = keyed_spec(pub)  # site b has no public_key and the spec does not opt out
    report_b = release(spec, "b", np.random.default_rng(7))
    with pytest.raises(ReportError) as info:
        read_report(report_b.to_json_bytes(), spec)
    assert len(info.value.reasons) == 1
    assert "signed by default" in info.value.reasons[0]
    assert "dpate site keygen b" in info.value.reasons[0]
    # the explicit opt-out: an unkeyed site's unsigned report is read; a keyed one still signs
    opted_out = keyed_spec(pub, **UNSIGNED)
    report_b = release(opted_out, "b", np.random.default_rng(7))
    assert read_report(report_b.to_json_bytes(), opted_out).site_id == "b"
    report_a = release(opted_out, "a", np.random.default_rng(7))
    with pytest.raises(ReportError, match="unsigned, but the spec lists a public key"):
        read_report(report_a.to_json_bytes(), opted_out)
    # the opt-out needs its reason; the reason needs the opt-out; the old flag is refused
    with pytest.raises(SpecError) as no_reason:
        keyed_spec(pub, signing="none")
    assert [p for p, _ in no_reason.value.problems] == ["unsigned_reason"]
    with pytest.raises(SpecError) as stray:
        keyed_spec(pub, unsigned_reason="why")
    assert [p for p, _ in stray.value.problems] == ["unsigned_reason"]
    with pytest.raises(SpecError, match="signed reports are the default"):
        keyed_spec(pub, require_signed_reports=True)
    # every site keyed: every report must be signed by its own key
    (_, pub_b) = generate_key_pair("b", tmp_path / "b")
    d = base()
    d["sites"][0]["public_key"], d["sites"][1]["public_key"] = pub, pub_b
    strict = StudySpec.from_dict(d)
    report_b = release(strict, "b", np.random.default_rng(7))
    with pytest.raises(ReportError, match="unsigned, but the spec lists a public key"):
        read_report(report_b.to_json_bytes(), strict)


def test_spec_hash_is_unchanged_for_specs_without_keys(keys):
    (_, pub), _ = keys
    plain = StudySpec.from_dict(base())
    assert plain.signing == "required"
    canonical = json.dumps(plain.canonical_dict())
    assert "public_key" not in canonical and "signing" not in canonical
    assert "unsigned_reason" not in canonical
    assert keyed_spec(pub).spec_hash != plain.spec_hash
    assert StudySpec.from_dict({**base(), **UNSIGNED}).spec_hash != plain.spec_hash


def test_site_signing_key_from_the_site_configuration(keys, tmp_path):
    (path, pub), (forger_path, _) = keys
    with pytest.raises(SigningError, match="dpate site keygen a"):  # signed by default
        site_signing_key(StudySpec.from_dict(base()), "a", str(path))
    assert site_signing_key(StudySpec.from_dict({**base(), **UNSIGNED}), "a", str(path)) is None
    spec = keyed_spec(pub)
    with pytest.raises(SigningError, match="set DPATE_SITE_KEY"):
        site_signing_key(spec, "a", None)
    with pytest.raises(SigningError, match="cannot read the site signing key"):
        site_signing_key(spec, "a", str(tmp_path / "absent.pem"))
    with pytest.raises(SigningError, match="but the spec lists"):
        site_signing_key(spec, "a", str(forger_path))
    assert site_signing_key(spec, "a", str(path)) is not None
    os.chmod(path, 0o644)
    with pytest.raises(SigningError, match="readable by other users"):
        site_signing_key(spec, "a", str(path))


def test_sealed_report_carries_the_ledger_head_and_verifies(keys):
    (path, pub), _ = keys
    spec = keyed_spec(pub)

    class Committed:
        seq, row_hash = 7, "ab" * 32

    report = release(spec, "a", np.random.default_rng(8))
    data = seal_site_report(report, spec, "a", Committed(), str(path)).to_json_bytes()
    back = read_report(data, spec)
    assert back.ledger_head is not None and back.ledger_head.seq == 7
    # the head is covered by the signature
    with pytest.raises(ReportError, match="does not verify"):
        read_report(data.replace(b'"seq":7', b'"seq":6'), spec)


def test_signatures_cover_the_lifetime_spend_and_version_1_reports_still_verify(keys):
    from dpate.schemas.reports import LifetimeSpend
    from dpate_core.privacy import PrivacyParams

    (path, pub), _ = keys
    spec = keyed_spec(pub)
    key = load_private_key(path)
    report = release(spec, "a", np.random.default_rng(9))
    spend = LifetimeSpend.of(PrivacyParams.of(2, "1/50000"), spec.site("a").lifetime_cap.params)
    signed = report.model_copy(update={"lifetime_spend": spend}).signed_with(key).to_json_bytes()
    assert read_report(signed, spec).lifetime_spend == spend
    with pytest.raises(ReportError, match="does not verify"):  # spend edited after signing
        read_report(signed.replace(b'"spent":{"delta":"1/50000","epsilon":"2"}',
                                   b'"spent":{"delta":"1/50000","epsilon":"3"}'), spec)  # fmt: skip
    # a version-1 report signed by the previous software (no lifetime_spend) is still accepted
    old = report.model_copy(update={"schema_version": 1}).signed_with(key).to_json_bytes()
    assert b'"schema_version":1' in old
    assert read_report(old, spec).schema_version == 1


def test_a_public_key_is_added_to_its_sites_entry_and_nothing_else_changes(keys):
    from pathlib import Path

    from dpate.signing import with_public_key

    (_, pub), (_, other) = keys
    text = (Path(__file__).parents[2] / "deployments/examples/star.toml").read_text()
    edited = with_public_key(text, "inner-city", pub)
    assert edited.replace(f'public_key = "{pub}"\n', "", 1) == text  # comments and order kept
    spec = StudySpec.from_toml_text(edited)
    assert [s.id for s in spec.sites if s.public_key] == ["inner-city"]
    assert spec.site("inner-city").public_key == pub
    with pytest.raises(SigningError, match="already lists a public_key"):
        with_public_key(edited, "inner-city", other)
    with pytest.raises(SigningError, match="by hand"):  # not in the spec
        with_public_key(text, "elsewhere", pub)
    inline = 'sites = [{ id = "a", data = "a.csv", epsilon = "1" }]\n'
    with pytest.raises(SigningError, match="by hand"):  # no [[sites]] table to add it to
        with_public_key(inline, "a", pub)
