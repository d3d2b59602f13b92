"""What samples a job's system series, as each backend plans it; `runner.execute.monitor` runs the plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

# one reading of the system: metric name (system/...) -> value
Reader = Callable[[], dict[str, float]]
# the shares of a CPU's time that count as busy, in neuron-monitor's names (/proc/stat's columns are named so too)
CPU_BUSY = ("user", "nice", "system", "irq", "soft_irq")


class MonitorTool(Protocol):
    """A device's own monitor tool, a module: run and read by a process of its own (runner.execute.monitor_reader)."""

    # the module's name, which the reader process imports
    __name__: str
    # the tool's name (the plan's source) and the system package it comes with (the manifest reads its version)
    NAME: str
    PACKAGE: str
    # the tool's configuration and the reader's samples, in the job's folder
    CONFIG_FILE: str
    SAMPLES_FILE: str

    def config(self, period_s: int) -> dict[str, Any]:
        """The tool's configuration, reporting every `period_s` s."""

    def command(self, config_file: str) -> list[str]:
        """What runs the tool with that configuration."""

    def figures(self, line: str, pid: int) -> dict[str, Any] | None:
        """One line of its output as a sample line (time, values of process `pid`, errors); None: not a report."""


@dataclass(frozen=True)
class MonitorPlan:
    """What samples this job's system metrics, every how many seconds, and why not the device's monitor."""

    # "neuron-monitor", "nvml" or "host"
    source: str
    period_s: int
    # the sampler's version where it has one (the manifest adds a tool's package version)
    version: str | None = None
    # one line when the backend's monitor is not there (the host is sampled instead)
    missing: str = ""
    # a reader of the job's device beside the host's; it may raise (then the host alone is sampled)
    device_reader: Callable[[torch.device], Reader] | None = field(default=None, compare=False)
    # the device's own monitor, which samples the host too, in a process of its own
    tool: MonitorTool | None = field(default=None, compare=False)

    def facts(self) -> dict[str, Any]:
        """For the manifest (environment.json)."""
        return {"source": self.source, "period_s": self.period_s, "version": self.version, "missing": self.missing}
