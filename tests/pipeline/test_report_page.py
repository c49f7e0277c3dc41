"""The HTML report's footer: no local absolute path, and each number named for what it is (a DP
release, a public design constant, or the site's own ledger)."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from dpate.html_report import render_html, source_label
from dpate.ledger import SiteSpend
from dpate.schemas.reports import StudyResult
from dpate_core.privacy import PrivacyParams

RESULT = StudyResult.of(
    {
        "study_id": "s1",
        "round": "2",
        "aggregator": "mvagg",
        "complete": True,
        "estimate": 0.12,
        "variance": 0.0004,
        "ci95": [0.0808, 0.1592],
        "spec_hash": "abc123",
        "software_version": "0.1.0",
        "sites": [
            {
                "site_id": "alpha",
                "status": "used",
                "tau": 0.1,
                "variance": 0.001,
                "ci95": [0.038, 0.162],
                "n": 800,
                "weight": 0.8,
                "epsilon": "1",
                "delta": "1/100000",
                "reason": "in the minimum-variance set",
            },
            {"site_id": "beta", "status": "missing", "reason": "no report"},
        ],
    }
)

SPENDS = {
    "alpha": SiteSpend(
        "alpha",
        PrivacyParams(Fraction(3), Fraction(1, 10_000)),
        PrivacyParams(Fraction(1), Fraction(1, 100_000)),
        {},
        {},
    ),
    "beta": None,
}


def footer(page: str) -> str:
    return page[page.index("<h2>What these numbers are</h2>") :]


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("/home/alice/studies/store/s1/results/2.json", "s1/results/2.json"),
        ("file:///home/alice/store/s1/results/2.json", "s1/results/2.json"),
        ("/srv/elsewhere/odd-name.json", "odd-name.json"),
        ("C:\\Users\\alice\\store\\s1\\results\\2.json", "s1/results/2.json"),
        ("s3://dpate-results/prod/s1/results/2.json", "s3://dpate-results/prod/s1/results/2.json"),
        (
            "https://user:secret@example.org/r/s1/results/2.json?x=1",
            "https://example.org/r/s1/results/2.json",
        ),
    ],
)
def test_source_label(uri, shown):
    assert source_label(RESULT, uri) == shown


def test_footer_has_no_local_path_and_names_each_kind_of_number():
    page = render_html(RESULT, "/home/alice/confidential-store/s1/results/2.json", SPENDS)
    assert "/home/alice" not in page and "confidential" not in page
    end = footer(page)
    assert "<code>s1/results/2.json</code>" in end
    text = re.sub(r"<[^>]+>", "", " ".join(end.split()))
    releases = text[text.index("Differentially private releases") : text.index("Public design")]
    public = text[text.index("Public design constants") : text.index("The site's own ledger")]
    ledger = text[text.index("The site's own ledger") :]
    for word in ("estimate", "variance", "interval"):
        assert word in releases
    for word in ("N", "epsilon", "delta", "bound B"):
        assert word in public
    assert "not noised" in public and "lifetime spend" in ledger and "not a release" in ledger
    # the old claim that every number (N, the spend) is a DP release is gone
    assert "Every number on this page is a differentially private release" not in page
    assert "lifetime spend" not in releases and " N," not in releases


def test_footer_keeps_a_storage_url():
    page = render_html(RESULT, "s3://bucket/prefix/s1/results/2.json", SPENDS)
    assert "<code>s3://bucket/prefix/s1/results/2.json</code>" in footer(page)


def test_the_published_lifetime_spend_is_shown_before_a_local_ledger():
    """A site's report publishes its ledger's spend after the release (lifetime_spend): the page
    shows it as "spent of cap"; a reachable local ledger is used only for a site without one."""
    doc = RESULT.to_document()
    doc["sites"][0]["lifetime_spend"] = {
        "spent": {"epsilon": "2", "delta": "1/50000"},
        "cap": {"epsilon": "3", "delta": "1/10000"},
    }
    published = render_html(StudyResult.of(doc), "s3://b/r.json", SPENDS)
    row = re.search(r"<tr><td>alpha</td>.*?</tr>", published)
    assert row is not None
    assert "<td>2 of 3 (delta 1/50000 of 1/10000)</td>" in row.group(0)
    assert "site ledger, now" not in published
    local = render_html(RESULT, "s3://b/r.json", SPENDS)  # the same site, a version-1 report
    assert "<td>1 of 3 (delta 1/100000 of 1/10000) (site ledger, now)</td>" in local
    text = re.sub(r"<[^>]+>", "", " ".join(footer(published).split()))
    assert "public amounts, not data" in text
