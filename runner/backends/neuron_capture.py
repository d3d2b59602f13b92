"""Reading a Neuron capture: the documented failure signs, and neuron-explorer's summary.

Pure functions over a directory and some text, so they are tested without Neuron hardware.
The layout is searched recursively: the documented `<instance>_pid_<pid>/<timestamp>/` levels
may or may not be there, and older builds wrote `*_instid_*_vnc_*.ntff` without a timestamp.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import names

log = logging.getLogger(__name__)

# NRT prints this when the per-NeuronCore ring buffer overflows.
DROPPED_EVENTS = re.compile(r"(\d[\d,]*) trace events were dropped")
# neuron-explorer replaced neuron-profile (SDK 2.30) with the same `view` interface.
EXPLORERS = ("neuron-explorer", "neuron-profile")
PROFILE_FILES = ("*.ntff", "*.pb")


@dataclass
class CaptureCheck:
    """File counts of a capture and the problems found in it."""

    files: int = 0
    total_bytes: int = 0
    ntff: int = 0
    empty_ntff: int = 0
    neff: int = 0
    pb: int = 0
    framework_traces: int = 0
    dropped_events: int = 0
    problems: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """`neuron/capture_*` metrics; capture_ok is 1 when no failure sign was found."""
        return {
            names.NEURON_CAPTURE_OK: float(not self.problems),
            names.NEURON_CAPTURE_FILES: float(self.files),
            names.NEURON_CAPTURE_BYTES: float(self.total_bytes),
            names.NEURON_NTFF_FILES: float(self.ntff),
            names.NEURON_NEFF_FILES: float(self.neff),
            names.NEURON_PB_FILES: float(self.pb),
            names.NEURON_DROPPED_EVENTS: float(self.dropped_events),
        }

    def tags(self) -> dict[str, Any]:
        """`neuron.capture` is ok or warning; `neuron.capture_problems` says why."""
        return {
            names.TAG_NEURON_CAPTURE: "warning" if self.problems else "ok",
            names.TAG_NEURON_CAPTURE_PROBLEMS: "; ".join(self.problems) or None,
        }


def check_capture(capture_dir: Path, modes: list[str], profiler_output: str) -> CaptureCheck:
    """Check a capture against the failure signs the Neuron documentation lists."""
    files = [p for p in capture_dir.rglob("*") if p.is_file()] if capture_dir.is_dir() else []
    ntffs = [p for p in files if p.suffix == ".ntff"]
    check = CaptureCheck(
        files=len(files),
        total_bytes=sum(p.stat().st_size for p in files),
        ntff=len(ntffs),
        empty_ntff=sum(1 for p in ntffs if p.stat().st_size == 0),
        neff=sum(1 for p in files if p.suffix == ".neff"),
        pb=sum(1 for p in files if p.suffix == ".pb"),
        framework_traces=sum(1 for p in files if p.suffix == ".json"),
        dropped_events=sum(int(n.replace(",", "")) for n in DROPPED_EVENTS.findall(profiler_output)),
    )
    if not files:
        check.problems.append("empty capture directory: profiling did not run, or the workload did not run on Neuron")
        return check
    if check.empty_ntff:
        check.problems.append(f"{check.empty_ntff} zero-byte NTFF(s): device profiling was on but nothing executed")
    if "DEVICE" in modes and not check.ntff:
        check.problems.append("only system traces (.pb), no device trace (.ntff), although DEVICE was asked for")
    if "DEVICE" in modes and not check.neff:
        check.problems.append("no .neff although DEVICE was asked for: device traces cannot be decoded")
    if not check.framework_traces:
        check.problems.append("no framework trace (trace.json) beside the system traces")
    if check.dropped_events:
        check.problems.append(f"{check.dropped_events} trace events were dropped: raise profiler.max_events_per_nc")
    return check


def session_dirs(capture_dir: Path) -> list[Path]:
    """Folders holding device or system trace files: what `view -d` takes."""
    found = (
        {p.parent for pattern in PROFILE_FILES for p in capture_dir.rglob(pattern)} if capture_dir.is_dir() else set()
    )
    return sorted(found)


def first_json_object(text: str) -> dict[str, Any]:
    """The first complete JSON object in `text`, skipping log lines (which may hold braces).

    Raises:
        ValueError: there is none.
    """
    decoder = json.JSONDecoder()
    for brace in re.finditer(r"\{", text):
        try:
            data, _ = decoder.raw_decode(text, brace.start())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    raise ValueError("no JSON object in the summary output")


def parse_summary_json(stdout: str) -> dict[str, dict[str, float]]:
    """Parse `view --output-format summary-json`: log lines, then one object per profile.

    The shape is undocumented ({profile name: {metric: value}} in public parsers); a flat
    object of metrics is accepted too. Non-numeric values are dropped.

    Raises:
        ValueError: no JSON object in the output.
    """
    data = first_json_object(stdout)
    entries = data if data and all(isinstance(v, dict) for v in data.values()) else {"summary": data}
    return {
        str(name): {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for name, metrics in entries.items()
    }


@dataclass
class ExplorerSummary:
    """Device-side metrics from neuron-explorer, and how getting them went."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    raw: str = ""


def explorer_summary(sessions: list[Path], timeout_s: int) -> ExplorerSummary:
    """Run `view --output-format summary-json` on each session; never raise.

    With several profiles (one per NEFF in eager mode), `neuron/<metric>` comes from the one
    with the largest total_time, and `neuron/total_time_sum` adds them all up.
    """
    tool = next((t for t in EXPLORERS if shutil.which(t)), None)
    if tool is None:
        return ExplorerSummary(tags={names.TAG_NEURON_EXPLORER: "not on PATH (install aws-neuronx-tools)"})
    if not sessions:
        return ExplorerSummary(tags={names.TAG_NEURON_EXPLORER: f"{tool}: no session directory to summarise"})
    entries: dict[str, dict[str, float]] = {}
    outputs = []
    for session in sessions:
        cmd = [tool, "view", "-d", str(session), "--output-format", "summary-json"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True)
            found = parse_summary_json(done.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            detail = getattr(err, "stderr", None) or str(err)
            log.warning("%s failed on %s: %s", tool, session, str(detail).strip()[:500])
            return ExplorerSummary(tags={names.TAG_NEURON_EXPLORER: f"{tool} failed: {str(detail).strip()[:200]}"})
        outputs.append(json.dumps(first_json_object(done.stdout)))
        entries.update({f"{session.name}/{name}": metrics for name, metrics in found.items()})
    largest = max(entries.values(), key=lambda m: m.get("total_time", 0.0))
    metrics = {f"{names.NEURON_SUMMARY_PREFIX}{k}": v for k, v in largest.items()}
    metrics[names.NEURON_PROFILES] = float(len(entries))
    metrics[names.NEURON_TOTAL_TIME_SUM] = sum(m.get("total_time", 0.0) for m in entries.values())
    return ExplorerSummary(metrics=metrics, tags={names.TAG_NEURON_EXPLORER: f"{tool}: ok"}, raw="\n".join(outputs))
