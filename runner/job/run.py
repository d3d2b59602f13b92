"""A job's MLflow run, opened and closed with the job's status: FINISHED, KILLED when stopped, FAILED when it raises."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from runner import names
from runner.config import TrackingConfig
from runner.job.status import JobStatus
from runner.tracking.run import PARENT_RUN_ENV, MlflowRun, NullRun, ensure_experiment, mlflow_write


@contextmanager
def open_run(tracking: TrackingConfig, run_name: str) -> Iterator[NullRun]:
    """Start this job's run (a child of the sweep's parent run, if any; a `NullRun` with tracking off)."""
    if not tracking.enabled:
        yield NullRun()
        return
    import mlflow

    experiment_id = ensure_experiment(tracking)
    parent = os.environ.get(PARENT_RUN_ENV) or None
    tags = {names.TAG_KIND: names.KIND_JOB}
    try:  # a stop held while the run started is raised as start_run returns: that run is closed too
        active = mlflow_write(lambda: mlflow.start_run(run_name=run_name, parent_run_id=parent, tags=tags))
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
