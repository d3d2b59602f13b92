"""Device-time coverage: how much of the device time Explorer measured key_averages() accounts for.

The denominator sums Explorer's busy time, `total_active_time` ("the union of all active intervals" of engines,
DMA and collectives), where every profile has it, else `total_time` (on-device, idle gaps included), both
from the Parquet schema reference's Summary: the ops' device time is busy time, so idle gaps in the
denominator read as missing ops. In session mode one NTFF covers every NEFF the session ran
(troubleshooting.rst), more than the profiled step.
key_averages() gets no Neuron device time: Kineto defines PrivateUse1 driver events as host-side (libkineto
ActivityType.h; pytorch issue 166205) and TorchNeuron feeds no device event back (its source, Feb 2026).
"""

from __future__ import annotations

from pathlib import Path

from runner import names
from runner.backends.base import CaptureReport
from runner.chrome_trace import read_chrome_trace

# below this fraction the run warns: the op table misses device time
_COVERAGE_WARN = 0.95
# their count tells a build that sends driver events from one that sends nothing
_DRIVER_CATEGORY = "privateuse1_driver"
MS_PER_S = 1000.0


def driver_events(capture_dir: Path) -> int:
    """The `privateuse1_driver` events in the capture's framework traces."""
    paths = sorted(capture_dir.rglob("*.json")) if capture_dir.is_dir() else []
    traces = [trace for trace in map(read_chrome_trace, paths) if trace is not None]
    return sum(1 for trace in traces for event in trace["traceEvents"] if event.get("cat") == _DRIVER_CATEGORY)


def _missing_device_time(framework_ms: float, drivers: int) -> str:
    """Why key_averages() lacks device time Explorer saw."""
    if framework_ms > 0:
        return "device work that no op of the profile accounts for"
    if drivers:
        return (
            f"all of it: the profiler got {drivers} privateuse1_driver events, which Kineto defines as host-side "
            "launch events (pytorch issue 166205), so their time is in the CPU columns and no device event came back"
        )
    return (
        "all of it: torch-neuronx fed no device activity back to the profiler "
        "(profiler.correlate_device_time=true may, where the build accepts it)"
    )


def device_time_coverage(
    framework_ms: float, explorer_s: float | None, drivers: int, explorer: str, busy_s: float | None = None
) -> CaptureReport:
    """Compare key_averages()'s device time (ms) with Explorer's (s): metrics, tag, a low one's warning.

    The denominator is `busy_s` (summed total_active_time) where Explorer gave it, else `explorer_s` (summed
    total_time); `drivers` counts privateuse1_driver events; `explorer` says how Explorer went, for the tag
    without a total.
    """
    metrics = {names.NEURON_FRAMEWORK_DEVICE_MS: framework_ms}
    if not explorer_s:
        tag = f"unknown: neuron-explorer gave no on-device total_time ({explorer})"
        return CaptureReport(metrics, {names.TAG_NEURON_DEVICE_TIME_COVERAGE: tag})
    explorer_ms = (busy_s or explorer_s) * MS_PER_S
    fraction = framework_ms / explorer_ms
    metrics[names.NEURON_DEVICE_TIME_COVERAGE] = fraction
    idle = "in neuron-explorer's total_time, idle gaps included"
    of_what = "busy in neuron-explorer's total_active_time" if busy_s else idle
    found = f"key_averages() has {framework_ms:.3f} ms of the {explorer_ms:.3f} ms of device time {of_what}"
    found += f" ({fraction:.0%})"
    if fraction >= _COVERAGE_WARN:
        return CaptureReport(metrics, {names.TAG_NEURON_DEVICE_TIME_COVERAGE: f"ok: {found}"})
    missing = f"missing {explorer_ms - framework_ms:.3f} ms, {_missing_device_time(framework_ms, drivers)}"
    return CaptureReport(
        metrics,
        {names.TAG_NEURON_DEVICE_TIME_COVERAGE: f"warning: {found}; {missing}"},
        warnings=[f"device time below {_COVERAGE_WARN:.0%} covered: {found}; {missing}"],
    )
