"""The Neuron probes of what a job measures beside the profiler: warm-up, neuron-monitor, memory, CPU fallbacks.

docs/trainium.md lists the assumptions; each probe checks one through the runner's own measurement code.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from runner import names
from runner.backends import neuron_monitor
from runner.backends.base import CaptureReport
from runner.backends.neuron import VISIBLE_CORES_ENV, NeuronBackend
from runner.backends.neuron_fallback import note_cpu_fallbacks
from runner.backends.neuron_tools import NEURON_BIN, neuron_tool
from runner.config import MeasureConfig, ProfilerConfig, RunSpec
from runner.doctor.neuron_host import NeuronHost, neuron_backend, start_runtime, tiny_spec
from runner.doctor.probe import Assumption, ProcessFailed, Verdict
from runner.execute.monitor import ToolSampler
from runner.measure.build import build_workload
from runner.measure.loop import timed_step, warm_up
from runner.measure.memory import recording, window_memory

# the steps right after the runner's warm-up count as cold when their median is this much
# slower than the steady median, and by more than a NEFF's documented first-run cost could hide
_WARM_TOLERANCE = 1.5
_COLD_EXCESS_MS = 0.5
_FIRST_TIMED = 3
_TIMED_STEPS = 20


# --- what runs in the fresh processes ------------------------------------------------------


def _first_executions(spec: RunSpec) -> dict[str, Any]:
    """Times of the first calls, of the first step after the runner's warm-up, and of the steady state (ms)."""
    backend = NeuronBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    first = [timed_step(workload, backend) * 1000 for _ in range(3)]
    warm_up(workload, backend, spec)
    after = [timed_step(workload, backend) * 1000 for _ in range(_TIMED_STEPS)]
    return {
        "first": first,
        "after_warm_up": statistics.median(after[:_FIRST_TIMED]),
        "steady": statistics.median(after[_TIMED_STEPS // 2 :]),
    }


def _monitored_runtime(folder: Path, period_s: int) -> dict[str, Any]:
    """The runner's neuron-monitor sampler over a started runtime for two and a half periods: its series and errors."""
    start_runtime()
    sampler = ToolSampler(neuron_monitor, period_s, folder)
    sampler.start()
    time.sleep(2.5 * period_s)
    samples = sampler.stop()
    return {
        "samples": len(samples),
        "keys": sorted({key for s in samples for key in s.values}),
        "errors": sampler.errors,
    }


def _fallbacks_of_one_step() -> dict[str, Any]:
    """One step of the tiny workload, its CPU fallbacks read as a job reads them (runner.backends.neuron_fallback)."""
    backend = neuron_backend()
    timed_step(build_workload(tiny_spec().workload, backend), backend)
    report = CaptureReport()
    note_cpu_fallbacks(report)
    return {
        "tag": report.tags[names.TAG_NEURON_CPU_FALLBACKS],
        "ops": report.metrics.get(names.NEURON_CPU_FALLBACK_OPS),
    }


def _snapshot_of_one_step(folder: Path) -> dict[str, Any] | None:
    """One step recorded and read back as measure.memory_snapshot records a window; None without the calls."""
    backend = neuron_backend()
    history = backend.memory_history()
    if history is None:
        return None
    workload = build_workload(tiny_spec().workload, backend)
    snapshot = folder / names.MEMORY_SNAPSHOT_FILE
    with recording(backend, history, snapshot):
        timed_step(workload, backend)
    peak = window_memory(history, folder, snapshot)
    return {"peak": peak.peak_bytes, "sites": peak.sites}


# --- the probes ----------------------------------------------------------------------------


def probe_first_execution(host: NeuronHost) -> Verdict:
    """The runner's warm-up covers the cost of a NEFF's first executions."""
    warmup = MeasureConfig().warmup
    check = Assumption(
        "first_execution", f"after the first call and measure.warmup={warmup} calls, steps run at steady speed"
    )
    spec = tiny_spec(96, cores=str(host.cores[0]), profiler=ProfilerConfig(enabled=False))
    times = host.run(_first_executions, spec)
    first = ", ".join(f"{t:.2f}" for t in times["first"])
    evidence = (
        f"first three calls {first} ms; median of the {_FIRST_TIMED} steps after the warm-up "
        f"{times['after_warm_up']:.3f} ms; steady median {times['steady']:.3f} ms"
    )
    excess = times["after_warm_up"] - times["steady"]
    warm = times["after_warm_up"] <= _WARM_TOLERANCE * times["steady"] or excess <= _COLD_EXCESS_MS
    fix = f"raise measure.warmup (or measure.warmup_s) above {warmup}: the steady state starts cold"
    return check.judge(warm, evidence, fix, breaks_runner=True)


def probe_neuron_monitor(host: NeuronHost) -> Verdict:
    """neuron-monitor runs and prints the documented JSON, read by the runner's sampler for a process's runtime."""
    # neuron-monitor user guide ("The JSON output format"): one report per period, runtimes by pid
    check = Assumption(
        "neuron_monitor",
        f"{neuron_monitor.NAME} -c <config> prints one JSON report per period: the runtime's cores and memory by pid",
    )
    if neuron_tool(neuron_monitor.NAME) is None:
        return check.unknown(f"{neuron_monitor.NAME} is neither on PATH nor in {NEURON_BIN} (aws-neuronx-tools)")
    found = host.run(_monitored_runtime, host.folder("neuron_monitor"), 1, env={VISIBLE_CORES_ENV: str(host.cores[0])})
    series = [key for key in found["keys"] if key.startswith(names.SYSTEM_NEURON_PREFIX)]
    evidence = f"{found['samples']} report(s) in 2.5 s at period 1s; {len(series)} series of the runtime: " + (
        ", ".join(series[:6]) or "none"
    )
    if found["errors"]:
        evidence += f"; reported: {'; '.join(found['errors'])}"
    fix = (
        "monitor=every_second logs no system/neuron/ series on this host (set monitor=none): "
        "runner/backends/neuron_monitor.py neuron_values reads the guide's format"
    )
    read = names.SYSTEM_NEURON_DEVICE_BYTES in series and any(key.endswith("/utilization_pct") for key in series)
    return check.judge(read, evidence, fix, breaks_runner=True)


def probe_memory_snapshot(host: NeuronHost) -> Verdict:
    """torch.neuron.memory has torch.cuda.memory's snapshot calls (inferred: no document names them)."""
    check = Assumption(
        "memory_snapshot", "torch.neuron.memory._record_memory_history and _dump_snapshot record a memory_viz snapshot"
    )
    try:
        found = host.run(
            _snapshot_of_one_step, host.folder("memory_snapshot"), env={VISIBLE_CORES_ENV: str(host.cores[0])}
        )
    except ProcessFailed as err:
        fix = "measure.memory_snapshot=false on neuron: the snapshot calls exist but fail"
        return check.fails(str(err), fix, breaks_runner=True)
    if found is None:
        fix = (
            "nothing breaks: measure.memory_snapshot reads the profiler's memory events (profiler.profile_memory=true)"
        )
        return check.fails("torch.neuron.memory lacks _record_memory_history or _dump_snapshot", fix)
    evidence = f"one step's snapshot: peak {found['peak']} B, sites " + (
        ", ".join(f"{site} {size} B" for site, size in list(found["sites"].items())[:3]) or "none"
    )
    fix = "measure.memory_snapshot=false on neuron: the dumped snapshot holds no allocation the runner can read"
    return check.judge(found["peak"] > 0, evidence, fix, breaks_runner=True)


def probe_cpu_fallbacks(host: NeuronHost) -> Verdict:
    """torch-neuronx lists the ops it ran on the CPU (SRC torch_neuronx/__init__.py; no page read names the calls)."""
    check = Assumption(
        "cpu_fallbacks", "torch_neuronx.get_fallback_ops() lists the ops run on the CPU since clear_op_tracking()"
    )
    found = host.run(_fallbacks_of_one_step, env={VISIBLE_CORES_ENV: str(host.cores[0])})
    evidence = f"one step of a tiny RMSNorm: neuron.cpu_fallbacks={found['tag']!r}"
    fix = "nothing breaks: runs tag neuron.cpu_fallbacks as unknown and log no neuron/cpu_fallback_ops"
    return check.judge(found["ops"] is not None, evidence, fix)
