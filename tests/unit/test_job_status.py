"""Job statuses are one enum whose values are the strings status files and MLflow always held, and
a dead job's run is closed through the store's retried writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlflow.entities import RunStatus

from runner import names
from runner.job import JobStatus, fail_run, read_status, write_status


def test_statuses_are_the_strings_status_files_and_mlflow_hold(tmp_path: Path) -> None:
    for status in JobStatus:
        write_status(tmp_path, status=status)
        assert json.loads((tmp_path / "job_status.json").read_text())["status"] == status.name
        assert read_status(tmp_path) == {**read_status(tmp_path), "status": status.name}  # type: ignore[dict-item]
        assert f"attributes.status = '{status}'" == f"attributes.status = '{status.name}'"
    # SKIPPED is the runner's own; every other value is one of MLflow's run statuses
    mlflow_statuses = {s for s in JobStatus if s is not JobStatus.SKIPPED}
    assert {RunStatus.to_string(RunStatus.from_string(s)) for s in mlflow_statuses} == {s.name for s in mlflow_statuses}


class LockedOnce:
    """An MLflow client whose store is locked for the first write, as a parallel job's write leaves it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.locked = True

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        if self.locked:
            self.locked = False
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        self.calls.append(("set_tag", (run_id, key, value)))

    def set_terminated(self, run_id: str, status: str) -> None:
        self.calls.append(("set_terminated", (run_id, status)))


def test_a_dead_jobs_run_is_closed_through_a_locked_store() -> None:
    client = LockedOnce()
    fail_run(client, "abc", "died from signal SIGKILL", JobStatus.KILLED)
    assert client.calls == [
        ("set_tag", ("abc", names.TAG_ERROR, "died from signal SIGKILL")),
        ("set_terminated", ("abc", "KILLED")),
    ]
