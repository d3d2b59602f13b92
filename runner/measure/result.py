"""A job's result as data (`JobResult`), for tracking to log and the console to print; nothing here writes."""

from __future__ import annotations

import resource
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import names
from runner.backends.base import Backend
from runner.config import RunSpec
from runner.errors import ConfigError
from runner.measure.measurement import Measurement
from runner.measure.optable import OpTable, self_time_by_op
from runner.measure.stability import Spread, between_runs, noise_note, within_run, worker_spread
from runner.measure.window import judge_window
from runner.secrets import one_line

MIB = 2**20


@dataclass(frozen=True)
class SystemSample:
    """One reading of the system metrics while the job measured (monitor.period_s)."""

    # when it was read, in seconds since the epoch
    time_s: float
    # metric name (system/...) -> value
    values: dict[str, float]


@dataclass
class JobResult:
    """Everything one job found, ready to log and to print."""

    metrics: dict[str, float]
    tags: dict[str, Any]
    table: OpTable
    # key_averages().table(): the profiler's own printed table
    printed_table: str
    # where the profiler wrote its traces (logged as an artifact folder of the same name)
    capture_dir: Path
    # extra text artifacts: file name -> content
    texts: dict[str, str] = field(default_factory=dict)
    # metric histories: name -> one value per step (the per-process medians)
    series: dict[str, list[float]] = field(default_factory=dict)
    # what the console shows as warnings under the summary
    warnings: list[str] = field(default_factory=list)
    # every timed steady-state step in ms, in the order it ran (for the ranks' step plot)
    step_ms: list[float] = field(default_factory=list)
    # more MLflow tables: artifact file name -> columns (the per-layer accuracy)
    tables: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    # measure.memory_snapshot: the folder of the window's memory snapshot (logged as an artifact folder)
    memory_dir: Path | None = None
    # the system metrics sampled while the job measured, in the order they were read
    system: list[SystemSample] = field(default_factory=list)
    # what the run itself shows of its median's spread (its blocks, its processes); `judge_timing` states it
    spread: Spread | None = None
    # the console's note when the next run may land over 5% away: by how much, what still holds, what narrows it
    timing_note: str | None = None


class PhaseError(RuntimeError):
    """A phase of the job raised: the message names it; `partial` is what the phases before it measured.

    The run logs `partial` before it closes FAILED, so a late failure (a float64 reference out of memory) does not
    throw away the minutes measured before it. None: nothing was measured yet (the first call or the steady state).
    """

    def __init__(self, name: str, error: Exception, partial: JobResult | None) -> None:
        super().__init__(f"{name}: {one_line(error)}")
        self.phase = name
        self.partial = partial


def _nothing_yet() -> JobResult | None:
    """No result: the phases that make one have not run."""
    return None


@contextmanager
def phase(name: str, so_far: Callable[[], JobResult | None] = _nothing_yet) -> Iterator[None]:
    """One named phase: its error becomes a `PhaseError` carrying `so_far()`; a config error stays itself."""
    try:
        yield
    except (PhaseError, ConfigError):
        raise
    except Exception as err:
        raise PhaseError(name, err, so_far()) from err


