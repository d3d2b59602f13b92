"""The docs a reader follows resolve: every relative link, its #anchor, every docs/ page and repo path named.

A moved module or a renamed heading breaks a link silently; these tests name the page and the link.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
# a code span naming a file or folder of this repository, e.g. `runner/names.py` or `tests/helpers/`
REPO_DIRS = ("runner", "workloads", "tests", "conf", "benchmarks", "hydra_plugins", "docs", ".ci")
REPO_PATH = re.compile(rf"^(?:{'|'.join(re.escape(d) for d in REPO_DIRS)})/[\w./-]*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks: a link or heading inside a fence is shown, not followed."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text()):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def broken_links(page: Path) -> list[str]:
    """The page's relative links whose file, or whose #anchor in a Markdown file, does not exist."""
    broken = []
    for line in prose_lines(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: are not this repository's
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists():
                broken.append(f"{target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


def missing_repo_paths(page: Path) -> list[str]:
    """Code spans that name a path of this repository that does not exist (a module moved, a file renamed)."""
    spans = (span.strip("`") for line in prose_lines(page.read_text()) for span in CODE_SPAN.findall(line))
    return sorted({path for path in spans if REPO_PATH.match(path) and not (REPO / path).exists()})


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, f"{page.name}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_repo_path_named_exists(page: Path) -> None:
    missing = missing_repo_paths(page)
    assert not missing, f"{page.name} names paths that do not exist: " + ", ".join(missing)


def test_every_docs_page_named_in_the_readme_exists() -> None:
    named = set(re.findall(r"docs/[\w-]+\.md", README.read_text()))
    assert named, "the README names no docs/ page"
    assert sorted(name for name in named if not (REPO / name).is_file()) == []


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: yes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n"
        "[ok](other.md) [ok](other.md#a-code-heading-yes) [ok](#title) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[in code](missing_too.md)`\n"
        "```\n[in a fence](fenced.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading with anchor #nope"]


def test_a_moved_repo_path_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`runner/names.py` `runner/no_such_module.py` `conf/workload/<name>.yaml` `mlflow.db`\n")
    assert missing_repo_paths(page) == ["runner/no_such_module.py"]
