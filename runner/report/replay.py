"""Commands that replay a run's top ops alone: `python -m runner.compare --replay RUN --top N`.

Each op-table row names an ATen op and its input shapes; `+workload=aten_op` runs exactly that, on any backend.
Trailing arguments the table shows as `[]` (scalars, dims, flags) are left at the op's defaults, and the command
says so. An in-place op (`aten::div_`) is replayed out of place: repeated in place, its steps would compound.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.report.reader import label, op_table
from workloads.aten_op import AtenOp, out_of_place


@dataclass(frozen=True)
class Replay:
    """One op-table row and how to run it alone (command is empty when it cannot be)."""

    op: str
    recorded_shapes: list[list[int]]
    self_ms: float
    command: str
    note: str = ""


def replayable_shapes(op: str, shapes: list[list[int]]) -> tuple[list[list[int]], str]:
    """The shapes to replay `op` with and a note, dropping trailing `[]` arguments while the call needs it.

    Raises:
        ValueError: why the row cannot be replayed, as `+workload=aten_op` would say it.
    """
    for keep in range(len(shapes), 0, -1):
        try:
            AtenOp(op, shapes[:keep])
        except ValueError:
            if shapes[keep - 1] != [] or keep == 1:
                raise
            continue
        dropped = len(shapes) - keep
        return shapes[:keep], f"{dropped} non-tensor argument(s) left at their defaults" if dropped else ""
    raise ValueError("the op table recorded no input shapes (profiler.record_shapes=false)")


def replay_command(op: str, shapes: list[list[int]], dtype: str) -> str:
    """The runner command line for one op at these shapes."""
    listed = "[" + ",".join("[" + ",".join(str(s) for s in shape) + "]" for shape in shapes) + "]"
    overrides = [f"workload.op={op}", f"workload.shapes={listed}", f"workload.dtype={dtype}"]
    return shlex.join(["python", "-m", "runner", "+workload=aten_op", *overrides])


def top_replays(client: MlflowClient, run: Run, top: int) -> tuple[list[Replay], str]:
    """The run's `top` ATen op rows by self time (device time when recorded), with their commands; and that clock."""
    table = op_table(client, run)
    columns = table["columns"]
    clock = names.self_time_column(names.OP_SELF_DEVICE_MS in columns)
    rows = [dict(zip(columns, values, strict=True)) for values in table["data"]]
    rows = sorted((r for r in rows if str(r[names.OP_NAME]).startswith("aten::")), key=lambda r: -float(r[clock]))
    dtype = run.data.params.get("workload.dtype", "float32")
    replays = []
    for row in rows[:top]:
        name = row[names.OP_NAME]
        shapes = json.loads(row.get(names.OP_INPUT_SHAPES) or "[]")
        op = out_of_place(name)
        try:
            replay_shapes, note = replayable_shapes(op, shapes)
        except ValueError as err:
            replays.append(Replay(name, shapes, float(row[clock]), "", f"not replayable: {err}"))
            continue
        if op != name:
            note = "; ".join(filter(None, [f"replayed out of place as {op}", note]))
        replays.append(Replay(name, shapes, float(row[clock]), replay_command(op, replay_shapes, dtype), note))
    return replays, clock


def render_replays(run: Run, replays: list[Replay], clock: str) -> str:
    """The commands, one per op, each under a comment with the op, its shapes and its time."""
    lines = [f"# top ops of {label(run)} ({run.info.run_id}) by {clock}; add backend=cpu|cuda|neuron to choose where"]
    for replay in replays:
        lines.append(
            f"# {replay.op} {replay.recorded_shapes}: {replay.self_ms:.4f} ms"
            + (f" ({replay.note})" if replay.note else "")
        )
        if replay.command:
            lines.append(replay.command)
    return "\n".join(lines)
