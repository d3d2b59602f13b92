"""The backend interface: every device decision (the runner never branches on the device), defaults for a host CPU."""

from __future__ import annotations

import json
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch.profiler import ProfilerActivity

from runner import names
from runner.backends.compile_cache import CompileCache
from runner.backends.monitor import MonitorPlan
from runner.backends.peaks import Peak
from runner.config import BackendConfig, ConfigError, ProfilerConfig, RunSpec


@dataclass(frozen=True)
class Slot:
    """A share of the machine for one of several concurrent jobs: environment variables it starts with."""

    name: str
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Placement:
    """Where a worker process runs: the cores it is pinned to (None: where the OS puts it) and torch's threads."""

    cores: tuple[int, ...] | None
    threads: int

    def take(self) -> None:
        """Pin this process and set torch's thread count, from inside it.

        A worker forked from a server inherits its cores and threads; environment variables reach it too late.
        """
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores)
        torch.set_num_threads(self.threads)

    def facts(self) -> dict[str, Any]:
        """The placement for the environment manifest."""
        return {"cores": None if self.cores is None else list(self.cores), "threads": self.threads}


WHOLE_MACHINE = Slot("the whole machine")
# what the console suggests when a run's timing is unstable: at least this many worker processes or repeats
_ADVISED_PROCESSES = _ADVISED_REPEATS = 5


def more_repeats(spec: RunSpec) -> str:
    """Advice for a job that cannot have (more) worker processes: more repeats of its phases."""
    return f"more repeats (measure.repeats={max(_ADVISED_REPEATS, 2 * spec.measure.repeats)})"


def check_cache_flush(spec: RunSpec, backend: type[Backend]) -> None:
    """Refuse measure.flush_cache where the host's clock times each step: the flush is for a device's cache.

    Raises:
        ConfigError: naming the key and the backends that flush.
    """
    if spec.measure.flush_cache and backend.traits.step_clock == names.STEP_CLOCK_HOST:
        raise ConfigError(
            f"measure.flush_cache=true: backend={backend.traits.name} times each step by the host's clock, with "
            "nothing to flush between steps; it is for a device timed by its own events (backend=cuda)"
        )


