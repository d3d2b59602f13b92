"""A job's system metrics, sampled while its phases measure (`monitor.period_s`): the host, and the device's monitor.

The backend's `system_monitor` names it: `neuron-monitor`, NVML, else /proc (also when the device's
is missing). Nothing outlives the measurement: neuron-monitor's reader process is stopped however
the phases end, and killed with the measuring process (`die_with_parent`); the rest is a thread.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from runner import names
from runner.backends.base import Backend
from runner.backends.neuron_tools import neuron_tool
from runner.config import MonitorConfig
from runner.execute import monitor_reader
from runner.execute.monitor_reader import CPU_BUSY, NEURON_MONITOR, RUNTIME_GROUPS, SYSTEM_GROUPS
from runner.execute.processes import end_process
from runner.measure.result import SystemSample

log = logging.getLogger(__name__)

# the package neuron-monitor comes with; its version is the monitor's (the manifest reads it)
NEURON_MONITOR_PACKAGE = "aws-neuronx-tools"
NVML_PACKAGE = "nvidia-ml-py"
# /proc/stat's first eight columns in order, by neuron-monitor's names
PROC_STAT_COLUMNS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq", "steal")


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
        return asdict(self)


def plan_monitor(config: MonitorConfig, monitor: str) -> MonitorPlan | None:
    """The sampler for a backend's `system_monitor`, probed (nothing is started); None when monitor.period_s is off."""
    if config.period_s is None:
        return None
    period = config.period_s
    if monitor == NEURON_MONITOR:
        if neuron_tool(NEURON_MONITOR) is None:
            why = f"{NEURON_MONITOR} is not installed (it comes with {NEURON_MONITOR_PACKAGE})"
            return MonitorPlan("host", period, missing=f"{why}: only the host's CPU and memory are sampled")
        return MonitorPlan(NEURON_MONITOR, period)
    if monitor == "nvml":
        try:
            return MonitorPlan("nvml", period, nvml_version())
        except (ImportError, RuntimeError) as err:
            return MonitorPlan("host", period, missing=f"NVML is not usable ({err}): only the host is sampled")
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


def neuron_monitor_config(period_s: int) -> dict[str, Any]:
    """neuron-monitor's configuration: the groups read, for every Neuron application, every `period_s` s."""
    return {
        "period": f"{period_s}s",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": group} for group in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": group} for group in SYSTEM_GROUPS],
    }


class HostReader:
    """The host's CPU busy share since the last reading, and its memory in use, from /proc."""

    def __init__(self) -> None:
        self._last = self._ticks()

    @staticmethod
    def _ticks() -> dict[str, int]:
        columns = Path("/proc/stat").read_text().splitlines()[0].split()[1 : 1 + len(PROC_STAT_COLUMNS)]
        return dict(zip(PROC_STAT_COLUMNS, map(int, columns), strict=True))

    def __call__(self) -> dict[str, float]:
        """One reading."""
        ticks = self._ticks()
        spent = {column: ticks[column] - self._last[column] for column in PROC_STAT_COLUMNS}
        self._last = ticks
        values = {names.SYSTEM_HOST_MEMORY_USED_BYTES: memory_used_bytes(Path("/proc/meminfo").read_text())}
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


class NeuronMonitorSampler:
    """`neuron-monitor` under a reader process (`runner.execute.monitor_reader`): parsing here cost the job CPU."""

    def __init__(self, period_s: int, folder: Path) -> None:
        self.period_s = period_s
        self.config_file = folder / names.NEURON_MONITOR_CONFIG_FILE
        self.samples_file = folder / names.NEURON_MONITOR_SAMPLES_FILE
        # each error neuron-monitor reported, once (known when stopped)
        self.errors: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the reader, which starts neuron-monitor with the runner's configuration."""
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(json.dumps(neuron_monitor_config(self.period_s), indent=2))
        self.samples_file.unlink(missing_ok=True)
        job = os.getpid()  # the measuring process: its runtime is the job's, and the reader dies with it
        self._process = subprocess.Popen(
            [sys.executable, "-m", monitor_reader.__name__, str(job), str(self.config_file), str(self.samples_file)],
            stdin=subprocess.DEVNULL,
            preexec_fn=partial(monitor_reader.in_child, job),  # signal set-up only, between fork and exec
        )

    def stop(self) -> list[SystemSample]:
        """Stop the reader (it stops neuron-monitor) and read what it kept; each error reported is warned of once."""
        assert self._process is not None
        if self._process.poll() is not None:
            log.warning("system metrics: neuron-monitor ended early (exit code %s)", self._process.returncode)
        end_process(self._process)
        lines = self.samples_file.read_text().split("\n")[:-1] if self.samples_file.is_file() else []
        samples = [json.loads(line) for line in lines]  # whole lines only: a reader killed mid-line leaves a part
        self.errors = list(dict.fromkeys(error for sample in samples for error in sample["errors"]))
        for error in self.errors:
            log.warning("neuron-monitor reported: %s", error)
        return [SystemSample(sample["time"], sample["values"]) for sample in samples if sample["values"]]


def make_sampler(plan: MonitorPlan, backend: Backend, folder: Path) -> PollingSampler | NeuronMonitorSampler:
    """The sampler the plan names; `folder` receives neuron-monitor's configuration and its samples."""
    if plan.source == NEURON_MONITOR:
        return NeuronMonitorSampler(plan.period_s, folder)
    readers: list[Callable[[], dict[str, float]]] = [HostReader()]
    if plan.source == "nvml":
        try:
            readers.append(nvml_reader(backend))
        except Exception as err:  # noqa: BLE001  (a monitor never fails the job it watches)
            log.warning("system metrics: NVML has no handle for this job's GPU (%s): only the host is sampled", err)
    return PollingSampler(plan.period_s, readers)


@contextmanager
def system_monitor(config: MonitorConfig, backend: Backend, folder: Path) -> Iterator[list[SystemSample]]:
    """Sample the system while the block runs (not when monitor.period_s is null); the list holds the samples after."""
    samples: list[SystemSample] = []
    sampler = None
    if (plan := plan_monitor(config, backend.system_monitor)) is not None:
        if plan.missing:
            log.warning("system metrics: %s", plan.missing)
        sampler = make_sampler(plan, backend, folder)
        try:
            sampler.start()
        except OSError as err:  # a monitor never fails the job it watches
            log.warning("system metrics: %s did not start: %s", plan.source, err)
            sampler = None
    try:
        yield samples
    finally:
        if sampler is not None:
            samples.extend(sampler.stop())
