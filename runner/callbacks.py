"""Hydra callbacks (conf/config.yaml's `hydra.callbacks`): checks before any job starts, the sweep's parent run.

A single job's bad input and failure end here as one line on stderr (`RunnerCallback.on_run_end`).
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import shutil
import sys
import tempfile
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.core.utils import JobStatus as HydraJobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from runner import names
from runner.config import ConfigError, TrackingConfig, check_launcher_limits
from runner.errors import JobFailure, UsageError
from runner.job import OWNER_FILE, SWEEP_ID_ENV, JobStatus, claim_folder, release_folder
from runner.secrets import redact
from runner.signals import ignore_later_stops, signals_held, stop_on_signals
from runner.sweep.jobs import isolate_if_needed, swept_keys
from runner.sweep.summary import summarise_sweep
from runner.tracking.run import PARENT_RUN_ENV
from runner.tracking.store import StoreFull, check_usable, mlflow_client, prepare_store

log = logging.getLogger(__name__)
# bytes written to prove a folder takes files: more than Hydra writes into .hydra/ before a job
PROBE_BYTES = 64 * 1024


@dataclass
class ProcessNotes:
    """What `runner.__main__.cli` and the exit hook know of this process's job or sweep once Hydra raised out of it."""

    folder: str = ""  # its output folder as its key names it (hydra.run.dir=...), where a full disk is
    ended_by: str | None = None  # the error that ended its sweep early (a launcher or job raised), not a signal


NOTES = ProcessNotes()


def end_sweep_early(why: str) -> None:
    """Record the error that ends this process's sweep early: its summary and FAILED parent say it, not a signal."""
    NOTES.ended_by = why


def check_writable_dir(key: str, path: str) -> None:
    """Exit with a one-line error naming the key when `path` cannot be created or written (a full disk too).

    Hydra turns exceptions raised in callbacks into warnings and fails later with a traceback, so this exits.
    """
    target = Path(path)
    created = _missing_folders(target)
    try:
        _make_folder(target)
    except OSError as err:
        sys.exit(f"error: {key}={path} cannot be created: {err.strerror}")
    try:
        with tempfile.TemporaryFile(dir=target, buffering=0) as probe:
            probe.write(bytes(PROBE_BYTES))
    except OSError as err:
        sys.exit(f"error: {key}={path} cannot be written: {err.strerror}")
    finally:
        _remove_empty(created)


def _make_folder(target: Path, tries: int = 3) -> None:
    """`mkdir -p` that survives a parent vanishing midway.

    Another sweep started beside this one in the same folders removes the empty parents its own probe created, as
    this one creates its folder under them.
    """
    for _ in range(tries - 1):
        with suppress(FileNotFoundError):
            target.mkdir(parents=True, exist_ok=True)
            return
    target.mkdir(parents=True, exist_ok=True)


