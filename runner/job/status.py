"""A job's status: the values, and the status file each job keeps in its folder (so any launcher's jobs work alike).

A job that dies hard never gets past RUNNING, so whoever reads the file later closes it (`runner.job.dead`).
"""

from __future__ import annotations

import json
import math
import time
from enum import Enum
from pathlib import Path
from typing import Any

from runner.files import write_whole

STATUS_FILE = "job_status.json"
# set by the sweep callback for its jobs, so a sweep directory reused by a later sweep is summarised sweep by sweep
SWEEP_ID_ENV = "RUNNER_SWEEP_ID"
# returned for a job with no steady-state time (failed, dead, a Slurm follower rank): NaN, which minimisers never pick
NO_RESULT = math.nan


class JobStatus(str, Enum):
    """Where a job is in its life: the status file's values and MLflow's run statuses (a `str`: the same strings)."""

    SCHEDULED = "SCHEDULED"  # a launcher of the runner's sweep has it in its batch; it has not started yet
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"  # stopped by SIGINT or SIGTERM, or by its sweep
    SKIPPED = "SKIPPED"  # the configuration had a FINISHED run, which the job reused; only the status file says so

    def __str__(self) -> str:
        """The value, as MLflow's queries and messages want it (not `JobStatus.FINISHED`)."""
        return self.value


def write_status(job_dir: Path, **fields: Any) -> None:
    """Merge `fields` into the job's status file (written whole, via a rename)."""
    status = read_status(job_dir) or {}
    status.update(fields, updated=time.time())
    write_whole(job_dir / STATUS_FILE, json.dumps(status, indent=2))


def read_status(job_dir: Path) -> dict[str, Any] | None:
    """The job's status, or None when it never started."""
    path = job_dir / STATUS_FILE
    return json.loads(path.read_text()) if path.is_file() else None
