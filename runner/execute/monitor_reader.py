"""neuron-monitor's reader: a process of its own that runs neuron-monitor and keeps the job's few figures.

A report lists every model loaded (`loaded_models`), so it grows with a job's NEFFs; parsing it
in the measuring process took CPU while it was timed. `python -m runner.execute.monitor_reader
JOB_PID CONFIG_FILE SAMPLES_FILE` appends one JSON line of figures per report, imports no torch,
and stops neuron-monitor when stopped (SIGTERM) or killed (`die_with_parent`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from runner import names
from runner.backends.neuron_tools import neuron_tool
from runner.execute.processes import die_with_parent, end_process

NEURON_MONITOR = "neuron-monitor"
# the metric groups read, per Neuron application and for the system (neuron-monitor user guide)
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "execution_stats")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info")
# the shares of a CPU's time that count as busy, in neuron-monitor's names
CPU_BUSY = ("user", "nice", "system", "irq", "soft_irq")


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


def in_child(parent_pid: int) -> None:
    """In the reader and in neuron-monitor, before they run: die with the parent, leave Ctrl-C to the job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(job_pid: int, config_file: str, samples_file: Path) -> int:
    """Run neuron-monitor until stopped or until it ends; its exit status when it ended on its own."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        monitor = subprocess.Popen(
            [neuron_tool(NEURON_MONITOR) or NEURON_MONITOR, "-c", config_file],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=partial(in_child, os.getpid()),  # signal set-up only, between fork and exec
        )
    except OSError as err:
        print(f"system metrics: {NEURON_MONITOR} did not start: {err}", file=sys.stderr)
        return 1
    assert monitor.stdout is not None
    try:
        with samples_file.open("a") as out:
            for line in monitor.stdout:
                sample = figures(line, job_pid)
                if sample is not None and (sample["values"] or sample["errors"]):
                    out.write(json.dumps(sample) + "\n")
                    out.flush()
    finally:
        end_process(monitor)
        monitor.stdout.close()
    return monitor.returncode


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
