"""A job's measurement phases (docs/measurement.md); device work is async: each clock read follows a synchronize."""

from __future__ import annotations

import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from torch.profiler import ProfilerAction

from runner import names
from runner.backends.base import Backend
from runner.config import RunSpec
from runner.measure.build import BuiltWorkload
from runner.measure.host_memory import keep_freed_memory
from runner.measure.loop import Progress, SteadyState, SteadyStateSource, steps_to_time, timed_step, warm_up
from runner.measure.memory import MemoryPeak, recording, window_memory
from runner.measure.optable import OpTable, build_op_table, summary_metrics
from runner.measure.profiling import CycleRecorder, build_profiler, make_schedule, tee_fd
from runner.measure.stability import median_uncertainty
from runner.measure.stats import coefficient_of_variation, describe_steps
from runner.measure.window import ProfilerCost, profiler_cost

log = logging.getLogger(__name__)
ACTIVE = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


@dataclass
class Measurement:
    """What the phases produced."""

    # the first call, which includes torch.compile / graph compilation
    first_call_s: float
    # steady-state step times, per process (worker processes, copies, or this one), and where they were timed
    steady: SteadyState
    # wall time of each recorded step of the profiled window, in ms
    profiled_ms: list[float]
    table: OpTable
    # key_averages().table(): the profiler's own printed table
    printed_table: str
    # what the process wrote to stderr during the profiled window (runtime warnings)
    profiler_output: str
    # graphs dynamo compiled during this job (recompilations included)
    compile_graphs: int
    # seconds spent in all phases together
    measured_s: float
    # measure.mode=throughput: seconds per block of `inflight` steps between synchronizes
    block_s: list[float] = field(default_factory=list)
    inflight: int = 0
    # measured apart from the window; None: profiler off, or the backend cannot without a device capture
    profiler_cost: ProfilerCost | None = None
    # measure.memory_snapshot: the profiled window's memory peak and its allocation sites
    memory: MemoryPeak | None = None
    # where device events time the steady state: synchronized steps' wall times in ms, timed in this process
    sync_ms: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """`time/*`, `profiler/*` and `compile/graphs` metrics of the phases."""
        # the headline metric first: the MLflow compare view plots the first logged metric by default
        metrics = {**describe_steps(self.samples()), names.FIRST_CALL_S: self.first_call_s}
        # one number per process, so one process stuck in a slow mode moves the median little
        process_medians = self.process_medians()
        metrics[names.STEP_MEDIAN_MS] = statistics.median(process_medians)
        if len(process_medians) > 1:
            metrics[names.PROCESS_CV] = coefficient_of_variation(process_medians)
        metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT] = median_uncertainty(self.steady.step_ms) * 100
        if len(self.steady.step_ms[0]) > 1:
            repeat_medians = [statistics.median(repeat) for process in self.steady.step_ms for repeat in process]
            metrics[names.REPEAT_CV] = coefficient_of_variation(repeat_medians)
        if self.sync_ms:
            metrics[names.SYNC_STEP_MS] = statistics.median(self.sync_ms)
        if self.profiled_ms:  # its steps are synchronized: against synchronized ones
            metrics[names.PROFILER_STEP_MS] = profiled = statistics.median(self.profiled_ms)
            unprofiled = metrics.get(names.SYNC_STEP_MS, metrics[names.STEP_MEDIAN_MS])
            metrics[names.PROFILER_OVERHEAD_PCT] = (profiled / unprofiled - 1) * 100
        if self.steady.copies_window_s:  # measure.copies: per-step medians would hide time-slicing
            metrics[names.SCALING_COPIES] = float(len(self.steady.step_ms))
            metrics[names.SCALING_THROUGHPUT] = len(self.samples()) / self.steady.copies_window_s
        if self.block_s:
            block = statistics.median(self.block_s)
            metrics[names.THROUGHPUT_STEPS_PER_S] = self.inflight / block
            metrics[names.THROUGHPUT_BLOCK_MS] = block * 1000
            metrics[names.THROUGHPUT_INFLIGHT] = float(self.inflight)
        metrics[names.COMPILE_GRAPHS] = float(self.compile_graphs)
        metrics[names.MEASURED_S] = self.measured_s
        metrics[names.STEPS_TIMED] = float(len(self.samples()))
        return {**metrics, **summary_metrics(self.table)}

    def samples(self) -> list[float]:
        """Every steady-state step time, in ms."""
        return [ms for process in self.steady.step_ms for repeat in process for ms in repeat]

    def process_medians(self) -> list[float]:
        """The median step time of each process, in ms."""
        return [statistics.median([ms for repeat in process for ms in repeat]) for process in self.steady.step_ms]


def dynamo_graph_count() -> int:
    """Unique graphs dynamo has compiled so far; 0 before torch.compile imports it (importing it costs about 3 s)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def queued_blocks(workload: BuiltWorkload, backend: Backend, spec: RunSpec) -> list[float]:
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
    """Run the phases in order (`steady_state` after the first call); memory snapshots go to `memory_dir`."""
    started = time.perf_counter()
    if spec.measure.keep_freed_memory:
        keep_freed_memory()
    graphs_before = dynamo_graph_count()
    log.info("first call%s ...", " (includes torch.compile)" if spec.workload.compile else "")
    first_call_s = timed_step(workload, backend)
    log.info("first call took %.3f s", first_call_s)
    steady = steady_state()
    # device events timed the steady state, not what the host waits for a step: the synchronized step is timed here
    device_clocked = backend.step_clock != names.STEP_CLOCK_HOST
    call_s = 0.0
    if device_clocked or not steady.in_job_process:
        # this process sat idle since its first call: the window would read it cold (threads asleep, caches cold)
        call_s = warm_up(workload, backend, spec)
    sync_ms = []
    if device_clocked:
        steps = steps_to_time(spec, call_s, backend)
        log.info("synchronized steps: %d, each timed alone by the host's clock ...", steps)
        sync_ms = backend.synchronized_steps(workload.step, steps)
    throughput = spec.measure.mode == "throughput"
    block_s = queued_blocks(workload, backend, spec) if throughput else []
    measures_cost = spec.profiler.enabled and backend.measures_profiler_cost
    cost = profiler_cost(workload, backend, spec.profiler) if measures_cost else None
    history = backend.memory_history() if spec.measure.memory_snapshot else None
    snapshot = memory_dir / names.MEMORY_SNAPSHOT_FILE
    with recording(backend, history, snapshot):
        table, printed, profiler_output, profiled_ms = profiled_window(workload, backend, spec, capture_dir)
    memory = window_memory(history, capture_dir, snapshot) if spec.measure.memory_snapshot else None
    return Measurement(
        first_call_s=first_call_s,
        steady=steady,
        profiled_ms=profiled_ms,
        table=table,
        printed_table=printed,
        profiler_output=profiler_output,
        compile_graphs=dynamo_graph_count() - graphs_before,
        measured_s=time.perf_counter() - started,
        block_s=block_s,
        inflight=spec.measure.inflight if throughput else 0,
        profiler_cost=cost,
        memory=memory,
        sync_ms=sync_ms,
    )
