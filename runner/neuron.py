"""backend=neuron: AWS Trainium through TorchNeuron's documented profiling API.

Written against the documented surface (see README, "On Trainium"): `torch.profiler.profile`
with CPU + PrivateUse1 activities, `experimental_config=NeuronConfig(...)` and
`on_trace_ready=NeuronProfiler(config).export_trace`; `torch_neuron().synchronize()` before
every profiler step and clock read; `torch.compile(backend="neuron")`. Points the
documentation leaves open are handled both ways and listed in the README.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from runner.backends import CaptureReport, CpuBackend
from runner.config import BackendConfig, ConfigError, ProfilerConfig, format_cores, parse_cores
from runner.neuron_capture import check_capture, explorer_summary, session_dirs

log = logging.getLogger(__name__)

# Env-var capture; it conflicts with torch.profiler capture, so the runner refuses to run with it.
INSPECT_ENV = "NEURON_RT_INSPECT_ENABLE"
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
DEFAULT_NEFF_CACHE = "/tmp/neff_cache"
DMI_PRODUCT = Path("/sys/devices/virtual/dmi/id/product_name")
DRIVER_VERSION = Path("/sys/module/neuron/version")


def torch_neuron() -> Any:
    """`torch.neuron`, which torch-neuronx registers at import; torch's type stubs lack it."""
    return getattr(torch, "neuron")  # noqa: B009


def instance_type() -> str | None:
    """The EC2 instance type (e.g. trn1.32xlarge) from DMI, without touching the network."""
    try:
        return DMI_PRODUCT.read_text().strip() or None
    except OSError:
        return None


class NeuronBackend(CpuBackend):
    """Trainium NeuronCores through torch-neuronx (TorchNeuron, PrivateUse1 device 'neuron')."""

    name = "neuron"
    compile_backend = "neuron"

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        if os.environ.get(INSPECT_ENV, "0") not in ("", "0"):
            raise ConfigError(
                f"{INSPECT_ENV}={os.environ[INSPECT_ENV]} is set: env-var capture conflicts with torch.profiler; "
                "unset it (the runner configures capture through profiler.modes)"
            )
        try:
            import torch_neuronx.profiling  # noqa: F401  (autoload registers torch.neuron; profiling is explicit)
        except ImportError:
            raise ConfigError(
                "backend=neuron needs torch-neuronx, which is not installed here; "
                "install the runner into the Neuron virtual environment, or choose backend=auto|cpu|cuda"
            ) from None
        if not torch_neuron().is_available():
            raise ConfigError("backend=neuron: torch-neuronx sees no NeuronCore on this machine")
        self.cores = self._pin_cores(config.cores)
        self.correlate_status = "unset"

    def _pin_cores(self, spec: str | None) -> list[int] | None:
        """Validate backend.cores and pin the job to them before the runtime starts."""
        if spec is None:
            return None
        cores = parse_cores(spec, "backend.cores")
        visible = os.environ.get(VISIBLE_CORES_ENV)
        existing = parse_cores(visible, VISIBLE_CORES_ENV) if visible else list(range(torch_neuron().device_count()))
        missing = [c for c in cores if c not in existing]
        if missing:
            raise ConfigError(
                f"backend.cores={spec}: NeuronCore(s) {format_cores(missing)} do not exist here; "
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

    def synchronize(self) -> None:
        """Neuron executes asynchronously: wait, or device time comes out empty or wrong."""
        torch_neuron().synchronize()

    def activities(self) -> list[ProfilerActivity]:
        """CPU for framework ops, PrivateUse1 for Neuron runtime and device activity."""
        return [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

    def capture_dir(self, output_dir: Path) -> Path:
        """NeuronConfig.profile_output_dir: the job's own folder, logged as neuron_profile/."""
        return output_dir / "neuron_profile"

    def capture_cores(self, profiler: ProfilerConfig) -> str:
        """profiler.capture_enabled_for_nc, defaulting to the cores this job uses.

        Indices are the process's own (0 = its first visible core); whether NeuronConfig
        numbers cores that way or absolutely is one of the unconfirmed points.
        """
        if profiler.capture_enabled_for_nc is not None:
            return format_cores(parse_cores(profiler.capture_enabled_for_nc, "profiler.capture_enabled_for_nc"))
        return format_cores(list(range(len(self.cores)))) if self.cores else "0"

    def neff_cache_dir(self) -> str:
        """The NEFF cache NeuronConfig copies from, so NEFFs land beside the device traces."""
        return self.config.neff_cache_dir or os.environ.get(NEFF_CACHE_ENV) or DEFAULT_NEFF_CACHE

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

    def inspect_capture(self, capture_dir: Path, profiler: ProfilerConfig, profiler_output: str) -> CaptureReport:
        """Check the capture against the documented failure signs and summarise it."""
        check = check_capture(capture_dir, profiler.modes, profiler_output)
        if check.problems:
            log.warning("Neuron capture looks wrong: %s", "; ".join(check.problems))
        report = CaptureReport(metrics=check.metrics(), tags=check.tags())
        report.tags["neuron.correlate_device_time"] = self.correlate_status
        summary = explorer_summary(session_dirs(capture_dir), self.config.explorer_timeout_s)
        report.metrics.update(summary.metrics)
        report.tags.update(summary.tags)
        if summary.raw:
            report.texts["neuron_summary.json"] = summary.raw
        return report

    def reset_peak_memory(self) -> None:
        """Reset the Neuron allocator's peak (memory statistics are asynchronous: sync first)."""
        self.synchronize()
        torch_neuron().reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated, through the documented max_memory_allocated()."""
        self.synchronize()
        return int(torch_neuron().max_memory_allocated())

    def peak_entry(self) -> tuple[str, int] | None:
        """Per-NeuronCore figures of this instance's Trainium generation, times the cores used."""
        generation = (instance_type() or "").split(".")[0].rstrip("nu")  # trn1n, trn2u -> trn1, trn2
        if generation not in ("trn1", "trn2", "trn3"):
            return None
        return f"{generation}_core", len(self.cores) if self.cores else 1

    def compiled_artifact_count(self) -> int | None:
        """NEFFs in the NEFF cache; the difference across a job counts its compilations."""
        cache = Path(self.neff_cache_dir())
        return sum(1 for _ in cache.rglob("*.neff")) if cache.is_dir() else 0

    def manifest(self) -> dict[str, Any]:
        """NeuronCore count, pinned cores, instance type and driver version."""
        try:
            driver = DRIVER_VERSION.read_text().strip()
        except OSError:
            driver = None
        return {
            **super().manifest(),
            "neuron.core_count": torch_neuron().device_count(),
            "neuron.visible_cores": os.environ.get(VISIBLE_CORES_ENV),
            "neuron.instance_type": instance_type(),
            "neuron.driver": driver,
        }
