"""The docs a reader follows resolve, and every figure they cite says where it comes from.

A moved module or a renamed heading breaks a link silently; these tests name the page and the link.
A measured figure with no benchmark, date or load cannot be checked or rerun; the test names its line,
and a script the docs name must run at a tiny size in `make test-all` (tests/system/test_benchmarks.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.helpers import REPO
from tests.system.test_benchmarks import NOT_RUN, RUN_BY, RUNS

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
LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s")
TABLE_SEPARATOR = re.compile(r"^\|[\s:|-]+\|$")
# a measured figure: a number with a unit of time, rate or ratio, a percentage, or a count "N of M"
FIGURE = re.compile(
    r"(?<![\w.])[+-]?\d[\d,]*(?:\.\d+)?(?: ?(?:ms|s|min|GB/s|GFLOP/s|steps/s)|x|%)(?![\w/])|\b\d+ of \d+\b"
)
# not measured: a confidence level, or a threshold the code applies ("warns below 95%", "after 120 s")
CONFIDENCE = re.compile(r"\b95% (?:CI|interval|confidence|t interval)")
THRESHOLD = re.compile(r"(?i)\b(?:above|below|under|over|within|than|least|most|after|past|default)\s*$")
SCRIPT = re.compile(r"benchmarks/\w+\.py")
# a figure's source, anywhere in its paragraph, list item or table row (or the table's caption)
SOURCE = {
    "benchmarks/*.py": SCRIPT,
    "date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "load": re.compile(r"\bload (?:average |about )?(?:\d|not recorded)"),
}


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


class Block(NamedTuple):
    """A paragraph, list item or table row: its first line, its text, and for a table row the table's caption."""

    line: int
    text: str
    caption: str = ""


def blocks(text: str) -> list[Block]:
    """The page's blocks outside fences; a table's caption is the paragraph right above it, its header no block."""
    found: list[Block] = []
    paragraph: list[str] = []
    first, last_paragraph, in_fence, in_table_body = 0, "", False, False
    for number, line in enumerate(text.splitlines(), 1):
        stripped, is_fence = line.strip(), bool(FENCE.match(line))
        if paragraph and (not stripped or is_fence or stripped[0] in "|#" or LIST_ITEM.match(line)):
            last_paragraph = " ".join(paragraph)
            found.append(Block(first, last_paragraph))
            paragraph = []
        in_fence = in_fence != is_fence
        is_row = stripped.startswith("|") and not in_fence
        if is_row and in_table_body:
            found.append(Block(number, stripped, last_paragraph))
        in_table_body = is_row and (in_table_body or bool(TABLE_SEPARATOR.match(stripped)))
        if in_fence or is_fence or stripped.startswith("#"):
            last_paragraph = ""
        elif stripped and not is_row:
            first = first if paragraph else number
            paragraph.append(stripped)
    if paragraph:
        found.append(Block(first, " ".join(paragraph)))
    return found


def figures(text: str) -> list[str]:
    """The measured figures in a block's prose: not in code, not a confidence level, not a threshold."""
    prose = CONFIDENCE.sub("", CODE_SPAN.sub("", text))
    return [match.group() for match in FIGURE.finditer(prose) if not THRESHOLD.search(prose[: match.start()])]


def unsourced_figures(page: Path) -> list[str]:
    """`line N (figures) lacks ...` for each block with figures but no existing benchmarks/*.py, date or load."""
    problems = []
    for block in blocks(page.read_text()):
        found = figures(block.text)
        sources = f"{block.caption} {block.text}"
        missing = [what for what, pattern in SOURCE.items() if not pattern.search(sources)]
        missing += [f"{name} (no such file)" for name in SCRIPT.findall(sources) if not (REPO / name).is_file()]
        if found and missing:
            problems.append(f"line {block.line} ({', '.join(found[:3])}) lacks {', '.join(missing)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_figure_names_its_benchmark_date_and_load(page: Path) -> None:
    problems = unsourced_figures(page)
    assert not problems, f"{page.name}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, f"{page.name}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_repo_path_named_exists(page: Path) -> None:
    missing = missing_repo_paths(page)
    assert not missing, f"{page.name} names paths that do not exist: " + ", ".join(missing)


def scripts_not_run(pages: list[Path]) -> list[str]:
    """The benchmarks/*.py the pages name that test_benchmarks.py neither runs (itself or through another script)
    nor leaves to a test file that names it (gpu_check.py's), so their figures could not be made again."""
    named = {name for page in pages for name in re.findall(r"benchmarks/(\w+\.py)", page.read_text())}
    elsewhere = {
        script
        for script, reason in NOT_RUN.items()
        if any(script in (REPO / test).read_text() for test in re.findall(r"tests/[\w/]+\.py", reason))
    }
    return sorted(named - {*RUNS, *RUN_BY, *elsewhere})


def test_every_script_the_docs_name_runs_at_a_tiny_size() -> None:
    missing = scripts_not_run(PAGES)
    assert not missing, f"named in the docs, run by no test: {missing}; add each to RUNS in test_benchmarks.py"


def test_a_named_script_not_run_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("`benchmarks/gate_false_alarms.py` `benchmarks/gating.py` `benchmarks/gpu_check.py`\n")
    assert scripts_not_run([page]) == []
    page.write_text("`benchmarks/mutants.py` (not run: no test file runs it), `benchmarks/no_such_table.py`\n")
    assert scripts_not_run([page]) == ["mutants.py", "no_such_table.py"]


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


def test_a_figure_without_its_benchmark_date_or_load_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n"
        "Caught in 4 of 4 (`benchmarks/gate_detection.py 4`, 2026-12-02, load 1-2.4; 95% CI 40-100%).\n\n"
        "- A gate took 143 s (benchmarks/no_such_script.py, 2026-12-02, load not recorded).\n"
        "- The job read 1.18x its script (`benchmarks/runner_overhead.py 5`).\n\n"
        "Not figures: it warns below 95%, a 95% CI, `measure.steps_s=0.15`, a worker is named after 120 s.\n\n"
        "```text\nsteady state: median 0.4812 ms/step\n```\n\n"
        "Figures of `benchmarks/runner_overhead.py`, 2026-12-02, load 1:\n\n"
        "| run | wall |\n| --- | --- |\n| runner | 10.97 s |\n\n"
        "No source above this table.\n\n"
        "| run | wall |\n| --- | --- |\n| script | 9.30 s |\n"
    )
    assert unsourced_figures(page) == [
        "line 5 (143 s) lacks benchmarks/no_such_script.py (no such file)",
        "line 6 (1.18x) lacks date, load",
        "line 24 (9.30 s) lacks benchmarks/*.py, date, load",
    ]
