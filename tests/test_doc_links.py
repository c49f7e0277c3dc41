"""Every relative link in the README, the CHANGELOG and docs/ names a file that exists, and every
``#anchor`` a heading of that file (GitHub's slugs): pages move and headings change without a
reader meeting a dead link."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").rglob("*.md")])

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text()))


def test_the_pages_exist():
    assert len(PAGES) > 10 and all(p.exists() for p in PAGES)


def test_every_relative_link_and_anchor_resolves():
    dead = []
    for page in PAGES:
        for target in _links(page):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                dead.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                dead.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not dead, "\n".join(dead)


def test_the_slug_rule():
    assert _slug("Fixed effects where strata are sparse, and the choice") == (
        "fixed-effects-where-strata-are-sparse-and-the-choice"
    )
    assert (
        _slug("`dpate plan` for `propensity`: predicted") == "dpate-plan-for-propensity-predicted"
    )
