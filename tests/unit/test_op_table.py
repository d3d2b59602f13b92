"""The op table: longest self time first (device time where reported), and its layout version: runs logged before
the version tag stay readable, an unknown one is refused."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Run
from torch.autograd.profiler_util import EventList, FunctionEvent

from runner import names
from runner.measure.optable import build_op_table, self_time_by_op
from runner.measure.profiling import CycleRecorder
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


def op_events(device: bool) -> EventList:
    """Three ops of one step, in neither time order: CPU self time 5, 10, 30 us; device 0, 8, 2 us."""
    ops = []
    for name, start, end, kernel_us in [
        ("aten::relu", 0, 5, 0.0),
        ("aten::mul", 10, 20, 8.0),
        ("aten::add", 30, 60, 2.0),
    ]:
        op = FunctionEvent(id=0, name=name, thread=0, start_us=start, end_us=end, use_device="cuda", stack=[])
        if device and kernel_us:
            op.append_kernel(f"{name}_kernel", 0, kernel_us)
        ops.append(op)
    events = EventList(ops, use_device="cuda")
    events._build_tree()  # the profiler builds it before handing the list out
    return events.key_averages()


@pytest.mark.parametrize(
    ("device", "longest_first"),
    [(False, ["aten::add", "aten::mul", "aten::relu"]), (True, ["aten::mul", "aten::add", "aten::relu"])],
    ids=["cpu-time", "device-time"],
)
def test_ops_run_longest_self_time_first(device: bool, longest_first: list[str]) -> None:
    table = build_op_table(op_events(device), 1, with_shapes=False, with_memory=False, recorder=CycleRecorder(False))
    assert table.has_device_time is device
    assert [row[names.OP_NAME] for row in table.rows] == longest_first
    assert list(self_time_by_op(table)) == longest_first
