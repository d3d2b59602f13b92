"""The measurement phases of one job: first call, then the profiled window.

Every clock read and every profiler step is preceded by `backend.synchronize()`, because
device work is asynchronous: without it, device time comes out empty or wrong.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from runner.backends import CpuBackend
from runner.build import BuiltWorkload
from runner.config import RunSpec
from runner.optable import OpTable, build_op_table
from runner.profiling import build_profiler, tee_stderr

log = logging.getLogger(__name__)
# Log progress about ten times per phase, whatever its length.
PROGRESS_UPDATES = 10


@dataclass
class Measurement:
    """What the phases produced."""

    # the first call, which includes torch.compile / graph compilation
    first_call_s: float
    table: OpTable
    # key_averages().table(): the profiler's own printed table
    printed_table: str
    # what the process wrote to stderr during the profiled window (runtime warnings)
    profiler_output: str


def _timed_call(workload: BuiltWorkload, backend: CpuBackend) -> float:
    backend.synchronize()
    start = time.perf_counter()
    workload.module(*workload.inputs)
    backend.synchronize()
    return time.perf_counter() - start


def measure(workload: BuiltWorkload, backend: CpuBackend, spec: RunSpec, capture_dir: Path) -> Measurement:
    """Run the first call, then exactly the steps the profiler schedule needs."""
    schedule = spec.schedule
    with torch.no_grad():
        log.info("first call%s ...", " (includes torch.compile)" if spec.workload.compile else "")
        first_call_s = _timed_call(workload, backend)
        log.info("first call took %.3f s", first_call_s)
        total = schedule.total_steps
        every = max(1, total // PROGRESS_UPDATES)
        with tee_stderr() as output, build_profiler(backend, spec.profiler, schedule, capture_dir) as prof:
            for step in range(1, total + 1):
                workload.module(*workload.inputs)
                backend.synchronize()
                prof.step()
                if step % every == 0 or step == total:
                    log.info("profiled window: step %d/%d", step, total)
    with_shapes = spec.profiler.record_shapes
    events = prof.key_averages(group_by_input_shape=with_shapes)
    table = build_op_table(events, schedule.active_steps, with_shapes, spec.profiler.profile_memory)
    sort_by = "self_device_time_total" if table.has_device_time else "self_cpu_time_total"
    printed = events.table(sort_by=sort_by, row_limit=-1) if len(events) else "(profiler disabled)"
    return Measurement(first_call_s, table, printed, profiler_output="".join(output))
