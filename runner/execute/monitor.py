"""A job's system metrics, sampled while its phases measure: the host, and the device's own monitor.

`monitor.period_s` turns it on. What samples is the backend's `system_monitor`: on Neuron the
Neuron tools' `neuron-monitor`, whose JSON reports (one per line, documented in the
neuron-monitor user guide) carry the NeuronCores, memory, latency and errors of the measuring
process's runtime and the host's CPU and memory; on CUDA NVML (`nvidia-ml-py`) for the job's GPU;
on the CPU the host's CPU and memory from /proc. A device monitor that is not installed is said
in one line, and the host is sampled instead.

Nothing outlives the measurement: `neuron-monitor` is a child that is stopped when the phases
end, however they end, and that the kernel kills if the measuring process dies first (SIGKILL
included, `die_with_parent`); the other samplers are a thread of the measuring process.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from runner import names
from runner.backends.base import Backend
from runner.config import MonitorConfig
from runner.execute.processes import die_with_parent, end_process
from runner.result import SystemSample

log = logging.getLogger(__name__)

NEURON_MONITOR = "neuron-monitor"
# the package neuron-monitor comes with; its version is the monitor's (the manifest reads it)
NEURON_MONITOR_PACKAGE = "aws-neuronx-tools"
NVML_PACKAGE = "nvidia-ml-py"
# the metric groups read, per Neuron application and for the system (neuron-monitor user guide)
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "execution_stats")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info")
# the shares of a CPU's time that count as busy, in neuron-monitor's names; /proc/stat's first
# eight columns in order, by the same names
CPU_BUSY = ("user", "nice", "system", "irq", "soft_irq")
PROC_STAT_COLUMNS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq", "steal")
PROC_STAT, PROC_MEMINFO = Path("/proc/stat"), Path("/proc/meminfo")


@dataclass(frozen=True)
class MonitorPlan:
    """What samples this job's system metrics, every how many seconds, and why not the device's monitor."""

    # "neuron-monitor", "nvml" or "host"
    source: str
    period_s: int
    # the sampler's version where it has one (the manifest adds neuron-monitor's package version)
    version: str | None = None
    # one line when the backend's monitor is not there (the host is sampled instead)
    missing: str = ""

    def facts(self) -> dict[str, Any]:
        """For the manifest (environment.json)."""
        return {"source": self.source, "period_s": self.period_s, "version": self.version, "missing": self.missing}


def plan_monitor(config: MonitorConfig, monitor: str) -> MonitorPlan | None:
    """The sampler for a backend's `system_monitor`, probed (nothing is started); None when monitor.period_s is off."""
    if config.period_s is None:
        return None
    period = config.period_s
    if monitor == NEURON_MONITOR:
        if shutil.which(NEURON_MONITOR) is None:
            why = f"{NEURON_MONITOR} is not installed (it comes with {NEURON_MONITOR_PACKAGE})"
            return MonitorPlan("host", period, missing=f"{why}: only the host's CPU and memory are sampled")
        return MonitorPlan(NEURON_MONITOR, period)
    if monitor == "nvml":
        try:
            version = nvml_version()
        except (ImportError, RuntimeError) as err:
            return MonitorPlan("host", period, missing=f"NVML is not usable ({err}): only the host is sampled")
        return MonitorPlan("nvml", period, version)
    return MonitorPlan("host", period)


def nvml_version() -> str:
    """nvidia-ml-py's version and the driver's, starting NVML.

    Raises:
        ImportError: nvidia-ml-py is not installed.
        RuntimeError: NVML does not start (no driver).
    """
    try:
        import pynvml
    except ImportError:
        raise ImportError(f"{NVML_PACKAGE} is not installed: pip install {NVML_PACKAGE}") from None
    try:
        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as err:
        raise RuntimeError(f"NVML does not start: {err}") from None
    try:
        package = f"{NVML_PACKAGE} {metadata.version(NVML_PACKAGE)}"
    except metadata.PackageNotFoundError:  # pynvml from another distribution
        package = "pynvml"
    return f"{package}, driver {driver}"


# --- reading a neuron-monitor report ---


def neuron_values(report: dict[str, Any], pid: int) -> tuple[dict[str, float], list[str]]:
    """One neuron-monitor report as metric values for the runtime of process `pid`, and the errors it reported.

    Other processes' runtimes are left out, so only the job's NeuronCores appear. A metric group
    that reports an error is skipped (its data may be partial), and its error returned.
    """
    values: dict[str, float] = {}
    errors: list[str] = []
    for runtime in report.get("neuron_runtime_data") or []:
        if runtime.get("pid") != pid:
            continue
        if runtime.get("error"):
            errors.append(f"runtime {pid}: {runtime['error']}")
        groups = _usable(runtime.get("report") or {}, RUNTIME_GROUPS, errors)
        values.update(_core_values(groups.get("neuroncore_counters")))
        values.update(_memory_values(groups.get("memory_used")))
        values.update(_execution_values(groups.get("execution_stats")))
    system = _usable(report.get("system_data") or {}, SYSTEM_GROUPS, errors)
    if (cpu := system.get("vcpu_usage")) is not None:
        values[names.SYSTEM_HOST_CPU_PCT] = sum(float(cpu["average_usage"][share]) for share in CPU_BUSY)
    if (memory := system.get("memory_info")) is not None:
        values[names.SYSTEM_HOST_MEMORY_USED_BYTES] = float(memory["memory_used_bytes"])
    return values, errors


