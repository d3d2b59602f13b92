"""The op table's layout version: runs logged before the version tag stay readable, an unknown one is refused."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Run

from runner import names
from runner.report.reader import op_table, per_op

TABLE = {"columns": [names.OP_NAME, names.OP_CALLS_PER_STEP, names.OP_SELF_CPU_MS], "data": [["aten::mul", 1, 0.5]]}


def logged_run(client: mlflow.MlflowClient, tmp_path: Path, tags: dict[str, str]) -> Run:
    """A run holding a one-op table, with these tags."""
    experiment = client.create_experiment("ops", artifact_location=str(tmp_path / "artifacts"))
    run_id = client.create_run(experiment, tags=tags).info.run_id
    client.log_dict(run_id, TABLE, names.OP_TABLE_FILE)
    return client.get_run(run_id)


@pytest.mark.parametrize(
    "tags", [{}, {names.TAG_OP_TABLE_VERSION: str(names.OP_TABLE_VERSION)}], ids=["untagged", "current-version"]
)
def test_a_run_with_or_without_the_version_tag_is_read(tmp_path: Path, tags: dict[str, str]) -> None:
    client = mlflow.MlflowClient()
    table = op_table(client, logged_run(client, tmp_path, tags))
    assert table == TABLE
    assert per_op(table, active_steps=1)["aten::mul"].self_ms_per_step == 0.5


def test_an_unknown_version_is_refused_in_one_line(tmp_path: Path) -> None:
    client = mlflow.MlflowClient()
    run = logged_run(client, tmp_path, {names.TAG_OP_TABLE_VERSION: "99"})
    with pytest.raises(SystemExit) as refused:
        op_table(client, run)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"error: run {run.info.run_id}: {names.TAG_OP_TABLE_VERSION}=99 is an op table layout")
    assert "it reads 1" in message
