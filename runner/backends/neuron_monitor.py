"""neuron-monitor, the Neuron tools' monitor: its configuration and its reports read into the job's figures.

A `runner.backends.monitor.MonitorTool`: a reader process (`runner.execute.monitor_reader`) runs it and
reads each report here, since a report lists every model loaded (`loaded_models`) and grows with a job's
NEFFs: parsing it in the measuring process took CPU while it was timed. Imports no torch.
"""

from __future__ import annotations

import json
import time
from typing import Any

from runner import names
from runner.backends.monitor import CPU_BUSY
from runner.backends.neuron_tools import neuron_tool

NAME = "neuron-monitor"
# the package neuron-monitor comes with; its version is the monitor's (the manifest reads it)
PACKAGE = "aws-neuronx-tools"
CONFIG_FILE, SAMPLES_FILE = names.NEURON_MONITOR_CONFIG_FILE, names.NEURON_MONITOR_SAMPLES_FILE
# the metric groups read, per Neuron application and for the system (neuron-monitor user guide)
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "execution_stats")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info")


def config(period_s: int) -> dict[str, Any]:
    """neuron-monitor's configuration: the groups read, for every Neuron application, every `period_s` s."""
    return {
        "period": f"{period_s}s",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": group} for group in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": group} for group in SYSTEM_GROUPS],
    }


def command(config_file: str) -> list[str]:
    """What runs neuron-monitor with the runner's configuration (found where the tools install, off PATH too)."""
    return [neuron_tool(NAME) or NAME, "-c", config_file]


def neuron_values(report: dict[str, Any], pid: int) -> tuple[dict[str, float], list[str]]:
    """One report as metric values of process `pid`'s runtime only, and its errors (a group with one may be partial)."""
    values: dict[str, float] = {}
    errors: list[str] = []
    for runtime in report.get("neuron_runtime_data") or []:
        if runtime.get("pid") != pid:
            continue
        if runtime.get("error"):
            errors.append(f"runtime {pid}: {runtime['error']}")
        groups = _usable(runtime.get("report") or {}, RUNTIME_GROUPS, errors)
        for name, read in zip(RUNTIME_GROUPS, (_core_values, _memory_values, _execution_values), strict=True):
            if name in groups:
                values.update(read(groups[name]))
    system = _usable(report.get("system_data") or {}, SYSTEM_GROUPS, errors)
    if (cpu := system.get("vcpu_usage")) is not None:
        values[names.SYSTEM_HOST_CPU_PCT] = sum(float(cpu["average_usage"][share]) for share in CPU_BUSY)
    if (memory := system.get("memory_info")) is not None:
        values[names.SYSTEM_HOST_MEMORY_USED_BYTES] = float(memory["memory_used_bytes"])
    return values, errors


def _usable(groups: dict[str, Any], wanted: tuple[str, ...], errors: list[str]) -> dict[str, Any]:
    """The wanted metric groups present and without an error; the errors go to `errors`."""
    present = {name: groups[name] for name in wanted if groups.get(name) is not None}
    errors.extend(f"{name}: {group['error']}" for name, group in present.items() if group.get("error"))
    return {name: group for name, group in present.items() if not group.get("error")}


def _core_values(counters: dict[str, Any]) -> dict[str, float]:
    return {
        names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=core): float(data["neuroncore_utilization"])
        for core, data in (counters.get("neuroncores_in_use") or {}).items()
    }


def _memory_values(memory: dict[str, Any]) -> dict[str, float]:
    """The runtime's device and host totals, and its device memory by category summed over its cores."""
    used = memory["neuron_runtime_used_bytes"]
    values = {
        names.SYSTEM_NEURON_DEVICE_BYTES: float(used["neuron_device"]),
        names.SYSTEM_NEURON_HOST_BYTES: float(used["host"]),
    }
    for core in (used.get("usage_breakdown", {}).get("neuroncore_memory_usage") or {}).values():
        for category, size in core.items():
            key = names.SYSTEM_NEURON_DEVICE_CATEGORY_BYTES.format(category=category)
            values[key] = values.get(key, 0.0) + float(size)
    return values


def _execution_values(stats: dict[str, Any]) -> dict[str, float]:
    """Error and outcome counts of the period, and latency percentiles in ms (none in a period without executions)."""
    values = {names.SYSTEM_NEURON_ERRORS.format(kind=kind): float(n) for kind, n in stats["error_summary"].items()}
    for outcome, count in stats["execution_summary"].items():
        values[names.SYSTEM_NEURON_EXECUTIONS.format(outcome=outcome)] = float(count)
    for kind, percentiles in (stats.get("latency_stats") or {}).items():
        for percentile, seconds in (percentiles or {}).items():
            key = names.SYSTEM_NEURON_LATENCY_MS.format(kind=kind.removesuffix("_latency"), percentile=percentile)
            values[key] = float(seconds) * 1000
    return values


def figures(line: str, pid: int) -> dict[str, Any] | None:
    """One line of neuron-monitor's output as a sample line's content (time, values, errors); None when not a report."""
    try:
        report = json.loads(line)
    except ValueError:  # a line that is not a report (a warning): not data
        return None
    try:
        values, errors = neuron_values(report, pid)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        values, errors = {}, [f"a report not in the documented format ({type(err).__name__}: {err})"]
    return {"time": time.time(), "values": values, "errors": errors}