def _usable(groups: dict[str, Any], wanted: tuple[str, ...], errors: list[str]) -> dict[str, Any]:
    """The wanted metric groups present and without an error; the errors go to `errors`."""
    usable = {}
    for name in wanted:
        group = groups.get(name)
        if group is None:
            continue
        if group.get("error"):
            errors.append(f"{name}: {group['error']}")
        else:
            usable[name] = group
    return usable


def _core_values(counters: dict[str, Any] | None) -> dict[str, float]:
    if counters is None:
        return {}
    return {
        names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=core): float(data["neuroncore_utilization"])
        for core, data in (counters.get("neuroncores_in_use") or {}).items()
    }


def _memory_values(memory: dict[str, Any] | None) -> dict[str, float]:
    """The runtime's device and host totals, and its device memory by category summed over its cores."""
    if memory is None:
        return {}
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


def _execution_values(stats: dict[str, Any] | None) -> dict[str, float]:
    """Error and outcome counts of the period, and latency percentiles in ms (none in a period without executions)."""
    if stats is None:
        return {}
    values = {names.SYSTEM_NEURON_ERRORS.format(kind=kind): float(n) for kind, n in stats["error_summary"].items()}
    for outcome, count in stats["execution_summary"].items():
        values[names.SYSTEM_NEURON_EXECUTIONS.format(outcome=outcome)] = float(count)
    for kind, percentiles in (stats.get("latency_stats") or {}).items():
        for percentile, seconds in (percentiles or {}).items():
            key = names.SYSTEM_NEURON_LATENCY_MS.format(kind=kind.removesuffix("_latency"), percentile=percentile)
            values[key] = float(seconds) * 1000
    return values


def neuron_monitor_config(period_s: int) -> dict[str, Any]:
    """neuron-monitor's configuration: the groups read, for every Neuron application, every `period_s` s."""
    return {
        "period": f"{period_s}s",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": group} for group in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": group} for group in SYSTEM_GROUPS],
    }


# --- reading the host and the GPU ---


class HostReader:
    """The host's CPU busy share since the last reading, and its memory in use, from /proc."""

    def __init__(self) -> None:
        self._last = self._ticks()

    @staticmethod
    def _ticks() -> dict[str, int]:
        columns = PROC_STAT.read_text().splitlines()[0].split()[1 : 1 + len(PROC_STAT_COLUMNS)]
        return dict(zip(PROC_STAT_COLUMNS, map(int, columns), strict=True))

    def __call__(self) -> dict[str, float]:
        """One reading."""
        ticks = self._ticks()
        spent = {column: ticks[column] - self._last[column] for column in PROC_STAT_COLUMNS}
        self._last = ticks
        values = {names.SYSTEM_HOST_MEMORY_USED_BYTES: memory_used_bytes(PROC_MEMINFO.read_text())}
        if total := sum(spent.values()):
            values[names.SYSTEM_HOST_CPU_PCT] = 100 * sum(spent[share] for share in CPU_BUSY) / total
        return values


def memory_used_bytes(meminfo: str) -> float:
    """Memory in use from /proc/meminfo's text: total less what is available."""
    kib = {line.split(":")[0]: int(line.split()[1]) for line in meminfo.splitlines() if line.endswith("kB")}
    return float((kib["MemTotal"] - kib["MemAvailable"]) * 1024)


def gpu_values(utilization_pct: float, memory_used_bytes: float, power_mw: float) -> dict[str, float]:
    """NVML's readings of the job's GPU as metric values (NVML gives power in milliwatts)."""
    return {
        names.SYSTEM_GPU_UTILIZATION_PCT: float(utilization_pct),
        names.SYSTEM_GPU_MEMORY_USED_BYTES: float(memory_used_bytes),
        names.SYSTEM_GPU_POWER_W: power_mw / 1000,
    }


def nvml_reader(backend: Backend) -> Callable[[], dict[str, float]]:
    """A reader of the job's GPU, found by the UUID torch gives its device (NVML numbers GPUs its own way)."""
    import pynvml
    import torch

    uuid = str(torch.cuda.get_device_properties(backend.device).uuid)
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")

    def read() -> dict[str, float]:
        return gpu_values(
            pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            pynvml.nvmlDeviceGetMemoryInfo(handle).used,
            pynvml.nvmlDeviceGetPowerUsage(handle),
        )

    return read


