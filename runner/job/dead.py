"""Jobs and runs whose process died before it could close them (kill -9, out of memory): closed FAILED (or KILLED).

Whoever notices closes them: the launcher that saw it die, the sweep's end, the next job or sweep of this host.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path
from typing import Any

from runner import names
from runner.config import TrackingConfig
from runner.job.status import SWEEP_ID_ENV, JobStatus, read_status, write_status
from runner.tracking.run import PARENT_RUN_ENV, mlflow_write
from runner.tracking.store import mlflow_client, prepare_store

log = logging.getLogger(__name__)


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host still exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def close_dead_job(
    job_dir: Path,
    reason: str,
    tracking_uri: str | None,
    stopped: bool = False,
    overrides: str = "",
    run_name: str | None = None,
) -> None:
    """Record that a job died without closing its run, and close that run FAILED (KILLED if its sweep `stopped` it).

    One that died before it wrote its status file is recorded for the sweep running now, so its summary counts it.
    With `run_name` (the launcher that saw it die knows it), one that died before it opened its run gets one,
    closed at once with the reason, so the sweep's comparison and the runs table list it too.
    """
    status = read_status(job_dir)
    if status is not None and status.get("status") not in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        return
    end = JobStatus.KILLED if stopped else JobStatus.FAILED
    never_started = {"sweep_id": os.environ.get(SWEEP_ID_ENV), "overrides": overrides} if status is None else {}
    write_status(job_dir, **never_started, status=end, error=reason)
    run_id = (status or {}).get("run_id")
    if not run_id and tracking_uri and run_name is not None and os.environ.get(PARENT_RUN_ENV):
        run_id = _open_dead_run(tracking_uri, os.environ[PARENT_RUN_ENV], run_name, job_dir, overrides)
        write_status(job_dir, run_id=run_id)
    if run_id and tracking_uri:
        client = mlflow_client(tracking_uri)
        run = client.get_run(run_id)
        if run.info.status != JobStatus.RUNNING:  # it closed its run (KILLED by a stop), then died before its status
            write_status(job_dir, status=run.info.status, error=run.data.tags.get(names.TAG_ERROR))
            return
        fail_run(client, run_id, reason, end)


def _open_dead_run(tracking_uri: str, parent_run_id: str, run_name: str, job_dir: Path, overrides: str) -> str:
    """Open, under the sweep's parent run, the run of a job that died before opening its own; its caller closes it."""
    from mlflow.tracking.context.registry import resolve_tags
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    client = mlflow_client(tracking_uri)
    experiment_id = client.get_run(parent_run_id).info.experiment_id
    tags = {
        names.TAG_KIND: names.KIND_JOB,
        MLFLOW_PARENT_RUN_ID: parent_run_id,
        names.TAG_OVERRIDES: overrides,
        names.TAG_OUTPUT_DIR: str(job_dir.resolve()),
        names.TAG_HOST: platform.node(),
    }
    run = mlflow_write(lambda: client.create_run(experiment_id, run_name=run_name, tags=resolve_tags(tags)))
    return str(run.info.run_id)


def fail_run(client: Any, run_id: str, reason: str, status: JobStatus = JobStatus.FAILED) -> None:
    """Close a run its own process can no longer close: FAILED (or KILLED), with the reason as runner.error."""
    mlflow_write(lambda: client.set_tag(run_id, names.TAG_ERROR, reason))
    mlflow_write(lambda: client.set_terminated(run_id, status.value))


def finished_run_id(tracking: TrackingConfig, config_hash: str) -> str | None:
    """The id of a FINISHED run of this configuration in the experiment, if there is one."""
    runs = close_dead_runs(tracking, config_hash)
    return next((run.info.run_id for run in runs if run.info.status == JobStatus.FINISHED), None)


def close_dead_runs(tracking: TrackingConfig, config_hash: str) -> list[Any]:
    """The configuration's runs in the experiment, the dead ones among them marked FAILED (`close_orphans`)."""
    prepare_store(tracking.uri)
    client = mlflow_client(tracking)
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        return []
    query = f"tags.`{names.TAG_CONFIG_HASH}` = '{config_hash}'"
    runs: list[Any] = client.search_runs([experiment.experiment_id], query)
    close_orphans(client, runs)
    return runs


def close_orphans(client: Any, runs: list[Any]) -> None:
    """Mark FAILED the RUNNING runs among `runs` whose process on this host is gone (SIGKILL, a crashed session)."""
    for run in runs:
        host, pid = run.data.tags.get(names.TAG_HOST), run.data.tags.get(names.TAG_PID)
        if run.info.status == JobStatus.RUNNING and host == platform.node() and pid and not process_alive(int(pid)):
            reason = f"orphaned: its process {pid} on {host} is gone"
            log.warning("run %s %s; marking it FAILED", run.info.run_id, reason)
            fail_run(client, run.info.run_id, reason)
