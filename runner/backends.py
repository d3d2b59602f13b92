"""Backends: every device-specific decision behind one small interface.

The rest of the runner never branches on the device: it asks the backend for the torch
device, how to synchronise, which profiler activities and extra profiler arguments to use,
and which `torch.compile` backend to pass.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from runner.config import BackendConfig, ConfigError, ProfilerConfig

TRACE_FILE = "trace.json"
# One folder per profiler cycle, named after the step at which the cycle ended.
TRACE_ITER_DIR = "iteration_{step}"


# GPU name fragment -> conf/peaks.yaml entry
GPU_PEAKS = {"H200": "h200_sxm", "H100": "h100_sxm"}


@dataclass
class CaptureReport:
    """What a backend found in its capture after the profiled window."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    # extra text artifacts: artifact file name -> content
    texts: dict[str, str] = field(default_factory=dict)


def chrome_trace_writer(trace_dir: Path) -> Callable[[torch.profiler.profile], None]:
    """Return an on_trace_ready handler that writes each cycle's Chrome trace."""

    def write(prof: torch.profiler.profile) -> None:
        out = trace_dir / TRACE_ITER_DIR.format(step=prof.step_num)
        out.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(out / TRACE_FILE))

    return write


class CpuBackend:
    """Host CPU: nothing to synchronise, CPU activity only."""

    name = "cpu"
    # the torch.compile backend for this device; inductor is PyTorch's default
    compile_backend = "inductor"

    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    @property
    def device(self) -> torch.device:
        """The torch device tensors and the module are moved to."""
        return torch.device(self.name)

    def device_name(self) -> str:
        """A human-readable name of the device, for tags and the console."""
        return platform.processor() or platform.machine()

    def synchronize(self) -> None:
        """Wait for queued device work; CPU work is already complete."""

    def activities(self) -> list[ProfilerActivity]:
        """torch.profiler activities that cover this device."""
        return [ProfilerActivity.CPU]

    def capture_dir(self, output_dir: Path) -> Path:
        """Where the profiler writes; logged as an artifact folder of the same name."""
        return output_dir / "trace"

    def profiler_kwargs(self, profiler: ProfilerConfig, capture_dir: Path) -> dict[str, Any]:
        """Extra torch.profiler.profile arguments: here, the Chrome trace exporter."""
        return {"on_trace_ready": chrome_trace_writer(capture_dir)}

    def inspect_capture(self, capture_dir: Path, profiler: ProfilerConfig, profiler_output: str) -> CaptureReport:
        """Check the capture and derive device-side metrics; a Chrome trace needs neither."""
        return CaptureReport()

    def manifest(self) -> dict[str, Any]:
        """Device facts for the environment manifest."""
        return {"cpu.count": os.cpu_count(), "cpu.machine": platform.machine()}

    def reset_peak_memory(self) -> None:
        """Start the device allocator's peak statistic afresh; the CPU has none."""

    def peak_memory_bytes(self) -> int | None:
        """Peak device memory allocated since the reset, or None without an allocator statistic."""
        return None

    def peak_entry(self) -> tuple[str, int] | None:
        """The conf/peaks.yaml entry for this device and how many of it the job uses (None: calibrate)."""
        return None

    def compiled_artifact_count(self) -> int | None:
        """Compiled programs in the backend's cache (Neuron NEFFs); None where there is no such cache."""
        return None


class CudaBackend(CpuBackend):
    """NVIDIA GPU: CUDA activity, torch.cuda.synchronize before clocks and profiler steps."""

    name = "cuda"

    def device_name(self) -> str:
        """The GPU's marketing name, e.g. 'NVIDIA H200'."""
        return torch.cuda.get_device_name(self.device)

    def synchronize(self) -> None:
        """CUDA kernels run asynchronously; wait so timings and traces are complete."""
        torch.cuda.synchronize(self.device)

    def activities(self) -> list[ProfilerActivity]:
        """CPU ops plus CUDA kernels and memcpys."""
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def reset_peak_memory(self) -> None:
        """Reset the CUDA caching allocator's peak."""
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated by tensors, after synchronising."""
        self.synchronize()
        return int(torch.cuda.max_memory_allocated(self.device))

    def peak_entry(self) -> tuple[str, int] | None:
        """H100 or H200 by name; other GPUs have no entry (set measure.peak)."""
        name = self.device_name()
        return next(((entry, 1) for model, entry in GPU_PEAKS.items() if model in name), None)

    def manifest(self) -> dict[str, Any]:
        """The GPU, its compute capability and the CUDA torch was built with."""
        major, minor = torch.cuda.get_device_capability(self.device)
        return {
            **super().manifest(),
            "cuda.device": self.device_name(),
            "cuda.device_count": torch.cuda.device_count(),
            "cuda.capability": f"{major}.{minor}",
            "cuda.version": torch.version.cuda,
        }


def neuron_available() -> bool:
    """True when torch-neuronx is installed and reports a usable NeuronCore."""
    try:
        import torch_neuronx  # noqa: F401
    except ImportError:
        return False
    module = getattr(torch, "neuron", None)
    return bool(module is not None and module.is_available())


def make_backend(config: BackendConfig) -> CpuBackend:
    """Build the backend named by `backend.name`, resolving `auto` to the best available.

    Raises:
        ConfigError: the requested device is not available on this machine.
    """
    name = config.name
    if name == "auto":
        name = "neuron" if neuron_available() else "cuda" if torch.cuda.is_available() else "cpu"
    if name == "neuron":
        from runner.neuron import NeuronBackend

        neuron: CpuBackend = NeuronBackend(config)
        return neuron
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("backend=cuda: no CUDA device is visible (allowed here: auto, cpu)")
    return CudaBackend(config) if name == "cuda" else CpuBackend(config)
