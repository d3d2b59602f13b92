"""backend=neuron: AWS Trainium through TorchNeuron's documented profiling API (README, "On Trainium").

The runtime's rules (Neuron documentation): `NEURON_RT_VISIBLE_CORES` is one contiguous range, set before
the runtime starts; the process that starts it reserves every visible core, so concurrent jobs each need
their own; `device_count()` caches its first answer. A job runs, captures and counts one NeuronCore.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from runner import names
from runner.backends import neuron_monitor
from runner.backends.base import (
    Backend,
    CaptureReport,
    DeviceTraits,
    MemoryHistory,
    Slot,
    more_repeats,
    require_complete_traces,
)
from runner.backends.cores import (
    VIRTUAL_CORE_SIZE_ENV,
    consecutive_runs,
    format_cores,
    lnc_check,
    logical_nc_config,
    parse_core_range,
    parse_cores,
)
from runner.backends.monitor import MonitorPlan
from runner.backends.neuron_cache import DEFAULT_NEFF_CACHE, NEFF_CACHE_ENV, NeuronCompileCache
from runner.backends.neuron_capture import check_capture, explorer_summary, session_dirs
from runner.backends.neuron_coverage import device_time_coverage, driver_events
from runner.backends.neuron_fallback import count_fallbacks_from_now, note_cpu_fallbacks
from runner.backends.neuron_tools import neuron_tool
from runner.backends.peaks import Peak, datasheet_peak
from runner.backends.user_env import ASYNC_NRT_ENV, set_by_user
from runner.config import BackendConfig, ConfigError, NeuronBackendConfig, ProfilerConfig, RunSpec

log = logging.getLogger(__name__)

# env-var capture, which conflicts with torch.profiler's: the runner refuses to run with it
_INSPECT_ENV = "NEURON_RT_INSPECT_ENABLE"
# the runtime's implicit async mode, gone since Neuron SDK 2.31: setting it only draws the runtime's warning
INFLIGHT_ENV = "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS"
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
# where Explorer gives the physical NeuronCores per logical one (profile-schema-reference.rst, Metadata)
_EXPLORER_LNC = "Explorer's Metadata.num_physical_cores"
DMI_PRODUCT = Path("/sys/devices/virtual/dmi/id/product_name")
DRIVER_VERSION = Path("/sys/module/neuron/version")
# the allocation history calls a memory snapshot needs (runner.backends.base.MemoryHistory)
_SNAPSHOT_CALLS = ("_record_memory_history", "_dump_snapshot")
# NeuronCores a job's work executes on: the module and inputs live on "neuron", the first visible core
_EXECUTING_CORES = 1


def torch_neuron() -> Any:
    """`torch.neuron`, which torch-neuronx registers at import; torch's type stubs lack it."""
    return getattr(torch, "neuron")  # noqa: B009


def instance_type() -> str | None:
    """The EC2 instance type (e.g. trn1.32xlarge) from DMI, without touching the network."""
    with suppress(OSError):
        return DMI_PRODUCT.read_text().strip() or None
    return None


def trainium_generation() -> str:
    """trn1, trn2 or trn3 from the instance type (trn1n, trn2u: trn1, trn2); Trn2 where it is unreadable."""
    return (instance_type() or "trn2").split(".")[0].rstrip("nu")


def visible_cores() -> list[int]:
    """The NeuronCores NEURON_RT_VISIBLE_CORES lets this process use, else every one (a cached device_count())."""
    visible = os.environ.get(VISIBLE_CORES_ENV)
    return parse_cores(visible, VISIBLE_CORES_ENV) if visible else list(range(torch_neuron().device_count()))


def _contiguous_groups(cores: list[int], size: int) -> list[list[int]]:
    """Split sorted cores into groups of `size` consecutive cores, never across a gap."""
    return [run[i : i + size] for run in consecutive_runs(cores) for i in range(0, len(run) - size + 1, size)]