@dataclass
class CaptureReport:
    """What a backend found in its capture after the profiled window."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    # extra text artifacts: file name -> content
    texts: dict[str, str] = field(default_factory=dict)
    # the console's lines under the job's summary
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryHistory:
    """A device's allocation history in torch.cuda.memory's form, which PyTorch's memory_viz opens.

    `module` has `_record_memory_history(enabled=None | "all", **options)` and `_dump_snapshot(filename)`.
    """

    module: Any
    options: dict[str, Any]
    # what the console and the `memory.source` tag call it
    source: str


class CaptureIncomplete(RuntimeError):
    """A trace file was not written whole (a full disk, most often): the run must not pass as FINISHED."""


def require_complete_traces(capture_dir: Path) -> None:
    """Refuse leftovers of an export cut short: `*.tmp` files, or `*.json` traces that do not parse.

    On a full disk torch's exporter prints "Failed to write to log file!", leaves `trace.json.tmp` and raises nothing.

    Raises:
        CaptureIncomplete: naming the first broken file and the free space left.
    """
    if not capture_dir.is_dir():
        return
    for path in sorted(capture_dir.rglob("*")):
        broken = path.suffix == ".tmp"
        if path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except (OSError, ValueError):
                broken = True
        if broken:
            path.unlink(missing_ok=True)  # the run fails; what it wrote of the trace is no use to anyone
            free = shutil.disk_usage(capture_dir).free / 2**20
            raise CaptureIncomplete(
                f"the profiler's trace {path} was cut short and is removed "
                f"({free:.1f} MiB free on its disk; is it full?)"
            )


@dataclass(frozen=True)
class DeviceTraits:
    """What a device declares once, for its class: the defaults suit a host CPU."""

    # the config name (`backend.name`)
    name: str
    compile_backend: str = "inductor"
    # the torch.distributed process-group backend
    collective_backend: str = "gloo"
    # measure.processes when null: three fresh processes give a spread to test (README, "Numbers you can trust")
    default_processes: int = 3
    # RUNNER_LAYOUTS when unset: one, where moving the workload's memory was not measured to matter
    default_layouts: int = 1
    # whether a round's workers may be alive at once, taking turns (runner.measure.turns): a Neuron
    # worker holds its NeuronCores for life, a GPU one a context and the workload; measured on the CPU only
    workers_take_turns: bool = False
    # what times the steady state's steps: the host's clock around each synchronized step, or the
    # device's own events around steps launched back to back (`Backend.time_steps`); names.STEP_CLOCK_*
    step_clock: str = names.STEP_CLOCK_HOST
    # torch.profiler activities that cover this device
    activities: tuple[ProfilerActivity, ...] = (ProfilerActivity.CPU,)
    # the job folder's subfolder the profiler writes to, logged as an artifact folder of the same name
    capture_folder: str = names.TRACE_FOLDER
    # whether host-only profiler sessions may measure the profiler's own cost: they must start no device capture
    measures_profiler_cost: bool = True
    # what the workers' fork server imports for workers that torch.compile, so that each need not (seconds)
    compiler_preload: tuple[str, ...] = ("torch._dynamo", "torch._inductor.compile_fx")
    # what the environment manifest records for this device: variables (by prefix), Python and system packages
    manifest_env_prefixes: tuple[str, ...] = ()
    manifest_packages: tuple[str, ...] = ("torch",)
    manifest_system_packages: tuple[str, ...] = ()
    # Config keys this device reads once per process, with what reads them: a later job runs on the first's values
    process_keys: Mapping[str, str] = field(default_factory=dict)
    # Config keys that need a process no job has measured in unless they hold the value given, with why
    fresh_process_keys: Mapping[str, tuple[object, str]] = field(
        default_factory=lambda: {
            "measure.compile_cache": (None, "torch's in-memory compile caches answer before the cache folders"),
        }
    )


class Backend(ABC):
    """One device kind. Subclasses override what differs from a host CPU."""

    # what this device declares, fixed for its class
    traits: ClassVar[DeviceTraits]
    # the compile caches this device's compilations fill, what bypasses them, how a cache job counts its lookups
    compile_cache: ClassVar[CompileCache] = CompileCache()

    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    @classmethod
    @abstractmethod
    def available(cls) -> bool:
        """Whether this machine has the device (without starting its runtime)."""

    @classmethod
    def plan_slots(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """The machine split for `jobs` concurrent jobs (0: as many as fit); one job gets it whole."""
        return [WHOLE_MACHINE] if jobs == 1 else cls.split_machine(config, jobs, pool, cores_per_job)

    @classmethod
    @abstractmethod
    def split_machine(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """Shares for several concurrent jobs (0: as many as fit), one per job."""

    @classmethod
    def worker_processes(cls, requested: int | None, ranks: int = 1) -> int:
        """How many fresh processes time the steady state (0: the job's own process).

        Raises:
            ConfigError: this device cannot serve that many, or the job runs as several ranks (each times its own).
        """
        if requested and ranks > 1:
            raise ConfigError(
                f"measure.processes={requested}: with distributed.ranks={ranks} each rank times its "
                "steps in its own process; use measure.processes=0 and measure.repeats for a spread"
            )
        return cls.traits.default_processes if requested is None else requested

    def steadier_measurement(self, spec: RunSpec) -> str:
        """What to rerun an unstable job with: more worker processes (for ranks or copies, more repeats)."""
        if spec.distributed.ranks > 1 or spec.measure.copies is not None:
            return more_repeats(spec)
        processes = max(_ADVISED_PROCESSES, 2 * (spec.measure.processes or 0))
        return f"more worker processes (measure.processes={processes})"

    def concurrent_slots(self, count: int, key: str = "measure.copies") -> list[Slot]:
        """A share of the machine for each of `count` processes at once: copies, or ranks.

        Raises:
            ConfigError: naming `key`, when the machine has fewer shares than that.
        """
        slots = self.copy_slots(count)
        if len(slots) < count:
            raise ConfigError(
                f"{key}={count}: {self.traits.name} has {len(slots)} share(s) to run them on "
                f"({'; '.join(slot.name for slot in slots)})"
            )
        return slots[:count]

    def take_slot(self, slot: Slot) -> None:
        """Pin a process the runner did not start (a Slurm task) to `slot`, before it touches the device."""
        os.environ.update(dict(slot.env))

    def copy_slots(self, copies: int) -> list[Slot]:
        """The shares copies can run on: the machine split as for concurrent jobs."""
        return self.split_machine(self.config, copies, None, 1)

    @classmethod
    def worker_placement(cls, config: BackendConfig, number: int, slot: Slot = WHOLE_MACHINE) -> Placement | None:
        """Where steady-state worker `number` (from 1), or the copy on `slot`, runs; None: as it starts."""
        return None

    def match_workers(self) -> None:  # noqa: B027  (a no-op default, by design)
        """Run this process's own steps (first call, profiled window) as its workers run theirs."""

    def placement_facts(self, spec: RunSpec) -> dict[str, Any]:
        """The placement of the job's steady-state workers or copies, for the environment manifest."""
        return {}

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """The torch device tensors and the module are moved to."""

    @abstractmethod
    def device_name(self) -> str:
        """A human-readable name of the device, for tags and the console."""

    def placement(self) -> str:
        """The share of the device this job got, for its tag and console line."""
        return self.device_name()

    def synchronize(self) -> None:  # noqa: B027  (a no-op default, by design)
        """Wait for queued device work; the default device has none."""

    def synchronized_steps(self, step: Callable[[], object], count: int) -> list[float]:
        """`count` steps' wall times in ms, each synchronized and timed alone: what the host waits for one step."""
        times = []
        for _ in range(count):
            self.synchronize()
            start = time.perf_counter()
            step()
            self.synchronize()
            times.append((time.perf_counter() - start) * 1000)
        return times

    def time_steps(self, step: Callable[[], object], count: int, flush_cache: bool) -> list[float]:
        """The steady state's times of `count` steps in ms, by `traits.step_clock`: here the synchronized steps'.

        On a host CPU the step is the device's work: nothing is queued that a synchronize would wait for.
        `flush_cache` is refused before a job runs where `traits.step_clock` is the host's (runner.execute.plan).
        """
        return self.synchronized_steps(step, count)

    def profiler_kwargs(self, profiler: ProfilerConfig, capture_dir: Path) -> dict[str, Any]:
        """Extra torch.profiler.profile arguments: here, an exporter of each cycle's trace; every cycle's events kept.

        Kept even for one cycle: torch 2.11 then warns that it clears events at each cycle's end
        (a warning torch 2.13 fires only where cycles repeat).
        """

        def write(prof: torch.profiler.profile) -> None:
            # the step() that ends a cycle calls this after counting the next step: the cycle's last is one before
            # (the folder of ProfilerStep#3 is iteration_3; the runner's loop ends every cycle with a step() call)
            out = capture_dir / names.TRACE_ITER_FOLDER.format(step=prof.step_num - 1)
            out.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(out / names.TRACE_FILE))

        return {"on_trace_ready": write, "acc_events": True}

    def inspect_capture(
        self, capture_dir: Path, profiler: ProfilerConfig, profiler_output: str, framework_device_ms: float
    ) -> CaptureReport:
        """Check that every trace was written whole; `framework_device_ms` is key_averages()'s device time.

        Raises:
            CaptureIncomplete: a trace is truncated or was never moved into place.
        """
        require_complete_traces(capture_dir)
        return CaptureReport()

    @classmethod
    def system_sampler(cls, period_s: int) -> MonitorPlan:
        """What samples the system series every `period_s` s (runner.execute.monitor), probed: here the host's /proc."""
        return MonitorPlan("host", period_s)

    def manifest(self) -> dict[str, Any]:
        """Device facts for the environment manifest."""
        return {}

    def reset_peak_memory(self) -> None:  # noqa: B027  (a no-op default, by design)
        """Start the device allocator's peak statistic afresh, where there is one."""

    def peak_memory_bytes(self) -> int | None:
        """Peak device memory allocated since the reset, or None without an allocator statistic."""
        return None

    def memory_history(self) -> MemoryHistory | None:
        """The device's allocation history API, None where it has none (the CPU: the profiler's memory events serve)."""
        return None

    def peak(self, dtype: str) -> Peak | None:
        """The roofline ceilings of the share of the device this job runs on; None when unknown."""
        return None

    def ranks_cores(self) -> list[int]:
        """The cores of this node's ranks where one chip holds several (NeuronCores); else none: one device per rank."""
        return []

    def compiled_artifact_count(self) -> int | None:
        """Compiled programs in the backend's cache (Neuron NEFFs); None where there is no such cache."""
        return None
