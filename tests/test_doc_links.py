"""The docs' links lead somewhere: every relative link names a file of the repository, and every
`#anchor` (in the same page or another) a heading or an explicit `<a id>` of that page, as GitHub
renders it. A section renamed without its links mended fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "traces" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^()\s]*)\)")  # [text](target): no spaces or parentheses in targets here
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as
    `-` (markup such as backticks is punctuation too)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors a page has: its headings' (a repeated one gets `-1`, `-2`, ...) and explicit
    `<a id>`s."""
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a id=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6} (.*)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text()))
            if t and not re.match(r"[a-z]+:", t)]  # http:, https:, mailto: are not ours


def test_the_slug_is_githubs():
    assert slug("Elastic workloads (Pollux)") == "elastic-workloads-pollux"
    assert slug("`%%schedulearn` round trip (magics)") == "schedulearn-round-trip-magics"
    assert slug("Launch overhead (local)") == "launch-overhead-local"


def test_the_checker_sees_a_broken_anchor(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text("# A page\n\n## Two words\n\n[ok](#two-words) [gone](#three-words)\n")
    assert [t for t in links(page) if t.lstrip("#") not in anchors(page)] == ["#three-words"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT.resolve())}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading or <a id> '{anchor}' in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)