class NeuronBackend(Backend):
    """Trainium NeuronCores through torch-neuronx (TorchNeuron, PrivateUse1 device 'neuron')."""

    traits = DeviceTraits(
        # torch_neuronx registers the "neuron" process-group backend; PrivateUse1: the runtime's and device's activity
        name="neuron",
        compile_backend="neuron",
        collective_backend="neuron",
        activities=(ProfilerActivity.CPU, ProfilerActivity.PrivateUse1),
        # NeuronConfig.profile_output_dir: the job's own folder; a host-only session would start a runtime capture
        # too: the Neuron profiler maps Kineto's CPU_OP to the runtime's cpu_util (neuron-profiling.md §1.5),
        # written to ./output
        capture_folder=names.NEURON_PROFILE_FOLDER,
        measures_profiler_cost=False,
        manifest_env_prefixes=("NEURON_", "XLA_", "TORCH_NEURONX_", "NEURONX_"),
        manifest_packages=(*DeviceTraits.manifest_packages, "torch-neuronx", "neuronx-cc", "nki", "libneuronxla"),
        # Debian/RPM packages of the Neuron runtime, tools and driver
        manifest_system_packages=(
            "aws-neuronx-runtime-lib",
            "aws-neuronx-tools",
            "aws-neuronx-dkms",
            "aws-neuronx-collectives",
        ),
        # NRT is "controlled through environment variables at the process level" (its configuration guide)
        process_keys={
            "backend.cores": f"the Neuron runtime reads {VISIBLE_CORES_ENV} once and holds those NeuronCores",
            "backend.async_runtime": f"torch-neuronx reads {ASYNC_NRT_ENV} once per process",
        },
        fresh_process_keys={
            "measure.compile_cache": (
                None,
                f"torch-neuronx reads {NEFF_CACHE_ENV} once per process and torch's "
                "in-memory compile caches answer before the cache folders",
            ),
            "measure.copies": (None, "the copies need NeuronCores an earlier job's runtime in this process may hold"),
            "distributed.ranks": (1, "the ranks need NeuronCores an earlier job's runtime in this process may hold"),
        },
    )
    config: NeuronBackendConfig
    compile_cache = NeuronCompileCache()

    @classmethod
    def available(cls) -> bool:
        """torch-neuronx is installed and sees a NeuronCore (neither check starts the runtime)."""
        try:
            import torch_neuronx  # noqa: F401
        except ImportError:
            return False
        return hasattr(torch, "neuron") and bool(torch_neuron().is_available())

    @classmethod
    def system_sampler(cls, period_s: int) -> MonitorPlan:
        """The Neuron tools' neuron-monitor: NeuronCores, device memory, the runtime's latency and errors, the host."""
        if neuron_tool(neuron_monitor.NAME) is None:
            why = f"{neuron_monitor.NAME} is not installed (it comes with {neuron_monitor.PACKAGE})"
            return MonitorPlan("host", period_s, missing=f"{why}: only the host's CPU and memory are sampled")
        return MonitorPlan(neuron_monitor.NAME, period_s, tool=neuron_monitor)

    @classmethod
    def split_machine(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """`cores_per_job` contiguous NeuronCores per job out of the pool: no two jobs' runtimes may share one.

        Raises:
            ConfigError: backend.cores is set (it pins one job), or the pool is too small.
        """
        pinned = NeuronBackendConfig.of(config).cores
        if pinned is not None:
            raise ConfigError(
                f"backend.cores={pinned} pins a single job; with several jobs at once give the cores to share "
                "as hydra.launcher.cores (each job gets hydra.launcher.cores_per_job of them)"
            )
        cores = parse_cores(pool, "hydra.launcher.cores") if pool is not None else visible_cores()
        groups = _contiguous_groups(cores, cores_per_job)
        if not groups:
            raise ConfigError(
                f"hydra.launcher.cores_per_job={cores_per_job} but the pool {format_cores(cores)} "
                "has no run of that many consecutive NeuronCores"
            )
        return [
            Slot(f"NeuronCores {format_cores(group)}", ((VISIBLE_CORES_ENV, format_cores(group)),))
            for group in groups[: jobs or len(groups)]
        ]

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(NeuronBackendConfig.of(config))
        if os.environ.get(_INSPECT_ENV, "0") not in ("", "0"):
            raise ConfigError(
                f"{_INSPECT_ENV}={os.environ[_INSPECT_ENV]} is set: env-var capture conflicts with torch.profiler; "
                "unset it (the runner configures capture through profiler.modes)"
            )
        if INFLIGHT_ENV in os.environ:
            log.warning(
                "%s=%s is set but enables nothing since Neuron SDK 2.31 (removed in 2.32; the runtime only warns); "
                "unset it: queue depth is measure.inflight with backend.async_runtime",
                INFLIGHT_ENV,
                os.environ[INFLIGHT_ENV],
            )
        self.runtime_settings = self._set_async_runtime(self.config.async_runtime)
        logical_nc_config(trainium_generation())  # a bad NEURON_LOGICAL_NC_CONFIG is refused before the runtime starts
        try:
            import torch_neuronx.profiling  # noqa: F401  (autoload registers torch.neuron; profiling is explicit)
        except ImportError:
            raise ConfigError(
                "backend=neuron needs torch-neuronx, which is not installed here; "
                "install the runner into the Neuron virtual environment, or choose backend=auto|cpu|cuda"
            ) from None
        if not torch_neuron().is_available():
            raise ConfigError("backend=neuron: torch-neuronx sees no NeuronCore on this machine")
        count_fallbacks_from_now()
        self.cores = self._pin_cores(self.config.cores)
        self.correlate_status = "unset"

    @staticmethod
    def _set_async_runtime(async_runtime: bool | None) -> dict[str, str]:
        """Put backend.async_runtime in the environment before the runtime starts; return each source, for the manifest.

        torch-neuronx sets its own default at `import torch` (backend autoload), before this: the
        runner's entry noted what the user had set.
        """
        if async_runtime is not None:
            os.environ[ASYNC_NRT_ENV] = str(int(async_runtime))
            source = "backend config"
        elif set_by_user(ASYNC_NRT_ENV):
            source = "environment"
        else:
            source = "set by torch-neuronx at import; documented default 0"
        value = os.environ.get(ASYNC_NRT_ENV)
        settings = {ASYNC_NRT_ENV: "unset" if value is None else f"{value} ({source})"}
        if INFLIGHT_ENV in os.environ:
            settings[INFLIGHT_ENV] = f"{os.environ[INFLIGHT_ENV]} (environment; enables nothing since Neuron SDK 2.31)"
        return settings

    @classmethod
    def worker_processes(cls, requested: int | None, ranks: int = 1) -> int:
        """Always the job's own process (or each rank's own): it holds the NeuronCores, lent to one process at a time.

        Raises:
            ConfigError: measure.processes asks for worker processes.
        """
        if requested:
            raise ConfigError(
                f"measure.processes={requested}: a NeuronCore serves one process at a time and this job's process "
                "holds it; use measure.processes=0 (the default on neuron) and measure.repeats for a spread"
            )
        return 0

    def steadier_measurement(self, spec: RunSpec) -> str:
        """More repeats: the job's process holds its NeuronCores, so there are no worker processes to add."""
        return more_repeats(spec)

    def copy_slots(self, copies: int) -> list[Slot]:
        """One NeuronCore per copy, out of the job's own: they run before its process starts the runtime."""
        pool = format_cores(self.cores) if self.cores else None
        return self.split_machine(self.config.unpinned(), copies, pool, _EXECUTING_CORES)

    def _pin_cores(self, spec: str | None) -> list[int] | None:
        """The cores this job owns (backend.cores, pinned here, else a launcher's pin); None: every visible core."""
        visible = os.environ.get(VISIBLE_CORES_ENV)
        if spec is None:
            return parse_core_range(visible, VISIBLE_CORES_ENV) if visible else None
        cores = parse_core_range(spec, "backend.cores")
        existing = visible_cores()
        missing = [c for c in cores if c not in existing]
        if missing:
            absent = f"are not in {VISIBLE_CORES_ENV}={visible}" if visible else "do not exist here"
            raise ConfigError(
                f"backend.cores={spec}: NeuronCore(s) {format_cores(missing)} {absent}; "
                f"this job can use {format_cores(existing)}"
            )
        os.environ[VISIBLE_CORES_ENV] = format_cores(cores)
        log.info("pinned to NeuronCores %s (%s)", format_cores(cores), VISIBLE_CORES_ENV)
        return cores

    @property
    def device(self) -> torch.device:
        """The 'neuron' PrivateUse1 device (the first visible NeuronCore)."""
        return torch.device("neuron")

    def device_name(self) -> str:
        """The instance type when readable, else the torch device name."""
        return instance_type() or str(torch_neuron().get_device_name(0))

    def placement(self) -> str:
        """The NeuronCores this job owns."""
        owned = f"NeuronCores {format_cores(self.cores)}" if self.cores else "every visible NeuronCore (unpinned)"
        return f"{self.device_name()}, {owned}"

    def synchronize(self) -> None:
        """Neuron executes asynchronously: wait, or device time comes out empty or wrong."""
        torch_neuron().synchronize()

    def capture_cores(self, profiler: ProfilerConfig) -> str:
        """profiler.capture_enabled_for_nc, defaulting to the core the job executes on.

        Indices are the process's own (0: its first visible core); that NeuronConfig numbers them so is unconfirmed.
        """
        if profiler.capture_enabled_for_nc is not None:
            return format_cores(parse_cores(profiler.capture_enabled_for_nc, "profiler.capture_enabled_for_nc"))
        return format_cores(list(range(_EXECUTING_CORES)))

    def neff_cache_dir(self) -> str:
        """The NEFF cache NeuronConfig copies from, so NEFFs land beside the device traces.

        The folder torch-neuronx writes them to: it reads $TORCH_NEURONX_NEFF_CACHE_DIR (measure.compile_cache's
        folder when that is set), so no config key could move it.
        """
        return os.environ.get(NEFF_CACHE_ENV) or DEFAULT_NEFF_CACHE

    def profiler_kwargs(self, profiler: ProfilerConfig, capture_dir: Path) -> dict[str, Any]:
        """`NeuronConfig` as experimental_config and `NeuronProfiler(config).export_trace`."""
        from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

        kwargs: dict[str, Any] = {
            "modes": [getattr(ProfileMode, mode) for mode in profiler.modes],
            "capture_enabled_for_nc": self.capture_cores(profiler),
            "profile_output_dir": str(capture_dir),
            "neff_cache_dir": self.neff_cache_dir(),
        }
        if profiler.max_events_per_nc is not None:
            kwargs["max_events_per_nc"] = profiler.max_events_per_nc
        config = None
        if profiler.correlate_device_time is not None:
            # undocumented: builds without it raise TypeError for the unknown keyword
            try:
                config = NeuronConfig(**kwargs, correlate_device_time=profiler.correlate_device_time)
                self.correlate_status = "passed"
            except TypeError:
                self.correlate_status = "unsupported by this torch-neuronx"
                log.warning("profiler.correlate_device_time is not accepted by this torch-neuronx; running without it")
        if config is None:
            config = NeuronConfig(**kwargs)
        return {"experimental_config": config, "on_trace_ready": NeuronProfiler(config).export_trace}

    def inspect_capture(
        self, capture_dir: Path, profiler: ProfilerConfig, profiler_output: str, framework_device_ms: float
    ) -> CaptureReport:
        """Check the capture, summarise it, note idle cores, and compare key_averages()'s device time with Explorer's.

        Raises:
            CaptureIncomplete: the framework trace is truncated (device files only warn).
        """
        require_complete_traces(capture_dir)
        check = check_capture(capture_dir, profiler.modes, profiler_output)
        problems = [f"Neuron capture looks wrong: {'; '.join(check.problems)}"] if check.problems else []
        report = CaptureReport(check.metrics(), check.tags(), warnings=problems)
        report.tags[names.TAG_NEURON_CORRELATE] = self.correlate_status
        if self.cores and len(self.cores) > _EXECUTING_CORES:
            idle = (
                f"pinned {len(self.cores)} NeuronCores ({format_cores(self.cores)}) but the workload runs on "
                f"{_EXECUTING_CORES}; the others sat idle and no other process could use them"
            )
            report.tags[names.TAG_NEURON_IDLE_CORES] = idle
            report.warnings.append(f"{idle} (set backend.cores={self.cores[0]})")
        note_cpu_fallbacks(report)
        summary = explorer_summary(session_dirs(capture_dir), self.config.explorer_timeout_s)
        report.metrics.update(summary.metrics)
        report.tags.update(summary.tags)
        report.warnings.extend(summary.warnings)
        if summary.raw:
            report.texts[names.NEURON_SUMMARY_FILE] = summary.raw
        coverage = device_time_coverage(
            framework_device_ms,
            summary.metrics.get(names.NEURON_TOTAL_TIME_SUM),
            driver_events(capture_dir),
            summary.tags[names.TAG_NEURON_EXPLORER],
            busy_s=summary.metrics.get(names.NEURON_TOTAL_ACTIVE_TIME_SUM),
        )
        report.metrics.update(coverage.metrics)
        report.tags.update(coverage.tags)
        report.warnings.extend(coverage.warnings)
        explorer_lnc = ", ".join(map(str, sorted(summary.physical_cores))) or None
        others = {VIRTUAL_CORE_SIZE_ENV: os.environ.get(VIRTUAL_CORE_SIZE_ENV), _EXPLORER_LNC: explorer_lnc}
        report.tags[names.TAG_NEURON_LNC_CHECK], lnc_warnings = lnc_check(
            logical_nc_config(trainium_generation()), others
        )
        report.warnings.extend(lnc_warnings)
        return report

    def reset_peak_memory(self) -> None:
        """Reset the Neuron allocator's peak (memory statistics are asynchronous: sync first)."""
        self.synchronize()
        torch_neuron().reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated, through the documented max_memory_allocated()."""
        self.synchronize()
        return int(torch_neuron().max_memory_allocated())

    def memory_history(self) -> MemoryHistory | None:
        """torch.neuron.memory's allocation history, where this torch-neuronx has one.

        torch-neuronx's memory guide (torch/guides/memory-profiling-guide) records snapshots for
        memory_viz; that the calls are torch.cuda.memory's is inferred (no document names them; the
        doctor's `memory_snapshot` probe checks them).
        """
        memory = getattr(torch_neuron(), "memory", None)
        if not all(hasattr(memory, call) for call in _SNAPSHOT_CALLS):
            return None
        return MemoryHistory(memory, {}, "torch.neuron.memory snapshot")

    def peak(self, dtype: str) -> Peak | None:
        """One logical NeuronCore's share of this instance's Trainium chip; None at an unknown LNC (Trn3 unset).

        An unreadable instance type counts as Trn2: TorchNeuron runs on Trn2 and Trn3 (its docs' "Applies to").
        """
        generation = trainium_generation()
        if generation not in ("trn1", "trn2", "trn3") or logical_nc_config(generation)[0] is None:
            return None
        return datasheet_peak(f"{generation}_core", _EXECUTING_CORES, dtype)

    def ranks_cores(self) -> list[int]:
        """The NeuronCores of this node's ranks: one each, consecutive from local rank 0's (the slot plan)."""
        # unset, the `neuron` process group pins each rank to the core of its local rank
        own_spec = os.environ.get(VISIBLE_CORES_ENV) or os.environ.get("LOCAL_RANK", "0")
        own = parse_cores(own_spec, VISIBLE_CORES_ENV)[0]
        first = own - int(os.environ.get("LOCAL_RANK", "0"))
        here = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE", "1"))
        return list(range(first, first + here))

    def compiled_artifact_count(self) -> int | None:
        """NEFFs in the NEFF cache; the difference across a job counts its compilations."""
        cache = Path(self.neff_cache_dir())
        return sum(1 for _ in cache.rglob("*.neff")) if cache.is_dir() else 0

    def manifest(self) -> dict[str, Any]:
        """NeuronCores owned (counted from the pin, not the cached device_count()), instance, driver."""
        driver = None
        with suppress(OSError):
            driver = DRIVER_VERSION.read_text().strip()
        return {
            names.MANIFEST_NEURON_CORE_COUNT: len(self.cores) if self.cores else torch_neuron().device_count(),
            names.MANIFEST_NEURON_VISIBLE_CORES: os.environ.get(VISIBLE_CORES_ENV),
            "neuron.instance_type": instance_type(),
            names.MANIFEST_NEURON_LNC: logical_nc_config(trainium_generation())[1],
            "neuron.driver": driver,
            **{f"neuron.env.{variable}": value for variable, value in self.runtime_settings.items()},
        }
