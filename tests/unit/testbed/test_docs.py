"""The README and docs/ hold together: every relative link in README.md and docs/*.md names a file or folder that
exists, and a link with `#anchor` names a heading of its target (GitHub's anchors); the README stays a newcomer's
page, at most README_MAX_LINES lines (the rest belongs in docs/, reachable from docs/README.md)."""

from __future__ import annotations

import pathlib
import re
import urllib.parse

import pytest

from tests import ROOT

README_MAX_LINES = 250
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> str:
    """The text with every line of a fenced code block blanked, so that line numbers stay."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code, fenced or inline; a link's text may wrap over lines."""
    body = INLINE_CODE.sub("", prose(text))  # inline code never spans a line here, so the numbering holds
    return [(body.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in LINK.finditer(body)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, the second of a name getting -1, the third -2, as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(text).splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: pathlib.Path, text: str) -> list[str]:
    """Each relative link of `page` whose file or heading is missing, as `page:line: target (why)`."""
    problems = []
    for number, target in links(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: ...: not a file of this repository
            continue
        path_part, _, anchor = target.partition("#")
        path = urllib.parse.unquote(path_part)
        resolved = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
            continue
        if ROOT not in resolved.parents and resolved != ROOT:
            problems.append(f"{where} (outside the repository)")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text() if path else text):
            problems.append(f"{where} (no heading with this anchor in {resolved.relative_to(ROOT)})")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    problems = broken_links(page, page.read_text())
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_is_a_newcomers_page():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move reference material to a page of docs/ "
        "and link it from docs/README.md"
    )


def test_every_page_of_docs_is_in_its_index():
    index = (ROOT / "docs" / "README.md").read_text()
    listed = {target.partition("#")[0] for _, target in links(index)}
    missing = [p.name for p in PAGES[1:] if p.name != "README.md" and p.name not in listed]
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_link_checker_sees_what_it_should():
    """The checker itself: links in code are not links, anchors follow GitHub's rules, a missing file and a
    missing heading are both reported."""
    text = "\n".join(
        [
            "# What `make test` runs",
            "## The webhook's TLS",
            "## Twice",
            "## Twice",
            "see [a](#what-make-test-runs), [b](#the-webhooks-tls), [c](#twice-1), [d](https://example.com/x)",
            "`[not a link](nowhere.md)`",
            "```",
            "[not a link either](nowhere.md)",
            "```",
            "[gone](no-such-page.md) and [lost](#no-such-heading) and ![img](docs/board.png) and [a link",
            "that wraps](wrapped-and-gone.md)",
        ]
    )
    assert anchors(text) == {"what-make-test-runs", "the-webhooks-tls", "twice", "twice-1"}
    problems = broken_links(ROOT / "README.md", text)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "no-such-page.md (no such file)",
        "#no-such-heading (no heading with this anchor in README.md)",
        "wrapped-and-gone.md (no such file)",
    ]
    assert [p.split(": ", 1)[0] for p in problems] == ["README.md:10", "README.md:10", "README.md:11"]
