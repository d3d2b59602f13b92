"""The end-of-sweep summary: what became of each job, read from the jobs' status files, which `runner.job` writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runner.job import STATUS_FILE, JobStatus, close_dead_job, read_status


@dataclass
class SweepSummary:
    """What became of each job of a sweep."""

    finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)  # by SIGINT/SIGTERM: the sweep's own stop, or a signal to the job
    reused_run_ids: list[str] = field(default_factory=list)  # FINISHED runs skipped jobs found: shown, marked reused
    not_run: list[str] = field(default_factory=list)  # scheduled by the sweep's launcher, kept from starting by a stop

    @property
    def total(self) -> int:
        """Jobs of the sweep, whatever became of them, those a stop kept from starting too."""
        return sum(map(len, (self.finished, self.skipped, self.failed, self.killed, self.not_run)))

    def stopped_line(self, error: str | None = None) -> str:
        """What a stop of the sweep left: the jobs it closed and those it kept from starting, if its launch had come.

        `error`: what ended the sweep instead of a signal (its launcher or a job raised it).
        """
        cause = f"sweep ended early by an error ({error})" if error else "sweep stopped by a signal"
        if not self.total:
            return f"{cause} before its launcher scheduled a job: none ran"
        closed = f"{len(self.killed)} job(s) in flight closed KILLED" if self.killed else "no job was in flight"
        rest = "the rest did not run" if self.not_run else "every job had ended"
        return f"{cause}: {closed}, {rest}"

    def lines(self) -> list[str]:
        """The summary printed at the end of a sweep."""
        lines = [
            f"sweep: {self.total} job(s): {len(self.finished)} finished, {len(self.skipped)} skipped "
            f"(already FINISHED), {len(self.failed)} failed"
            + (f", {len(self.killed)} killed" if self.killed else "")
            + (f", {len(self.not_run)} not run" if self.not_run else "")
        ]
        lines += [f"  skipped: {name}" for name in self.skipped]
        lines += [f"  FAILED:  {name}" for name in self.failed]
        lines += [f"  KILLED:  {name}" for name in self.killed]
        lines += [f"  not run: {name}" for name in self.not_run]
        return lines


def summarise_sweep(sweep_dir: Path, sweep_id: str, uri: str | None) -> SweepSummary:
    """Read the status of this sweep's jobs; those still RUNNING died, and their runs are marked FAILED."""
    summary = SweepSummary()
    for path in sorted(sweep_dir.glob(f"*/{STATUS_FILE}"), key=lambda p: p.parent.name):
        job_dir = path.parent
        status = read_status(job_dir) or {}
        if status.get("sweep_id") != sweep_id:
            continue
        if status.get("status") == JobStatus.RUNNING:
            close_dead_job(job_dir, "died without finishing its run (killed, crashed or out of memory)", uri)
            status = read_status(job_dir) or {}
        name = f"{job_dir.name} [{status.get('overrides', '')}]"
        if status.get("status") == JobStatus.FINISHED:
            summary.finished.append(name)
        elif status.get("status") == JobStatus.SKIPPED:
            summary.skipped.append(f"{name} -> run {status.get('run_id')}")
            summary.reused_run_ids.append(str(status.get("run_id")))
        elif status.get("status") == JobStatus.SCHEDULED:
            summary.not_run.append(name)
        elif status.get("status") == JobStatus.KILLED:
            summary.killed.append(f"{name}: {status.get('error', 'interrupted')}")
        else:
            summary.failed.append(f"{name}: {status.get('error', 'no error recorded')}")
    return summary
