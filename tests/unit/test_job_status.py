"""Job statuses are one enum whose values are the strings status files and MLflow always held, and
a dead job's run is closed through the store's retried writes, past another connection's lock on the SQLite file."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.entities import RunStatus
from mlflow.exceptions import MlflowException
from sqlalchemy import event

from runner import names
from runner.job import ERROR_FILE, JobLife, JobStatus, fail_run, read_status, write_status
from tests.helpers import job_for


def test_statuses_are_the_strings_status_files_and_mlflow_hold(tmp_path: Path) -> None:
    for status in JobStatus:
        write_status(tmp_path, status=status)
        assert json.loads((tmp_path / "job_status.json").read_text())["status"] == status.name
        assert read_status(tmp_path) == {**read_status(tmp_path), "status": status.name}  # type: ignore[dict-item]
        assert f"attributes.status = '{status}'" == f"attributes.status = '{status.name}'"
    # SKIPPED is the runner's own; every other value is one of MLflow's run statuses
    mlflow_statuses = {s for s in JobStatus if s is not JobStatus.SKIPPED}
    assert {RunStatus.to_string(RunStatus.from_string(s)) for s in mlflow_statuses} == {s.name for s in mlflow_statuses}


def shorter_busy_wait(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> Any:
    """MLflow's SQLite sessions wait 20 s for a lock; 50 ms makes the lock surface as an error at once."""
    return statement.replace("busy_timeout = 20000", "busy_timeout = 50"), parameters


def test_a_dead_jobs_run_is_closed_through_a_locked_store(tracking_uri: str) -> None:
    client = MlflowClient(tracking_uri)
    run_id = client.create_run(client.create_experiment("locked")).info.run_id
    engine = client._tracking_client.store.engine
    event.listen(engine, "before_cursor_execute", shorter_busy_wait, retval=True)
    # another writer's transaction, held open on the same file, as a parallel job's write holds it
    holder = sqlite3.connect(tracking_uri.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, holder.commit)
    try:
        with pytest.raises(MlflowException, match="database is locked"):
            client.set_tag(run_id, "probe", "the lock is real: a write that does not retry fails")
        release.start()
        fail_run(client, run_id, "died from signal SIGKILL", JobStatus.KILLED)
    finally:
        release.cancel()  # where fail_run gave up first
        if release.is_alive():
            release.join()
        holder.close()
        event.remove(engine, "before_cursor_execute", shorter_busy_wait)
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags[names.TAG_ERROR] == "died from signal SIGKILL"


def test_a_failed_sweep_job_logs_one_line_naming_its_traceback_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failure between a sweep's jobs was a 41-line traceback: one line now, as a single job's."""
    life = JobLife(job_for(tmp_path), sweeping=True)
    with life.running():
        raise RuntimeError("injected failure")
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.exc_info is None
    where = tmp_path / "out" / ERROR_FILE
    assert record.getMessage() == f"job failed, the sweep goes on: RuntimeError: injected failure (traceback: {where})"
    assert "Traceback" in where.read_text()
