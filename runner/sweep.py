"""Sweep bookkeeping shared by every launcher: job status files, config hashes, the summary.

Each job keeps `job_status.json` in its output directory: RUNNING (with its MLflow run id)
while it works, then FINISHED, FAILED or SKIPPED. A job that dies hard never gets past
RUNNING, so whoever reads the file later (the launcher that saw the process die, or the
cleanup at the end of the sweep) can mark its MLflow run FAILED. Files on the shared sweep
directory work the same for in-process, local-process and Slurm launchers.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUS_FILE = "job_status.json"
# Set by the sweep callback for its jobs, so a sweep directory reused by a later sweep is
# summarised one sweep at a time.
SWEEP_ID_ENV = "RUNNER_SWEEP_ID"
# Config keys that say where things go, not what runs: left out of the config hash.
UNHASHED_TOP = ("tracking",)
UNHASHED_KEYS = ("backend.cores",)
UNHASHED_SUFFIXES = ("_dir", "_path")


def config_hash(resolved: dict[str, Any]) -> str:
    """A short hash of what a job runs: its resolved config without paths and placement."""

    def keep(prefix: str, key: str) -> bool:
        dotted = f"{prefix}{key}"
        return dotted not in UNHASHED_KEYS and not key.endswith(UNHASHED_SUFFIXES)

    def strip(node: Any, prefix: str = "") -> Any:
        if isinstance(node, dict):
            return {k: strip(v, f"{prefix}{k}.") for k, v in node.items() if keep(prefix, str(k))}
        return node

    identity = strip({k: v for k, v in resolved.items() if k not in UNHASHED_TOP})
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_status(job_dir: Path, **fields: Any) -> None:
    """Merge `fields` into the job's status file (written whole, via a rename)."""
    path = job_dir / STATUS_FILE
    status = read_status(job_dir) or {}
    status.update(fields, updated=time.time())
    job_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(status, indent=2))
    temporary.replace(path)


def read_status(job_dir: Path) -> dict[str, Any] | None:
    """The job's status, or None when it never started."""
    path = job_dir / STATUS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def mark_dead(job_dir: Path, reason: str, tracking_uri: str | None) -> None:
    """Record that a job died without closing its run; mark that run FAILED in MLflow."""
    status = read_status(job_dir) or {}
    if status.get("status") not in (None, "RUNNING"):
        return
    write_status(job_dir, status="FAILED", error=reason)
    run_id = status.get("run_id")
    if run_id and tracking_uri:
        from mlflow import MlflowClient

        from runner.tracking import fail_run

        fail_run(MlflowClient(tracking_uri), run_id, reason)


@dataclass
class SweepSummary:
    """What became of each job of a sweep."""

    finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The summary printed at the end of a sweep."""
        total = len(self.finished) + len(self.skipped) + len(self.failed)
        lines = [
            f"sweep: {total} job(s): {len(self.finished)} finished, {len(self.skipped)} skipped "
            f"(already FINISHED), {len(self.failed)} failed"
        ]
        lines += [f"  skipped: {name}" for name in self.skipped]
        lines += [f"  FAILED:  {name}" for name in self.failed]
        return lines


def summarise_sweep(sweep_dir: Path, sweep_id: str, tracking_uri: str | None) -> SweepSummary:
    """Read the status of this sweep's jobs; those still RUNNING died, and their runs are marked FAILED."""
    summary = SweepSummary()
    for path in sorted(sweep_dir.glob(f"*/{STATUS_FILE}"), key=lambda p: p.parent.name):
        job_dir = path.parent
        if (read_status(job_dir) or {}).get("sweep_id") != sweep_id:
            continue
        if (read_status(job_dir) or {}).get("status") == "RUNNING":
            mark_dead(job_dir, "died without finishing its run (killed, crashed or out of memory)", tracking_uri)
        status = read_status(job_dir) or {}
        name = f"{job_dir.name} [{status.get('overrides', '')}]"
        if status.get("status") == "FINISHED":
            summary.finished.append(name)
        elif status.get("status") == "SKIPPED":
            summary.skipped.append(f"{name} -> run {status.get('run_id')}")
        else:
            summary.failed.append(f"{name}: {status.get('error', 'no error recorded')}")
    return summary
