"""What a job's phases measured (`Measurement`), apart from the phases, so a partial one can become a result."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from runner import names
from runner.measure.loop import SteadyState
from runner.measure.memory import MemoryPeak
from runner.measure.optable import OpTable, summary_metrics
from runner.measure.stats import coefficient_of_variation, describe_steps
from runner.measure.window import ProfilerCost


@dataclass
class Measurement:
    """What the phases produced; a phase not reached leaves its field empty (a failed job's partial result)."""

    # the first call, which includes torch.compile / graph compilation
    first_call_s: float
    # steady-state step times, per process (worker processes, copies, or this one), and where they were timed
    steady: SteadyState
    # wall time of each recorded step of the profiled window, in ms
    profiled_ms: list[float] = field(default_factory=list)
    table: OpTable = field(default_factory=lambda: OpTable(rows=[], active_steps=0, has_device_time=False))
    # key_averages().table(): the profiler's own printed table
    printed_table: str = ""
    # what the process wrote to stderr during the profiled window (runtime warnings)
    profiler_output: str = ""
    # graphs dynamo compiled during this job (recompilations included)
    compile_graphs: int = 0
    # seconds spent in all phases together
    measured_s: float = 0.0
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
