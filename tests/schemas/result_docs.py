"""Result documents for the view tests: every site status, an uninformative interval, markup in
ids and reasons, sites with and without a published lifetime spend, a version-1 document
(``ci95`` only, no schema keys or release ids), and version 3: an interval flagged by the noise
rule, an unresolved site, and a result with no answer."""

from __future__ import annotations

from typing import Any


def _iv(est: float, lo: float, hi: float, uninformative: bool = False) -> dict[str, Any]:
    return {
        "estimate": est,
        "lo": lo,
        "hi": hi,
        "level": 0.95,
        "method": "parametric bootstrap (basic)",
        "uninformative": uninformative,
        "note": "uninformative at this budget" if uninformative else "",
    }


def _released(site: str, rid: str, tau: float, variance: float, ci95: list[float], iv: dict[str, Any],
              n: int, eps: str, delta: str, status: str, weight: float, reason: str,
              **more: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "site_id": site, "release_id": rid * 64, "tau": tau, "variance": variance,
        "ci95": ci95, "interval": iv, "n": n, "epsilon": eps, "delta": delta,
        "signed": False, "status": status, "weight": weight, "reason": reason, **more,
    }  # fmt: skip


def _spend(spent: tuple[str, str], cap: tuple[str, str]) -> dict[str, Any]:
    return {"spent": {"epsilon": spent[0], "delta": spent[1]},
            "cap": {"epsilon": cap[0], "delta": cap[1]}}  # fmt: skip


USED = "in the minimum-variance set"
V2: dict[str, Any] = {
    "schema": "dpate.study-result",
    "schema_version": 2,
    "study_id": "s1",
    "spec_hash": "ab" * 32,
    "round": "2",
    "aggregator": "mvagg",
    "complete": False,
    "estimate": 0.1234567,
    "variance": 0.000412345,
    "ci95": [0.0836, 0.16325],
    "interval": _iv(0.1234567, 0.0811111, 0.1654321),
    "uninformative": False,
    "extra": {"threshold": 2.5},
    "software_version": "0.3.0",
    "sites": [
        _released("alpha", "r", 0.1011, 0.00091, [0.0420, 0.1602], _iv(0.1011, 0.0401, 0.1633), 800,
                  "1", "1/100000", "used", 0.7312345, USED, signed=True,
                  ledger_head={"seq": 3, "row_hash": "c" * 64},
                  lifetime_spend=_spend(("2", "1/50000"), ("3", "1/10000"))),
        _released("beta", "q", -0.25, 0.9, [-1.0, 1.0], _iv(-0.25, -1.0, 1.0, True), 120, "1/2", "0",
                  "not_used", 0.0, "variance too large for the minimum-variance set"),
        _released("gamma", "p", 0.3, 0.002, [0.21, 0.39], _iv(0.3, 0.2, 0.4), 400, "7/2", "1e-6",
                  "excluded", 0.0, "excluded: odd",
                  lifetime_spend=_spend(("7/2", "1e-6"), ("10", "1/1000"))),
        {"site_id": "delta", "release_id": "o" * 64, "status": "missing",
         "reason": "no report published for release oooooooooooo"},
        {"site_id": "eps<&>", "release_id": "n" * 64, "status": "rejected",
         "reason": "estimate.n: n (1) must be at least 2 <b>"},
        _released("zeta", "m", 0.2, 0.001, [0.14, 0.26], _iv(0.2, 0.13, 0.27), 1000, "1", "1/100000",
                  "used", 0.2687655, USED, signed=True),
    ],
}  # fmt: skip
UNINFORMATIVE: dict[str, Any] = dict(
    V2,
    complete=True,
    uninformative=True,
    interval=_iv(0.1, -1.0, 1.0, True),
    aggregator="ivw",
    sites=[s for s in V2["sites"] if "tau" in s],
)
V1: dict[str, Any] = {
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
            "reason": USED,
        },
        {"site_id": "beta", "status": "missing", "reason": "no report"},
    ],
}
NOISE_NOTE = (
    "uninformative at this budget: the privacy noise is more than 9 times the patients' own "
    "variation in this estimate (noise variance over sampling variance)"
)
UNRESOLVED_SITE: dict[str, Any] = {
    "site_id": "omega", "release_id": "u" * 64, "tau": None, "variance": None, "ci95": None,
    "interval": None, "resolved": False, "n": 90, "epsilon": "1/2", "delta": "0",
    "signed": True, "status": "excluded", "weight": 0.0,
    "reason": "unresolved at this budget: subclassification: no stratum has enough patients in "
              "both treatments at this budget (both noisy arm counts at least min_count)",
}  # fmt: skip
V3: dict[str, Any] = dict(
    V2,
    schema_version=3,
    status="answered",
    reason=None,
    complete=True,
    uninformative=True,
    interval=dict(_iv(0.1234567, 0.0811111, 0.1654321, True), rules=["noise"], note=NOISE_NOTE),
    sites=[*[s for s in V2["sites"] if "tau" in s], UNRESOLVED_SITE],
)
NO_ANSWER: dict[str, Any] = dict(
    V3,
    status="no_answer",
    reason="no answer at this budget: no site resolved its estimate (omega: unresolved at this "
    "budget); the sites spent their budget, but none could estimate the effect with it",
    estimate=None,
    variance=None,
    ci95=None,
    interval=None,
    extra={},
    sites=[UNRESOLVED_SITE, V2["sites"][3]],
)
TARGET: dict[str, Any] = dict(
    V3,
    uninformative=False,
    interval=dict(_iv(0.1234567, 0.0811111, 0.1654321), rules=[]),
    target_width=0.05,
)
DOCS = {
    "v2": V2,
    "uninformative": UNINFORMATIVE,
    "v1": V1,
    "v3": V3,
    "no_answer": NO_ANSWER,
    "target": TARGET,
}
