"""Turn `key_averages()` into a per-op table and the run's summary metrics (device time only where reported)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from torch._C._autograd import DeviceType
from torch.autograd.profiler_util import EventList

from runner import names
from runner.measure.profiling import US_PER_MS, CycleRecorder


@dataclass
class OpTable:
    """One row per op (per op and input shapes when shapes were recorded)."""

    rows: list[dict[str, Any]]
    active_steps: int
    has_device_time: bool
    # the self device time of the window (ms) as the profiler's own table footer sums it
    device_self_ms: float = 0.0

    def columns(self) -> dict[str, list[Any]]:
        """The table column-wise, as mlflow.log_table wants it."""
        headers = list(self.rows[0]) if self.rows else [names.OP_NAME]
        return {header: [row[header] for row in self.rows] for header in headers}


def build_op_table(
    events: EventList, active_steps: int, with_shapes: bool, with_memory: bool, recorder: CycleRecorder
) -> OpTable:
    """The op table, longest self time first; with several cycles, each row's per-cycle samples (`cycle_self_ms`)."""
    has_device_time = any(e.self_device_time_total > 0 for e in events)
    cycles = recorder.per_step_ms(active_steps // max(1, len(recorder.snapshots)), has_device_time)
    has_device_memory = with_memory and any(e.device_memory_usage for e in events)
    rows = []
    for e in events:
        row: dict[str, Any] = {names.OP_NAME: e.key}
        if with_shapes:
            row[names.OP_INPUT_SHAPES] = str(e.input_shapes)
        row[names.OP_CALLS] = e.count
        row[names.OP_CALLS_PER_STEP] = e.count / active_steps
        row[names.OP_SELF_CPU_MS] = e.self_cpu_time_total / US_PER_MS
        row[names.OP_CPU_TOTAL_MS] = e.cpu_time_total / US_PER_MS
        if has_device_time:
            row[names.OP_SELF_DEVICE_MS] = e.self_device_time_total / US_PER_MS
            row[names.OP_DEVICE_TOTAL_MS] = e.device_time_total / US_PER_MS
        if with_memory:
            row[names.OP_CPU_MEMORY_BYTES] = e.cpu_memory_usage
            row[names.OP_SELF_CPU_MEMORY_BYTES] = e.self_cpu_memory_usage
        if has_device_memory:
            row[names.OP_DEVICE_MEMORY_BYTES] = e.device_memory_usage
            row[names.OP_SELF_DEVICE_MEMORY_BYTES] = e.self_device_memory_usage
        row[names.OP_FLOPS] = e.flops
        if cycles:
            samples = cycles.get(recorder.row_key(e), [])
            row[names.OP_CYCLE_SELF_MS_MEAN] = statistics.fmean(samples) if samples else None
            row[names.OP_CYCLE_SELF_MS_STD] = statistics.stdev(samples) if len(samples) > 1 else None
            row[names.OP_CYCLE_SELF_MS] = json.dumps([round(s, 6) for s in samples])
        rows.append(row)
    time_key = names.self_time_column(has_device_time)
    rows.sort(key=lambda row: row[time_key], reverse=True)
    return OpTable(rows, active_steps, has_device_time, footer_device_us(events) / US_PER_MS)


def footer_device_us(events: EventList) -> float:
    """Self device time (us) as key_averages().table()'s footer sums it: summing rows would count it twice."""
    return sum(
        float(e.self_device_time_total)
        for e in events
        if (e.device_type == DeviceType.CPU and e.is_legacy)
        or (e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False))
    )


def self_time_by_op(table: OpTable) -> dict[str, float]:
    """Self time (device when reported, else CPU) per op name, merged across input shapes."""
    time_key = names.self_time_column(table.has_device_time)
    totals: dict[str, float] = defaultdict(float)
    for row in table.rows:
        if not row[names.OP_NAME].startswith(names.OP_STEP_PREFIX):
            totals[row[names.OP_NAME]] += row[time_key]
    return dict(sorted(totals.items(), key=lambda item: item[1], reverse=True))


def summary_metrics(table: OpTable) -> dict[str, float]:
    """Headline metrics of the profiled window (times in ms, totals over the active steps)."""
    if not table.rows:
        return {}
    metrics: dict[str, float] = {names.CPU_SELF_TOTAL_MS: sum(r[names.OP_SELF_CPU_MS] for r in table.rows)}
    if table.has_device_time:
        metrics[names.DEVICE_SELF_TOTAL_MS] = table.device_self_ms  # each device event once (footer_device_us)
        kernels = {
            r[names.OP_NAME]
            for r in table.rows
            if r[names.OP_SELF_DEVICE_MS] > 0 and not r[names.OP_NAME].startswith(("aten::", names.OP_STEP_PREFIX))
        }
        metrics[names.OPS_DEVICE_KERNELS] = float(len(kernels))
    aten = [r for r in table.rows if r[names.OP_NAME].startswith("aten::")]
    metrics[names.OPS_ATEN] = float(len({r[names.OP_NAME] for r in aten}))
    metrics[names.OPS_CALLS_PER_STEP] = sum(r[names.OP_CALLS] for r in aten) / table.active_steps
    by_op = self_time_by_op(table)
    total = sum(by_op.values())
    if total > 0:
        metrics[names.OPS_TOP_SHARE] = next(iter(by_op.values())) / total
    steps = [r for r in table.rows if r[names.OP_NAME].startswith(names.OP_STEP_PREFIX)]
    if steps:
        step_ms = sum(r[names.OP_CPU_TOTAL_MS] for r in steps)
        metrics[names.PROFILED_STEP_MS] = step_ms / sum(r[names.OP_CALLS] for r in steps)
    metrics[names.PROFILER_ACTIVE_STEPS] = float(table.active_steps)
    return metrics
