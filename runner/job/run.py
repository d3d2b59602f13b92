"""A job's MLflow run, opened and closed with the job's status: FINISHED, KILLED when stopped, FAILED when it raises."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from runner import names
from runner.config import TrackingConfig
from runner.job.status import JobStatus
from runner.signals import stops_unmasked
from runner.tracking.run import PARENT_RUN_ENV, MlflowRun, NullRun, ensure_experiment, mlflow_write
from runner.tracking.store import mlflow_client

if TYPE_CHECKING:
    from mlflow import ActiveRun


@contextmanager
def open_run(tracking: TrackingConfig, run_name: str, start_time_ms: int | None = None) -> Iterator[NullRun]:
    """Start this job's run (a child of the sweep's parent run, if any; a `NullRun` with tracking off).

    `start_time_ms` (default: now) is when the job began, so the UI's Duration covers the whole job, not only
    the part after its run opened. MLflow's `start_run` takes no start time: the run is created with it, then started.
    """
    if not tracking.enabled:
        yield NullRun()
        return
    import mlflow
    from mlflow.tracking.context.registry import resolve_tags
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    experiment_id = ensure_experiment(tracking)
    parent = os.environ.get(PARENT_RUN_ENV) or None
    # the context tags (mlflow.user, source) start_run would resolve, and the parent start_run would tag
    tags = resolve_tags({names.TAG_KIND: names.KIND_JOB, **({MLFLOW_PARENT_RUN_ID: parent} if parent else {})})
    created: list[str] = []  # kept across a locked store's retries: one run, created once

    def create_and_start() -> ActiveRun:
        """Created and started in one write, so a stop held meanwhile finds the run active and closes it."""
        if not created:
            created.append(mlflow_client(tracking).create_run(experiment_id, start_time_ms, tags, run_name).info.run_id)
        return mlflow.start_run(run_id=created[0])

    try:  # a stop held while the run started is raised as start_run returns: that run is closed too
        active = mlflow_write(create_and_start)
        with stops_unmasked():
            yield MlflowRun(active.info.run_id, experiment_id, tracking)
    except KeyboardInterrupt as stop:  # SIGINT or SIGTERM: MLflow's status for a run stopped from outside
        if mlflow.active_run() is not None:
            reason = f"interrupted by {stop}" if str(stop) else "interrupted"
            mlflow_write(lambda: mlflow.set_tag(names.TAG_ERROR, reason))
            mlflow_write(lambda: mlflow.end_run(JobStatus.KILLED.value))
        raise
    except BaseException:
        if mlflow.active_run() is not None:
            mlflow_write(lambda: mlflow.end_run(JobStatus.FAILED.value))
        raise
    mlflow_write(lambda: mlflow.end_run(JobStatus.FINISHED.value))
