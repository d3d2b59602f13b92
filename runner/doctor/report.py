"""The doctor's report: a Markdown page to paste into an issue, a JSON file, and an MLflow run.

Runs are tagged `runner.kind=doctor`, the host, and one `doctor.<probe>` tag per verdict, so
the MLflow UI lines up reports from many hosts probe by probe.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runner import names
from runner.doctor.probe import FAIL, PASS, UNKNOWN, Verdict
from runner.files import write_whole
from runner.tracking.run import NullRun


def exit_status(verdicts: list[Verdict]) -> int:
    """1 when an assumption the runner relies on failed, else 0."""
    return int(any(v.status == FAIL and v.breaks_runner for v in verdicts))


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    """Verdicts per status."""
    return {status: sum(v.status == status for v in verdicts) for status in (PASS, FAIL, UNKNOWN)}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(host: list[tuple[str, str]], verdicts: list[Verdict], notes: list[str]) -> str:
    """The report as Markdown: host table, probe table, and what to do about each failure."""
    found = counts(verdicts)
    lines = [
        f"# runner doctor: {platform.node()}, {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        "| item | value |",
        "|---|---|",
        *(f"| {_cell(item)} | {_cell(value)} |" for item, value in host),
        "",
        *notes,
        "",
        f"**{found[PASS]} PASS, {found[FAIL]} FAIL, {found[UNKNOWN]} UNKNOWN**"
        + (" — an assumption the runner relies on failed (exit 1)" if exit_status(verdicts) else ""),
        "",
        "| probe | status | assumption | evidence | s |",
        "|---|---|---|---|---|",
        *(
            f"| {v.probe} | {v.status}{' (breaks runs)' if v.breaks_runner and v.status == FAIL else ''} | "
            f"{_cell(v.assumption)} | {_cell(v.evidence)} | {v.seconds:g} |"
            for v in verdicts
        ),
    ]
    failures = [v for v in verdicts if v.status == FAIL and v.fix]
    if failures:
        lines += ["", "## What to set", "", *(f"- **{v.probe}**: {v.fix}" for v in failures)]
    return "\n".join(lines) + "\n"


def as_json(host: list[tuple[str, str]], verdicts: list[Verdict], notes: list[str]) -> dict[str, Any]:
    """The report as one JSON object."""
    return {
        "host": dict(host),
        "notes": notes,
        "verdicts": [asdict(v) for v in verdicts],
        "exit_status": exit_status(verdicts),
    }


def write_files(out: Path, page: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """doctor.md and doctor.json in `out`, each written whole."""
    page_file, data_file = out / names.DOCTOR_PAGE_FILE, out / names.DOCTOR_FILE
    write_whole(page_file, page)
    write_whole(data_file, json.dumps(data, indent=2))
    return page_file, data_file


def log_report(run: NullRun, page: str, data: dict[str, Any], verdicts: list[Verdict]) -> None:
    """Tags, counts and both files on the doctor's MLflow run."""
    run.set_tags(
        {
            names.TAG_KIND: names.KIND_DOCTOR,
            names.TAG_HOST: platform.node(),
            **{f"{names.TAG_DOCTOR_PREFIX}{v.probe}": v.status for v in verdicts},
        }
    )
    run.log_metrics({f"doctor/{status.lower()}": float(count) for status, count in counts(verdicts).items()})
    run.log_text(page, names.DOCTOR_PAGE_FILE)
    run.log_text(json.dumps(data, indent=2), names.DOCTOR_FILE)
