"""A job's measurement phases (docs/measurement.md); device work is async: each clock read follows a synchronize."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from torch.profiler import ProfilerAction

from runner import names
from runner.backends.base import Backend
from runner.config import RunSpec
from runner.measure.build import BuiltWorkload
from runner.measure.host_memory import keep_freed_memory
from runner.measure.loop import (
    Progress,
    SteadyStateSource,
    capped_steps_note,
    steps_to_time,
    timed_step,
    warm_up,
)
from runner.measure.measurement import Measurement
from runner.measure.memory import recording, window_memory
from runner.measure.optable import OpTable, build_op_table
from runner.measure.profiling import CycleRecorder, build_profiler, make_schedule, tee_fd
from runner.measure.result import JobResult, phase, timing_result
from runner.measure.window import profiler_cost

log = logging.getLogger(__name__)
ACTIVE = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def _dynamo_graph_count() -> int:
    """Unique graphs dynamo has compiled so far; 0 before torch.compile imports it (importing it costs about 3 s)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _queued_blocks(workload: BuiltWorkload, backend: Backend, spec: RunSpec) -> list[float]:
    """Seconds per block of `measure.inflight` steps queued back to back: a full queue's rate, not a step's latency."""
    blocks = max(3, spec.measure.steps // spec.measure.inflight)
    progress = Progress(f"throughput ({spec.measure.inflight} steps in flight)", blocks)
    seconds = []
    for block in range(1, blocks + 1):
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(spec.measure.inflight):
            workload.step()
        backend.synchronize()
        seconds.append(time.perf_counter() - start)
        progress.step(block)
    return seconds


def profiled_window(
    workload: BuiltWorkload, backend: Backend, spec: RunSpec, capture_dir: Path
) -> tuple[OpTable, str, str, list[float]]:
    """Run the schedule's steps under the profiler; return table, printed table, stderr, step times."""
    schedule = spec.schedule
    action_at = make_schedule(schedule)
    recorder = CycleRecorder(spec.profiler.record_shapes)
    profiled_ms = []
    progress = Progress("profiled window", schedule.total_steps)
    with tee_fd() as output, build_profiler(backend, spec.profiler, schedule, capture_dir, recorder) as prof:
        for step in range(1, schedule.total_steps + 1):
            recorded = action_at(step - 1) in ACTIVE
            step_s = timed_step(workload, backend)
            if recorded:
                profiled_ms.append(step_s * 1000)
            prof.step()
            progress.step(step)
    with_shapes = spec.profiler.record_shapes
    events = prof.key_averages(group_by_input_shape=with_shapes)
    table = build_op_table(events, schedule.active_steps, with_shapes, spec.profiler.profile_memory, recorder)
    sort_by = "self_device_time_total" if table.has_device_time else "self_cpu_time_total"
    printed = events.table(sort_by=sort_by, row_limit=-1) if len(events) else "(profiler disabled)"
    return table, printed, "".join(output), profiled_ms


def measure(
    workload: BuiltWorkload,
    backend: Backend,
    spec: RunSpec,
    capture_dir: Path,
    steady_state: SteadyStateSource,
    memory_dir: Path,
) -> Measurement:
    """Run the phases in order (`steady_state` after the first call); memory snapshots go to `memory_dir`.

    Raises:
        PhaseError: a phase failed; it names the phase and carries what the phases before it measured.
    """
    started = time.perf_counter()
    keep_freed_memory()
    graphs_before = _dynamo_graph_count()
    log.info("first call%s ...", " (includes torch.compile)" if spec.workload.compile else "")
    with phase("first call"):
        first_call_s = timed_step(workload, backend)
    log.info("first call took %.3f s", first_call_s)
    with phase("steady state"):
        steady = steady_state()
    if note := capped_steps_note(spec, steady):
        log.info(note)
    measured = Measurement(first_call_s=first_call_s, steady=steady)

    def stamped() -> Measurement:
        """The measurement with the graphs compiled and the seconds spent up to now."""
        measured.compile_graphs = _dynamo_graph_count() - graphs_before
        measured.measured_s = time.perf_counter() - started
        return measured

    def so_far() -> JobResult:
        """What the phases measured up to now, as a result the run can log."""
        return timing_result(spec, backend, stamped(), capture_dir)

    # device events timed the steady state, not what the host waits for a step: the synchronized step is timed here
    device_clocked = backend.traits.step_clock != names.STEP_CLOCK_HOST
    call_s = 0.0
    if device_clocked or not steady.in_job_process:
        # this process sat idle since its first call: the window would read it cold (threads asleep, caches cold)
        with phase("warm-up", so_far):
            call_s = warm_up(workload, backend, spec)
    if device_clocked:
        steps = steps_to_time(spec, call_s, backend)
        log.info("synchronized steps: %d, each timed alone by the host's clock ...", steps)
        with phase("synchronized steps", so_far):
            measured.sync_ms = backend.synchronized_steps(workload.step, steps)
    if spec.measure.mode == "throughput":
        with phase("throughput", so_far):
            measured.block_s = _queued_blocks(workload, backend, spec)
        measured.inflight = spec.measure.inflight
    if spec.profiler.enabled and backend.traits.measures_profiler_cost:
        with phase("profiler cost", so_far):
            measured.profiler_cost = profiler_cost(workload, backend, spec.profiler)
    history = backend.memory_history() if spec.measure.memory_snapshot else None
    snapshot = memory_dir / names.MEMORY_SNAPSHOT_FILE
    with phase("profiled window", so_far), recording(backend, history, snapshot):
        window = profiled_window(workload, backend, spec, capture_dir)
    measured.table, measured.printed_table, measured.profiler_output, measured.profiled_ms = window
    if spec.measure.memory_snapshot:
        with phase("memory snapshot", so_far):
            measured.memory = window_memory(history, capture_dir, snapshot)
    return stamped()