# --- the samplers ---


class PollingSampler:
    """A thread of this process that reads every `period_s` seconds, and once more when stopped."""

    def __init__(self, period_s: int, readers: list[Callable[[], dict[str, float]]]) -> None:
        self.period_s = period_s
        self.readers = readers
        self.samples: list[SystemSample] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="system-monitor", daemon=True)

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.period_s) and self._read():
            pass

    def _read(self) -> bool:
        """One sample; False (and one warning) when a reader fails, which ends the sampling."""
        values: dict[str, float] = {}
        try:
            for read in self.readers:
                values.update(read())
        except Exception as err:  # noqa: BLE001  (a monitor never fails the job it watches)
            log.warning("system metrics: sampling stopped: %s: %s", type(err).__name__, err)
            self.readers = []
            return False
        if values:
            self.samples.append(SystemSample(time.time(), values))
        return True

    def stop(self) -> list[SystemSample]:
        """Stop, with a last sample for the part of a period since the one before."""
        self._stopped.set()
        self._thread.join()
        if self.readers:
            self._read()
        return self.samples


def _monitor_child(parent_pid: int) -> None:
    """In neuron-monitor's process before it runs: die with the measuring process, and leave Ctrl-C to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


class NeuronMonitorSampler:
    """`neuron-monitor` as a child process, its reports read by a thread of this process."""

    def __init__(self, period_s: int, config_file: Path) -> None:
        self.period_s = period_s
        self.config_file = config_file
        # the measuring process: its runtime is the job's, and neuron-monitor dies with it
        self.pid = os.getpid()
        self.samples: list[SystemSample] = []
        self._errors: set[str] = set()
        self._process: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._read, name="neuron-monitor-reader", daemon=True)

    def start(self) -> None:
        """Start neuron-monitor with the runner's configuration, and the thread that reads it."""
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(json.dumps(neuron_monitor_config(self.period_s), indent=2))
        self._process = subprocess.Popen(
            [NEURON_MONITOR, "-c", str(self.config_file)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=partial(_monitor_child, self.pid),  # signal set-up only, between fork and exec
        )
        self._thread.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                report = json.loads(line)
            except ValueError:  # a line that is not a report (a warning): not data
                continue
            try:
                values, errors = neuron_values(report, self.pid)
            except (AttributeError, KeyError, TypeError, ValueError) as err:
                errors, values = [f"a report not in the documented format ({type(err).__name__}: {err})"], {}
            for error in set(errors) - self._errors:
                log.warning("neuron-monitor reported: %s", error)
            self._errors.update(errors)
            if values:
                self.samples.append(SystemSample(time.time(), values))

    def stop(self) -> list[SystemSample]:
        """Stop neuron-monitor (terminate, then kill past the grace period) and keep what it reported."""
        assert self._process is not None
        if self._process.poll() is not None:
            log.warning("system metrics: neuron-monitor ended early (exit code %s)", self._process.returncode)
        end_process(self._process)
        self._thread.join()
        if self._process.stdout is not None:
            self._process.stdout.close()
        return self.samples


Sampler = PollingSampler | NeuronMonitorSampler


def make_sampler(plan: MonitorPlan, backend: Backend, folder: Path) -> Sampler:
    """The sampler the plan names; `folder` receives neuron-monitor's configuration file."""
    if plan.source == NEURON_MONITOR:
        return NeuronMonitorSampler(plan.period_s, folder / names.NEURON_MONITOR_CONFIG_FILE)
    readers: list[Callable[[], dict[str, float]]] = [HostReader()]
    if plan.source == "nvml":
        try:
            readers.append(nvml_reader(backend))
        except Exception as err:  # noqa: BLE001  (a monitor never fails the job it watches)
            log.warning("system metrics: NVML has no handle for this job's GPU (%s): only the host is sampled", err)
    return PollingSampler(plan.period_s, readers)


@contextmanager
def system_monitor(config: MonitorConfig, backend: Backend, folder: Path) -> Iterator[list[SystemSample]]:
    """Sample the system while the block runs in the measuring process; the list it yields holds the samples after.

    Off (monitor.period_s null), nothing is started and the list stays empty.
    """
    samples: list[SystemSample] = []
    plan = plan_monitor(config, backend.system_monitor)
    if plan is None:
        yield samples
        return
    if plan.missing:
        log.warning("system metrics: %s", plan.missing)
    sampler = make_sampler(plan, backend, folder)
    try:
        sampler.start()
    except OSError as err:  # a monitor never fails the job it watches
        log.warning("system metrics: %s did not start: %s", plan.source, err)
        yield samples
        return
    try:
        yield samples
    finally:
        samples.extend(sampler.stop())