def profiled_window_report(
    spec: RunSpec, result: Measurement, median_ms: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """The profiler's measured cost per step and whether the window read the steady state (copies share: no verdict)."""
    if result.profiler_cost is None or not result.profiled_ms:
        return {}, {}
    metrics = {names.PROFILER_COST_MS: statistics.fmean(result.profiler_cost.per_recorded_step(spec.schedule))}
    if not result.table.rows or result.steady.copies_window_s is not None:
        return metrics, {}
    synchronized = result.sync_ms or result.samples()  # the window's steps are synchronized ones
    reason = judge_window(
        result.profiled_ms, result.profiler_cost, spec.schedule, synchronized, median_ms, spec.measure.steps
    )
    return metrics, {names.TAG_WINDOW_REPRESENTATIVE: "false" if reason else "true", names.TAG_WINDOW_REASON: reason}


def wall_breakdown(metrics: dict[str, float]) -> dict[str, float]:
    """The synchronized step's wall time as the device's busy time per profiled step, and the rest.

    The rest is the host's: launches, Python, idle. Only where device events time the steady state
    (it then times the synchronized step apart) and the profiler saw the device.
    """
    if names.SYNC_STEP_MS not in metrics or not metrics.get(names.PROFILER_ACTIVE_STEPS):
        return {}
    if (device_ms := metrics.get(names.DEVICE_SELF_TOTAL_MS)) is None:
        return {}
    busy = device_ms / metrics[names.PROFILER_ACTIVE_STEPS]
    return {names.DEVICE_BUSY_MS: busy, names.HOST_AND_IDLE_MS: max(0.0, metrics[names.SYNC_STEP_MS] - busy)}


def timing_result(spec: RunSpec, backend: Backend, measurement: Measurement, capture_dir: Path) -> JobResult:
    """The phases' own numbers: timing, stability, the window and its op table, memory; all a later failure leaves."""
    metrics = measurement.metrics()
    if (peak_device := backend.peak_memory_bytes()) is not None:
        metrics[names.PEAK_DEVICE_MB] = peak_device / MIB
    # ru_maxrss is in KiB on Linux: the process's peak, in a one-process sweep the jobs before this one's too
    metrics[names.PEAK_HOST_RSS_MB] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    by_op = self_time_by_op(measurement.table)
    device_time = "reported" if measurement.table.has_device_time else "absent: the profiler reported no device time"
    tags: dict[str, Any] = {names.TAG_TOP_OP: next(iter(by_op), None), names.TAG_DEVICE_TIME: device_time}
    flushed = ", cache flushed before each step" if spec.measure.flush_cache else ""
    tags[names.TAG_STEP_CLOCK] = backend.traits.step_clock + flushed
    metrics.update(wall_breakdown(metrics))
    synchronized_ms = metrics.get(names.SYNC_STEP_MS, metrics[names.STEP_MEDIAN_MS])
    window_metrics, window_tags = profiled_window_report(spec, measurement, synchronized_ms)
    metrics.update(window_metrics)
    tags.update(window_tags)
    tables = {}
    metrics[names.WORKER_SPREAD_PCT] = worker_spread(measurement.steady.step_ms) * 100
    if measurement.steady.places:
        tags[names.TAG_ROUNDS_ID] = measurement.steady.rounds_id
        tables[names.ROUNDS_FILE] = rounds_table(measurement)
    if measurement.memory is not None:
        metrics[names.MEMORY_WINDOW_PEAK_MB] = measurement.memory.peak_bytes / MIB
        tags[names.TAG_MEMORY_SOURCE] = measurement.memory.source
        tables[names.MEMORY_SITES_FILE] = measurement.memory.table()
    result = JobResult(
        metrics=metrics,
        tags=tags,
        table=measurement.table,
        printed_table=measurement.printed_table,
        capture_dir=capture_dir,
        series={names.PROCESS_MEDIAN_MS: measurement.process_medians()},
        step_ms=measurement.samples(),
        tables=tables,
        memory_dir=measurement.memory.snapshot.parent if measurement.memory else None,
        spread=within_run(measurement.steady.step_ms, measurement.process_medians()),
    )
    judge_timing(result, spec, backend, [])
    return result


def judge_timing(result: JobResult, spec: RunSpec, backend: Backend, earlier_ms: list[float]) -> None:
    """State the run's interval for the next identical run, and note a noisy host; a run alone is not flagged.

    `earlier_ms`: the configuration's earlier medians on this host, newest first, which the job reads from the
    store: only they show the host's drift between runs. `timing.stable` turns false where a comparison the run
    is in does not resolve (a sweep's, against its baseline); a flag on every run of a noisy host says nothing
    (issue 52: 22 of 22 default runs, from their own worker processes alone).
    """
    if result.spread is None or names.STEP_MEDIAN_MS not in result.metrics:
        return
    # the earlier runs saw what moves a run's median, this run's own spread included; without them, only the run
    stated = between_runs(earlier_ms, result.metrics[names.STEP_MEDIAN_MS]) or result.spread
    result.metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT] = stated.next_run * 100
    result.tags[names.TAG_TIMING_STABLE] = "true"
    result.timing_note = noise_note(stated, backend.steadier_measurement(spec))


def rounds_table(measurement: Measurement) -> dict[str, list[Any]]:
    """Each worker's round, its place in the round's order, the round's workers and its median step time."""
    columns = {
        name: [getattr(place, name) for place in measurement.steady.places] for name in ("round", "position", "workers")
    }
    return {**columns, "median_ms": measurement.process_medians()}
