"""Reading a STAR study's ledger events and flow runs by round, for the failure tests
(tests/topology/test_star_study.py, test_star_failures.py)."""

from __future__ import annotations

from fractions import Fraction


def events(star, site: str, round: str, kind: str) -> list:
    return [e for e in star.events(site) if e.kind == kind and e.round == round]


def committed_anywhere(star, round: str) -> bool:
    return any(events(star, s, round, "RESERVE") for s in star.sites) and any(
        any(e.release_id for e in events(star, s, round, "COMMIT")) for s in star.sites
    )


def round_spend(star, site: str, round: str) -> Fraction:
    return sum((Fraction(e.epsilon) for e in events(star, site, round, "RESERVE")), Fraction(0))


def site_runs(star, round: str) -> dict[str, list]:
    runs: dict[str, list] = {}
    for fr in star.flow_runs():
        if fr.parameters.get("round") == round and "site" in fr.parameters:
            runs.setdefault(fr.parameters["site"], []).append(fr)
    return runs