def _missing_folders(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first: what creating it adds."""
    path = path.absolute()
    return [folder for folder in (path, *path.parents) if not folder.exists()]


def _remove_empty(folders: list[Path]) -> None:
    """Remove `folders` (deepest first) that are empty; one another process put something in stays."""
    for folder in folders:
        with suppress(OSError):
            folder.rmdir()


def _tracking(config: DictConfig) -> TrackingConfig:
    """The sweep's tracking settings; bad ones stop the sweep with one line before any job starts."""
    try:
        return OmegaConf.to_object(config.tracking)  # type: ignore[return-value]
    except ConfigError as err:
        sys.exit(f"error: {err}")


def _check_store(tracking: TrackingConfig, create: bool) -> None:
    """Exit with one line naming tracking.uri when no job could log to the store, before torch loads.

    `create` also creates and migrates the store, as a sweep does once so that its parallel jobs do not race.
    """
    if not tracking.enabled:
        return
    try:
        (prepare_store if create else check_usable)(tracking.uri)
    except (ConfigError, StoreFull) as err:
        sys.exit(f"error: {err}")


class RunnerCallback(Callback):
    """Checks output directories up front; opens and closes a sweep's parent run.

    A sweep stopped by SIGINT or SIGTERM still gets its summary, its comparison and a KILLED parent:
    an exit hook closes what is still open, also when the stop came while the sweep's end was closing it.
    """

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.sweep_id = ""
        self.sweep_dir = Path()
        self.compared = False  # whether the sweep's comparison was reported
        self.tracking: TrackingConfig | None = None
        # a single run's folder and the parents this run creates for it, deepest first
        self.new_run_dirs: list[Path] = []

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Refuse an unwritable output directory before Hydra trips over it, and an unusable store."""
        NOTES.folder = f"hydra.run.dir={config.hydra.run.dir}"
        self.new_run_dirs = _missing_folders(Path(config.hydra.run.dir))
        check_writable_dir("hydra.run.dir", config.hydra.run.dir)
        _check_store(_tracking(config), create=False)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """A single job refused or failed: one line on stderr and exit 1; a refused job's new, unclaimed folder goes."""
        job_return: JobReturn = kwargs["job_return"]
        # job_return.return_value would print Hydra's "Error executing job" line, then raise
        error = job_return._return_value if job_return.status is HydraJobStatus.FAILED else None
        if not isinstance(error, (UsageError, JobFailure)):
            return
        created = self.new_run_dirs
        if isinstance(error, UsageError) and created and not (created[0] / OWNER_FILE).exists():
            shutil.rmtree(created[0], ignore_errors=True)
            _remove_empty(created[1:])
        sys.exit(f"error: {error}")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Check the launcher and sweep directory; create the store, experiment and parent run once, before launch."""
        try:  # Hydra sets the launcher up only after this: it would refuse them with the parent run open
            check_launcher_limits(*(OmegaConf.select(config, f"hydra.launcher.{key}") for key in ("jobs", "timeout_s")))
        except ConfigError as err:
            sys.exit(f"error: {err}")
        NOTES.folder = f"hydra.sweep.dir={config.hydra.sweep.dir}"
        check_writable_dir("hydra.sweep.dir", config.hydra.sweep.dir)
        self.sweep_id = os.environ[SWEEP_ID_ENV] = uuid.uuid4().hex
        self.sweep_dir = Path(config.hydra.sweep.dir)
        tracking = self.tracking = _tracking(config)
        _check_store(tracking, create=False)
        varied = swept_keys(config)
        os.environ[names.SWEPT_KEYS_ENV] = ",".join(varied)
        isolate_if_needed(config, varied)
        try:  # two sweeps in one folder would each count the other's jobs as its own
            claim_folder(self.sweep_dir, "hydra.sweep.dir")
        except ConfigError as err:
            sys.exit(f"error: {err}")
        stop_on_signals()
        atexit.register(self._close_if_stopped)
        _check_store(tracking, create=True)
        if tracking.enabled:
            self._open_parent(config, tracking)

    def _open_parent(self, config: DictConfig, tracking: TrackingConfig) -> None:
        """Create the sweep's parent run (its jobs' runs are its children); earlier sweeps' dead parents are closed."""
        from mlflow.tracking.context.registry import resolve_tags

        from runner.job import close_orphans
        from runner.tracking.run import ensure_experiment, mlflow_write

        experiment_id = ensure_experiment(tracking)
        client = mlflow_client(tracking)
        close_orphans(client, client.search_runs([experiment_id], f"tags.`{names.TAG_SWEEP}` = 'true'"))
        tags = {
            names.TAG_SWEEP: "true",
            names.TAG_KIND: names.KIND_SWEEP,
            names.TAG_OVERRIDES: redact(" ".join(config.hydra.overrides.task)),
            names.TAG_SWEEP_DIR: str(Path(config.hydra.sweep.dir).resolve()),  # as absolute as its jobs' folders
            names.TAG_HOST: platform.node(),
            names.TAG_PID: str(os.getpid()),
            names.TAG_SWEPT_KEYS: os.environ[names.SWEPT_KEYS_ENV],
        }
        shown = [redact(o) for o in config.hydra.overrides.task if not o.lstrip("+").startswith(names.OUTPUT_OVERRIDES)]
        tags = resolve_tags(tags)  # mlflow.user and the source, as mlflow.start_run gives its jobs: compare names them
        run = mlflow_write(lambda: client.create_run(experiment_id, run_name=" ".join(["sweep", *shown]), tags=tags))
        self.parent_run_id = run.info.run_id
        os.environ[PARENT_RUN_ENV] = self.parent_run_id
        log.info("sweep parent run %s in experiment '%s'", self.parent_run_id, tracking.experiment)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Close dead jobs' runs, print the summary, close the parent; exit 1 if a job failed."""
        if self._close(stopped=False):
            # Hydra turns callback exceptions into warnings; SystemExit is how a sweep fails
            sys.exit(1)

    def _close_if_stopped(self) -> None:
        """At exit: a sweep that never reached on_multirun_end was stopped (KILLED) or ended by an error (FAILED)."""
        if self.sweep_id:
            self._close(stopped=True, error=NOTES.ended_by)

    def _close(self, stopped: bool, error: str | None = None) -> bool:
        """Summarise the jobs, report and close the parent; True when the sweep failed (`error`: what ended it)."""
        for name in (PARENT_RUN_ENV, SWEEP_ID_ENV, names.SWEPT_KEYS_ENV):
            os.environ.pop(name, None)
        tracking = self.tracking
        uri = tracking.uri if tracking is not None and tracking.enabled else None
        summary = summarise_sweep(self.sweep_dir, self.sweep_id, uri)
        # bad input refused before the launcher scheduled a job: its one error line says it all, and no run stays
        refused = stopped and error is not None and not summary.total
        lines = summary.lines()
        if stopped:
            lines.insert(0, summary.stopped_line(error))
        elif not summary.total:
            lines.insert(0, "sweep: no job to run (the sweep's overrides expand to nothing)")
        text = "\n".join(lines)
        if not refused:
            print(text, flush=True)
        failed = stopped or bool(summary.failed or summary.killed) or not summary.total
        if self.parent_run_id is not None and tracking is not None:
            from runner.tracking.run import mlflow_write

            client, parent = mlflow_client(tracking), self.parent_run_id
            if refused:
                ignore_later_stops()
                mlflow_write(lambda: client.set_terminated(parent, JobStatus.FAILED.value))
                mlflow_write(lambda: client.delete_run(parent))  # restorable, in no list
            else:
                if summary.reused_run_ids:
                    reused = ",".join(summary.reused_run_ids)
                    mlflow_write(lambda: client.set_tag(parent, names.TAG_REUSED_RUNS, reused))
                self._report(client)
                mlflow_write(lambda: client.set_tag(parent, names.TAG_FAILED_JOBS, str(len(summary.failed))))
                mlflow_write(lambda: client.set_tag(parent, names.TAG_SKIPPED_JOBS, str(len(summary.skipped))))
                mlflow_write(lambda: client.log_text(parent, text + "\n", names.SWEEP_SUMMARY_FILE))
                killed = stopped and error is None  # by a signal; an error ends it FAILED
                status = JobStatus.KILLED if killed else JobStatus.FAILED if failed else JobStatus.FINISHED
                ignore_later_stops()  # the sweep is all recorded: its exit will say what its parent says
                mlflow_write(lambda: client.set_terminated(parent, status.value))
            self.parent_run_id = None
        self.sweep_id = ""  # closed: the exit hook has nothing left to do
        release_folder(self.sweep_dir)  # all recorded: another sweep may use the folder
        return failed

    def _report(self, client: Any) -> None:
        """Print and log the sweep's comparison to the parent, once; a stop waits (MLflow appends to a table twice)."""
        from runner.report.sweep_report import report_sweep

        assert self.parent_run_id is not None
        if self.compared:
            return
        self.compared = True
        folder = self.sweep_dir / "comparison"
        try:
            with signals_held():
                table = report_sweep(client, client.get_run(self.parent_run_id), folder)
                print(table, flush=True)
        except Exception as err:  # the comparison is a view of the results, never worth losing them over
            log.warning("could not build the sweep comparison in %s: %s", folder, err)
