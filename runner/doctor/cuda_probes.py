"""CUDA probes: synchronisation, device time, peak memory, and the runner's timing against Timer.

All four measurements run in one fresh process through the runner's own CUDA backend and
measurement phases; the verdicts are judged here from the figures it returns.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.benchmark import Timer

from runner.backends.cuda import CudaBackend
from runner.config import (
    BackendConfig,
    MeasureConfig,
    ProfilerConfig,
    RunSpec,
    ScheduleConfig,
    TrackingConfig,
    WorkloadSpec,
)
from runner.doctor.probe import Assumption, ProcessFailed, Verdict, in_fresh_process
from runner.measure.build import build_workload
from runner.measure.loop import steady_state, timed_step
from runner.measure.phases import profiled_window

CUDA_PROBE_NAMES = ("cuda_synchronize", "cuda_device_time", "cuda_peak_memory", "cuda_timing")
# the shape the runner and Timer both time: big enough that launch overhead does not dominate
_TIMED_SHAPE = {"batch": 8, "seq_len": 512, "hidden": 1024}
MATMUL_SIZE = 4096
_MATMULS = 20
_PEAK_PROBE_BYTES = 256 * 2**20
# the runner's steady-state median against Timer's: agreement within this ratio passes
_TIMER_AGREEMENT = 1.10


def _cuda_figures(scratch: str) -> dict[str, Any]:
    """Everything the CUDA verdicts need, measured through the runner's backend and phases."""
    spec = RunSpec(
        workload=WorkloadSpec(target="workloads.rmsnorm.NaiveRMSNorm", kwargs=dict(_TIMED_SHAPE)),
        backend=BackendConfig(name="cuda"),
        profiler=ProfilerConfig(),
        schedule=ScheduleConfig(),
        measure=MeasureConfig(processes=0),
        tracking=TrackingConfig(enabled=False),
    )
    backend = CudaBackend(spec.backend)
    a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=backend.device)
    (a @ a).sum().item()
    backend.synchronize()
    start = time.perf_counter()
    for _ in range(_MATMULS):
        a @ a
    queued_s = time.perf_counter() - start
    backend.synchronize()
    synced_s = time.perf_counter() - start

    backend.reset_peak_memory()
    block = torch.empty(_PEAK_PROBE_BYTES, dtype=torch.uint8, device=backend.device)
    peak = backend.peak_memory_bytes()
    del block

    workload = build_workload(spec.workload, backend)
    timed_step(workload, backend)
    table, _, _, _ = profiled_window(workload, backend, spec, Path(scratch))
    runner_ms = statistics.median(steady_state(workload, backend, spec)[0])

    def synced_step() -> None:
        workload.step()
        backend.synchronize()

    timer_ms = Timer("step()", globals={"step": synced_step}).blocked_autorange(min_run_time=2).median * 1000
    return {
        "device": backend.placement(),
        "queued_ms": queued_s * 1000,
        "synced_ms": synced_s * 1000,
        "peak_bytes": peak,
        "device_time": table.has_device_time,
        "runner_ms": runner_ms,
        "timer_ms": timer_ms,
    }


def cuda_verdicts(scratch: str, timeout_s: float) -> list[Verdict]:
    """The four CUDA verdicts, from one fresh process's figures."""
    try:
        found = in_fresh_process(_cuda_figures, scratch, timeout_s=timeout_s)
    except ProcessFailed as err:
        return [Assumption("cuda", "the CUDA probes run").unknown(f"the probe process failed: {err}")]
    peak = found["peak_bytes"] or 0
    ratio = found["runner_ms"] / found["timer_ms"]
    shape = "x".join(str(v) for v in _TIMED_SHAPE.values())
    return [
        Assumption("cuda_synchronize", "CudaBackend.synchronize() waits for queued kernels").judge(
            found["synced_ms"] > 2 * found["queued_ms"],
            f"{_MATMULS} matmuls of {MATMUL_SIZE}^2: {found['queued_ms']:.2f} ms to queue, "
            f"{found['synced_ms']:.2f} ms to finish",
            "runner/backends/cuda.py synchronize: step times measure queueing only",
            breaks_runner=True,
        ),
        Assumption("cuda_device_time", "key_averages() carries CUDA kernel time").judge(
            found["device_time"],
            "self_device_time_total > 0 for some ops" if found["device_time"] else "no op has device time",
            "check that CUPTI loads (the op table falls back to CPU time)",
        ),
        Assumption("cuda_peak_memory", "the allocator's peak statistic sees a fresh allocation").judge(
            peak >= _PEAK_PROBE_BYTES,
            f"peak {peak / 2**20:.0f} MiB after allocating {_PEAK_PROBE_BYTES / 2**20:.0f} MiB",
            "memory/peak_mb is wrong: runner/backends/cuda.py peak_memory_bytes",
            breaks_runner=True,
        ),
        Assumption(
            "cuda_timing",
            f"the runner's step median agrees with torch.utils.benchmark within {_TIMER_AGREEMENT - 1:.0%}",
        ).judge(
            1 / _TIMER_AGREEMENT <= ratio <= _TIMER_AGREEMENT,
            f"naive RMSNorm {shape} on {found['device']}: runner {found['runner_ms']:.4f} ms, "
            f"Timer {found['timer_ms']:.4f} ms (ratio {ratio:.3f})",
            "rerun; if it persists, the runner's timing loop adds or hides work (runner/measure)",
            breaks_runner=True,
        ),
    ]
