"""A job measured in the process that calls it (the job's own, or a rank's): the phases, capture report and result."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from runner import names
from runner.backends.base import Backend
from runner.backends.peaks import Peak
from runner.config import RunSpec
from runner.execute.monitor import system_monitor
from runner.execute.workers import Timer, steady_state_in_processes, steady_state_timing
from runner.measure.build import BuiltWorkload
from runner.measure.collect import collect_result
from runner.measure.compile_cache import cache_report
from runner.measure.loop import SteadyState, SteadyStateSource, in_this_process
from runner.measure.phases import measure
from runner.measure.result import JobResult, PhaseError, phase, timing_result


def steady_state_source(
    spec: RunSpec, backend: Backend, workload: BuiltWorkload, timed: SteadyState | None = None
) -> SteadyStateSource:
    """What times the steady state: copies or rounds (already `timed`), else as `steady_state_timing` says."""
    if timed is not None:
        return lambda: timed
    timing = steady_state_timing(spec, type(backend), rounds=False)
    if timing.timer is Timer.WORKERS:
        return partial(steady_state_in_processes, spec, timing.processes)
    return in_this_process(workload, backend, spec)


def measure_job(
    spec: RunSpec,
    output_dir: Path,
    backend: Backend,
    workload: BuiltWorkload,
    peak: Peak | None,
    timed: SteadyState | None,
) -> JobResult:
    """The phases on the workload, the backend's capture report, and the result they make.

    Raises:
        PhaseError: a phase failed; it names the phase and carries what the phases before it measured.
    """
    capture_dir = output_dir / backend.traits.capture_folder
    # a folder used again (a resumed job, a hydra.run.dir given twice) must not hand this run old traces
    memory_dir = output_dir / names.MEMORY_FOLDER
    for folder in (capture_dir, memory_dir):
        shutil.rmtree(folder, ignore_errors=True)
    backend.reset_peak_memory()
    neffs_before = backend.compiled_artifact_count()
    steady_state = steady_state_source(spec, backend, workload, timed)
    try:
        with system_monitor(spec.monitor, backend, output_dir) as system:  # from the first call to the window's end
            measurement = measure(workload, backend, spec, capture_dir, steady_state, memory_dir)
        with phase("capture report", lambda: timing_result(spec, backend, measurement, capture_dir)):
            capture = backend.inspect_capture(
                capture_dir, spec.profiler, measurement.profiler_output, measurement.table.device_self_ms
            )
            if neffs_before is not None:
                new_neffs = (backend.compiled_artifact_count() or 0) - neffs_before
                capture.metrics[names.COMPILE_NEFFS_NEW] = float(new_neffs)
        result = collect_result(spec, workload, backend, measurement, peak, capture, capture_dir)
        with phase("compile cache report", lambda: result):
            metrics, tags = cache_report(spec, backend, capture_dir, capture.metrics.get(names.COMPILE_NEFFS_NEW))
    except PhaseError as err:
        if err.partial is not None:  # the monitor's samples up to the failure
            err.partial.system = system
        raise
    result.system = system
    result.metrics.update(metrics)
    result.tags.update(tags)
    return result
