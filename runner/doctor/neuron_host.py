"""What every Neuron probe shares: the host it runs on, the fresh process it runs in, the tiny job it runs.

Every device use happens in a spawned process (`NeuronHost.run`), so each probe starts, as a job
does, from a runtime that is not running; the doctor's own process never touches the runtime.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner import names
from runner.backends.cores import parse_cores
from runner.backends.neuron import VISIBLE_CORES_ENV, NeuronBackend, torch_neuron
from runner.backends.neuron_capture import SUMMARY_JSON, explorer_summary, session_dirs
from runner.backends.neuron_coverage import driver_events
from runner.config import (
    MeasureConfig,
    NeuronBackendConfig,
    ProfilerConfig,
    RunSpec,
    ScheduleConfig,
    TrackingConfig,
    WorkloadSpec,
)
from runner.doctor.probe import in_fresh_process
from runner.measure.build import build_workload
from runner.measure.loop import timed_step
from runner.measure.phases import profiled_window
from runner.measure.profiling import STDOUT_FD, tee_fd


@dataclass(frozen=True)
class NeuronHost:
    """What the probes share: the visible NeuronCores (absolute indices), a scratch folder, a time limit."""

    cores: list[int]
    scratch: Path
    timeout_s: float

    def folder(self, probe: str) -> Path:
        """A fresh capture folder for one probe."""
        path = self.scratch / probe
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self, target: Callable[..., Any], *args: Any, env: dict[str, str | None] | None = None) -> Any:
        """`target(*args)`'s result from a fresh process (`env` set there; None unsets), within the time limit."""
        return in_fresh_process(target, *args, env=env, timeout_s=self.timeout_s)


def neuron_module() -> Any:
    """`torch.neuron`, after importing torch-neuronx (which registers it) in this fresh process."""
    import torch_neuronx  # noqa: F401

    return torch_neuron()


def visible_cores() -> list[int]:
    """The NeuronCores this host shows a process (absolute indices); does not start the runtime."""
    visible = os.environ.get(VISIBLE_CORES_ENV)
    return parse_cores(visible, VISIBLE_CORES_ENV) if visible else list(range(neuron_module().device_count()))


def neuron_backend() -> NeuronBackend:
    """The runner's Neuron backend with the default config, as a job with no backend keys gets it."""
    return NeuronBackend(NeuronBackendConfig())


def start_runtime() -> str:
    """Start the runtime as a job does (a tensor to the device, synchronized); where it placed the process."""
    backend = neuron_backend()
    torch.zeros(1).to(backend.device)
    backend.synchronize()
    return backend.placement()


def tiny_spec(hidden: int = 64, cores: str | None = None, **configs: Any) -> RunSpec:
    """A small naive RMSNorm job (`configs`: its profiler, schedule or measure); a new `hidden` means new NEFFs."""
    workload = WorkloadSpec(
        target="workloads.rmsnorm.NaiveRMSNorm", kwargs={"hidden": hidden, "batch": 1, "seq_len": 8}
    )
    configs = {"profiler": ProfilerConfig(), "schedule": ScheduleConfig(), "measure": MeasureConfig(), **configs}
    return RunSpec(workload, NeuronBackendConfig(cores=cores), tracking=TrackingConfig(enabled=False), **configs)


def profiled_run(spec: RunSpec, capture_dir: Path) -> dict[str, Any]:
    """The runner's first call and profiled window, then its capture inspection; what a probe reads."""
    backend = NeuronBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    timed_step(workload, backend)
    with tee_fd(STDOUT_FD) as stdout:
        table, _, stderr, _ = profiled_window(workload, backend, spec, capture_dir)
    report = backend.inspect_capture(capture_dir, spec.profiler, stderr, table.device_self_ms)
    # summary-json asked for by name: the report read Explorer's first format it produces (Parquet)
    summary_json = explorer_summary(session_dirs(capture_dir), backend.config.explorer_timeout_s, (SUMMARY_JSON,))
    files = sorted(p for p in capture_dir.rglob("*") if p.is_file())
    return {
        "device_time": table.has_device_time,
        "drivers": driver_events(capture_dir),
        "stderr": stderr,
        "stdout": "".join(stdout),
        "files": {str(p.relative_to(capture_dir)): p.stat().st_size for p in files},
        "tags": {k: v for k, v in report.tags.items() if v is not None},
        "summary_json": summary_json.raw,
        "summary_json_status": summary_json.tags[names.TAG_NEURON_EXPLORER],
    }
