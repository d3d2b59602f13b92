"""A job's life from start to end: its folder claimed, its status, its MLflow run, its error, the failure policy."""

from __future__ import annotations

import json
import logging
import os
import platform
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import names
from runner.config import ConfigError, TrackingConfig
from runner.job.dead import process_alive
from runner.job.status import STATUS_FILE, SWEEP_ID_ENV, JobStatus, write_status
from runner.secrets import one_line, redact
from runner.signals import ignore_later_stops, stop_on_signals, stops_unmasked

log = logging.getLogger(__name__)
# which process works in a job's (or a sweep's) folder: {"pid", "host"}, created exclusively, removed at its end
OWNER_FILE = "job_owner.json"
ERROR_FILE = "error.txt"  # the traceback of a job that raised, in its folder and in its run


@dataclass
class JobInfo:
    """What the launcher knows about this job; filled from HydraConfig in __main__ only."""

    # the readable MLflow run name: workload plus overrides
    run_name: str
    # the selected workload option, e.g. rmsnorm_naive
    workload_name: str
    overrides: list[str]
    # the job's output directory (traces and captures go under it)
    output_dir: Path
    # Hydra's .hydra/ folder with the composed config and overrides, when there is one
    hydra_dir: Path | None = None
    # a sweep's job: where the sweep's rounds leave its steady state (runner.sweep.rounds)
    rounds_dir: Path | None = None


def _current_traceback() -> str:
    """The traceback being handled, secrets masked, for error.txt."""
    return redact(traceback.format_exc())


def claim_folder(folder: Path, key: str) -> None:
    """Make this process the one working in `folder` (a job's or a sweep's), or raise ConfigError: two would mix data.

    Default folders are named per process (conf/config.yaml), so only a folder given by hand to two live jobs (or
    sweeps) is refused; the file of an owner that is gone (killed, crashed) is taken over.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OWNER_FILE
    me = {"pid": os.getpid(), "host": platform.node()}
    for _ in range(2):
        try:
            with path.open("x") as owner_file:
                json.dump(me, owner_file)
            return
        except FileExistsError:
            owner = _read_owner(path)
        if owner is not None and owner != me and _held(owner):
            raise ConfigError(
                f"{key}={folder} is in use by process {owner['pid']} on {owner['host']}: every job and sweep needs "
                f"its own folder (leave {key} unset, or give each its own; if that process is gone, delete {path})"
            )
        path.unlink(missing_ok=True)  # its owner is gone (or it is ours from an earlier claim)


def release_folder(job_dir: Path) -> None:
    """Give up this process's claim on `job_dir` (a claim of another process is left alone)."""
    path = job_dir / OWNER_FILE
    if _read_owner(path) == {"pid": os.getpid(), "host": platform.node()}:
        path.unlink(missing_ok=True)


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads(path.read_text())
    except (OSError, ValueError):  # gone meanwhile, or half-written by an owner that died
        return None
    return owner if isinstance(owner, dict) else None


def _held(owner: dict[str, Any]) -> bool:
    """Whether the owner may still be working: alive here, or on another host (which this one cannot see)."""
    if owner.get("host") != platform.node():
        return True
    try:
        pid = int(owner["pid"])
    except (KeyError, ValueError, TypeError):  # an owner file this runner did not write: leave the folder be
        return True
    return process_alive(pid)


class JobLife:
    """Owns one job: `running()` its status and the failure policy, `run()` its MLflow run, tagged with its error.

    In a sweep a failed job is recorded and the sweep goes on; alone, the error propagates.
    """

    def __init__(self, job: JobInfo, sweeping: bool = False) -> None:
        self.job = job
        self.sweeping = sweeping
        self.skipped = False
        self.run_id: str | None = None  # once the MLflow run is open
        self.started_ms = int(time.time() * 1000)  # its run's start time: the UI's Duration covers the whole job

    def status(self, **fields: Any) -> None:
        """Update the status file; a full disk costs the file, not the job, and says so."""
        try:
            write_status(self.job.output_dir, **fields)
        except OSError as err:
            log.error("could not write %s in %s: %s", STATUS_FILE, self.job.output_dir, err.strerror or err)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Run the job's body in its claimed folder; in a sweep, a failure is recorded and swallowed.

        SIGINT/SIGTERM stop it: status and run KILLED, and `Interrupted` propagates (the process ends with 130 or 143).
        """
        stop_on_signals()
        claim_folder(self.job.output_dir, "hydra.sweep.dir" if self.sweeping else "hydra.run.dir")
        try:
            overrides, sweep = " ".join(self.job.overrides), os.environ.get(SWEEP_ID_ENV)
            self.status(
                status=JobStatus.RUNNING, overrides=overrides, pid=os.getpid(), sweep_id=sweep, run_id=None, error=None
            )
            with stops_unmasked():
                yield
        except KeyboardInterrupt as stop:
            reason = f"interrupted by {stop}" if str(stop) else "interrupted"
            self.status(status=JobStatus.KILLED, error=reason)
            run = f"its run {self.run_id} is closed KILLED" if self.run_id else "it had no run to close"
            log.error("%s: %s stopped; %s", reason, self.job.run_name, run)
            raise
        except Exception as err:
            self.status(status=JobStatus.FAILED, error=one_line(err))
            if not isinstance(err, ConfigError):
                self.keep_traceback()
            if not self.sweeping:
                raise
            # one line, as a single job's failure: the traceback is in error.txt
            where = "" if isinstance(err, ConfigError) else f" (traceback: {self.job.output_dir / ERROR_FILE})"
            log.error("job failed, the sweep goes on: %s%s", one_line(err), where)
            return
        else:
            if not self.skipped:
                self.status(status=JobStatus.FINISHED)
        finally:
            release_folder(self.job.output_dir)

    def keep_traceback(self) -> None:
        """Write the traceback being handled to the job's folder, beside its status file."""
        try:
            (self.job.output_dir / ERROR_FILE).write_text(_current_traceback())
        except OSError as err:
            log.error("could not write %s: %s", ERROR_FILE, err.strerror or err)

    def skip(self, run_id: str) -> None:
        """Record that the configuration already has a FINISHED run, so there is nothing to do."""
        self.skipped = True
        self.status(status=JobStatus.SKIPPED, run_id=run_id)

    @contextmanager
    def run(self, tracking: TrackingConfig) -> Iterator[Any]:
        """The job's MLflow run (a `NullRun` with tracking off), closed FAILED with the error on failure.

        A stop closes it KILLED with its reason (`open_run`), also one that lands as the run's id is written down.
        """
        from runner.job.run import open_run

        with open_run(tracking, self.job.run_name, self.started_ms) as run:
            self.run_id = run.run_id
            self.status(run_id=run.run_id)
            try:
                yield run
            except Exception as err:
                run.set_tags({names.TAG_ERROR: one_line(err)})
                run.log_text(_current_traceback(), ERROR_FILE)
                raise
            if not self.sweeping:  # all is logged and the run closes FINISHED: a stop now has nothing to stop
                ignore_later_stops()
