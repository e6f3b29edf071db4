"""The README and docs: every internal link resolves (files and `#anchors`, by GitHub's heading
slugs), and no page a user reads speaks of the project's issues, sessions or stops (history
goes to CHANGELOG.md)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from rredcot.reporting.rendered_docs import RENDERED_DOCS, SNAPSHOT_DOCS

REPO = Path(__file__).resolve().parents[2]
MAX_PAGE_LINES = 150
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HISTORY = re.compile(r"\bissues? #?\d+|(?<![\w&])#\d+\b|\bsessions?\b|\bstop \d+", re.IGNORECASE)


def markdown_pages() -> list[Path]:
    """Every markdown page a user reads: the README, the changelog, docs/, results/ and dev/."""
    pages = [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        REPO / "results" / "README.md",
        REPO / "dev" / "README.md",
    ]
    return [p for p in pages if p.is_file()] + sorted((REPO / "docs").rglob("*.md"))


def user_pages() -> list[Path]:
    """The pages that describe the code as it is: all but the changelog."""
    return [p for p in markdown_pages() if p.name != "CHANGELOG.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, re.sub(r"`[^`]*`", "", line)))
    return out


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lower-cased, every character that is not a
    letter, mark, number, connector (`_`), space or hyphen dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    kept = [
        c
        for c in text.lower()
        if c in " -_" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    ]
    return "".join(kept).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The heading anchors of a page, repeated headings numbered -1, -2 ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(page: Path) -> list[str]:
    """The internal links of `page` that name no file or no heading."""
    broken = []
    for number, line in prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}:{number}: {target} (no such file)")
            elif anchor and (resolved.is_dir() or anchor not in anchors(resolved)):
                broken.append(f"{page.relative_to(REPO)}:{number}: {target} (no such heading)")
    return broken


def test_github_slugs():
    assert github_slug("Measured on the tree world (2-core CPU, 2026-12-02)") == (
        "measured-on-the-tree-world-2-core-cpu-2026-12-02"
    )
    assert github_slug("How the default's world, base and RL settings") == (
        "how-the-defaults-world-base-and-rl-settings"
    )
    assert github_slug("The `summary` rule: Φ = R̂ + v̂") == "the-summary-rule-φ--r̂--v̂"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# A heading\n\n## A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading-1) [ok](#top) [bad](other.md#nowhere) [bad](missing.md)\n"
        "```\n[in code](missing.md)\n```\n# Top\n"
    )
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        found = broken_links(page)
    finally:
        REPO = saved
    assert found == [
        "page.md:1: other.md#nowhere (no such heading)",
        "page.md:1: missing.md (no such file)",
    ]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_internal_link_resolves(page):
    assert not broken_links(page)


def test_the_docs_pages_are_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README links no docs/{page.name}"


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_user_docs_carry_no_development_history(page):
    """Issue numbers, sessions and stops belong to the changelog."""
    found = [
        f"{page.relative_to(REPO)}:{n}: {m.group(0)!r}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in HISTORY.finditer(line)
    ]
    assert not found


def test_the_history_check_finds_history():
    for text in ("as issue 18 asked", "see #29", "in this session", "stop 25 measured"):
        assert HISTORY.search(text), text
    for text in ("stopped at step 1,150", "`&#8212;`", "a lesson"):
        assert not HISTORY.search(text), text


def generated(page: Path) -> bool:
    """A page a program writes: a rendered doc, or a run's summary copied into the snapshots."""
    name = page.relative_to(REPO).as_posix()
    return name in RENDERED_DOCS or name.startswith(SNAPSHOT_DOCS + "/")


def test_every_docs_page_is_short():
    """A page a person writes holds at most MAX_PAGE_LINES lines: the essentials on the page,
    the detail on pages it links (docs/<page>/...), the history in the archive."""
    long = [
        f"{page.relative_to(REPO).as_posix()}: {n} lines"
        for page in sorted((REPO / "docs").rglob("*.md"))
        if not generated(page) and (n := len(page.read_text().splitlines())) > MAX_PAGE_LINES
    ]
    assert not long, f"over {MAX_PAGE_LINES} lines (split them): {long}"


def test_every_rendered_page_is_exempt_by_name():
    """Each script that renders a docs page writes one that RENDERED_DOCS names, so the
    exemption above is one list."""
    written = {
        "docs/" + found.group(1)
        for script in sorted((REPO / "scripts").glob("*.py"))
        if "write_or_check(" in (text := script.read_text())
        for found in re.finditer(r'DOC = REPO / "docs" / "([^"]+)"', text)
    }
    assert written == set(RENDERED_DOCS)
    assert all((REPO / name).is_file() for name in RENDERED_DOCS)
