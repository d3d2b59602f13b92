"""A job's system metrics, sampled while its phases measure (`monitor.period_s`): the host, and the device's monitor.

The backend plans it (`Backend.system_sampler`): the host's /proc, with a reader of the device beside it, or
the device's own monitor tool (also when the device's is missing, the host alone). Nothing outlives the
measurement: a tool's reader process is stopped however the phases end, and killed with the measuring
process (`die_with_parent`); the rest is a thread.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from runner import names
from runner.backends.base import Backend
from runner.backends.monitor import CPU_BUSY, MonitorPlan, MonitorTool, Reader
from runner.config import MonitorConfig
from runner.execute import monitor_reader
from runner.execute.processes import end_process
from runner.measure.result import SystemSample

log = logging.getLogger(__name__)

# /proc/stat's first eight columns in order, by neuron-monitor's names
_PROC_STAT_COLUMNS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq", "steal")


def plan_monitor(config: MonitorConfig, backend: Backend | type[Backend]) -> MonitorPlan | None:
    """The backend's sampler, probed (nothing is started); None when monitor.period_s is off."""
    return None if config.period_s is None else backend.system_sampler(config.period_s)


class _HostReader:
    """The host's CPU busy share since the last reading, and its memory in use, from /proc."""

    def __init__(self) -> None:
        self._last = self._ticks()

    @staticmethod
    def _ticks() -> dict[str, int]:
        columns = Path("/proc/stat").read_text().splitlines()[0].split()[1 : 1 + len(_PROC_STAT_COLUMNS)]
        return dict(zip(_PROC_STAT_COLUMNS, map(int, columns), strict=True))

    def __call__(self) -> dict[str, float]:
        """One reading."""
        ticks = self._ticks()
        spent = {column: ticks[column] - self._last[column] for column in _PROC_STAT_COLUMNS}
        self._last = ticks
        values = {names.SYSTEM_HOST_MEMORY_USED_BYTES: memory_used_bytes(Path("/proc/meminfo").read_text())}
        if total := sum(spent.values()):
            values[names.SYSTEM_HOST_CPU_PCT] = 100 * sum(spent[share] for share in CPU_BUSY) / total
        return values


def memory_used_bytes(meminfo: str) -> float:
    """Memory in use from /proc/meminfo's text: total less what is available."""
    kib = {line.split(":")[0]: int(line.split()[1]) for line in meminfo.splitlines() if line.endswith("kB")}
    return float((kib["MemTotal"] - kib["MemAvailable"]) * 1024)


class PollingSampler:
    """A thread of this process that reads every `period_s` seconds, and once more when stopped."""

    def __init__(self, period_s: int, readers: list[Reader]) -> None:
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


class ToolSampler:
    """A device's monitor tool under a reader process (`runner.execute.monitor_reader`): parsing here cost CPU."""

    def __init__(self, tool: MonitorTool, period_s: int, folder: Path) -> None:
        self.tool = tool
        self.period_s = period_s
        self.config_file = folder / tool.CONFIG_FILE
        self.samples_file = folder / tool.SAMPLES_FILE
        # each error the tool reported, once (known when stopped)
        self.errors: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the reader, which starts the tool with the runner's configuration."""
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(json.dumps(self.tool.config(self.period_s), indent=2))
        self.samples_file.unlink(missing_ok=True)
        job = os.getpid()  # the measuring process: its runtime is the job's, and the reader dies with it
        reader = [monitor_reader.__name__, self.tool.__name__, str(job), str(self.config_file), str(self.samples_file)]
        self._process = subprocess.Popen(
            [sys.executable, "-m", *reader],
            stdin=subprocess.DEVNULL,
            preexec_fn=partial(monitor_reader.in_child, job),  # signal set-up only, between fork and exec
        )

    def stop(self) -> list[SystemSample]:
        """Stop the reader (it stops the tool) and read what it kept; each error reported is warned of once."""
        assert self._process is not None
        if self._process.poll() is not None:
            log.warning("system metrics: %s ended early (exit code %s)", self.tool.NAME, self._process.returncode)
        end_process(self._process)
        lines = self.samples_file.read_text().split("\n")[:-1] if self.samples_file.is_file() else []
        samples = [json.loads(line) for line in lines]  # whole lines only: a reader killed mid-line leaves a part
        self.errors = list(dict.fromkeys(error for sample in samples for error in sample["errors"]))
        for error in self.errors:
            log.warning("%s reported: %s", self.tool.NAME, error)
        return [SystemSample(sample["time"], sample["values"]) for sample in samples if sample["values"]]


def make_sampler(plan: MonitorPlan, backend: Backend, folder: Path) -> PollingSampler | ToolSampler:
    """The sampler the plan names; `folder` receives a tool's configuration and its samples."""
    if plan.tool is not None:
        return ToolSampler(plan.tool, plan.period_s, folder)
    readers: list[Reader] = [_HostReader()]
    if plan.device_reader is not None:
        try:
            readers.append(plan.device_reader(backend.device))
        except Exception as err:  # noqa: BLE001  (a monitor never fails the job it watches)
            log.warning("system metrics: %s: only the host is sampled", err)
    return PollingSampler(plan.period_s, readers)


@contextmanager
def system_monitor(config: MonitorConfig, backend: Backend, folder: Path) -> Iterator[list[SystemSample]]:
    """Sample the system while the block runs (not when monitor.period_s is null); the list holds the samples after."""
    samples: list[SystemSample] = []
    sampler = None
    if (plan := plan_monitor(config, backend)) is not None:
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
