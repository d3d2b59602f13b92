"""backend=cuda: an NVIDIA GPU, the baseline for the same workload."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from runner import names
from runner.backends.base import Backend, DeviceTraits, MemoryHistory, Slot
from runner.backends.monitor import MonitorPlan
from runner.backends.nvml import nvml_plan
from runner.backends.peaks import Peak, datasheet_peak
from runner.config import BackendConfig

# GPU name fragment -> conf/peaks.yaml entry
_GPU_PEAKS = {"H200": "h200_sxm", "H100": "h100_sxm"}
_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
# the buffer zeroed before each step to evict the L2 cache (measure.flush_cache): Triton's do_bench zeroes
# 256 MB; twice the L2 where that is larger (the H200's L2 is 60 MB)
FLUSH_BYTES = 256 * 2**20
# Python frames only: C++ frames ("all") are symbolised slowly at the dump; the bound keeps long histories finite
_CUDA_HISTORY_OPTIONS = {"stacks": "python", "max_entries": 1_000_000}


def _timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them."""
    visible = os.environ.get(_VISIBLE_DEVICES_ENV)
    return visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]


class CudaBackend(Backend):
    """CUDA activity, torch.cuda.synchronize before clocks and profiler steps."""

    traits = DeviceTraits(
        name="cuda",
        collective_backend="nccl",
        # the host's clock around a synchronized step counts its launches and Python: 1.8-4.8x Timer's on an H200
        # (issue 48)
        step_clock=names.STEP_CLOCK_DEVICE,
        activities=(ProfilerActivity.CPU, ProfilerActivity.CUDA),
        # no process_keys: CUDA reads CUDA_VISIBLE_DEVICES once per process, but a launcher's slot sets it, not a key
        manifest_env_prefixes=(_VISIBLE_DEVICES_ENV,),
    )

    @classmethod
    def available(cls) -> bool:
        """A CUDA device is visible to torch."""
        return torch.cuda.is_available()

    @classmethod
    def system_sampler(cls, period_s: int) -> MonitorPlan:
        """NVML (nvidia-ml-py) beside the host: the GPU's utilisation, memory and power."""
        return nvml_plan(period_s)

    @classmethod
    def split_machine(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """One GPU per job, out of the visible ones (one job per GPU when jobs=0)."""
        gpus = _visible_gpus()
        return [Slot(f"GPU {gpu}", ((_VISIBLE_DEVICES_ENV, gpu),)) for gpu in gpus[: jobs or len(gpus)]]

    def take_slot(self, slot: Slot) -> None:
        """Select the slot's GPU: CUDA may have started already, and then ignores CUDA_VISIBLE_DEVICES."""
        torch.cuda.set_device(_visible_gpus().index(dict(slot.env)[_VISIBLE_DEVICES_ENV]))

    @property
    def device(self) -> torch.device:
        """The first visible GPU."""
        return torch.device("cuda")

    def device_name(self) -> str:
        """The GPU's marketing name, e.g. 'NVIDIA H200'."""
        return torch.cuda.get_device_name(self.device)

    def placement(self) -> str:
        """The GPU, and which of the host's it is when a launcher chose it."""
        visible = os.environ.get(_VISIBLE_DEVICES_ENV)
        return f"{self.device_name()} ({_VISIBLE_DEVICES_ENV}={visible})" if visible else self.device_name()

    def synchronize(self) -> None:
        """CUDA kernels run asynchronously; wait so timings and traces are complete."""
        torch.cuda.synchronize(self.device)

    def time_steps(self, step: Callable[[], object], count: int, flush_cache: bool) -> list[float]:
        """The steps launched back to back, timed by CUDA events, and synchronized once.

        Each step runs on the device's clock from the previous step's end mark to its own, so the
        steps add up to the block, waits for launches included, as Timer's mean over a block of
        calls reads. With `flush_cache` each step has its own pair of events and an L2-sized
        buffer is zeroed between them (Triton's do_bench), so data that fits in the L2 comes from HBM.
        """
        self.synchronize()
        if flush_cache:  # the caching allocator hands the same block back each call
            l2_bytes = torch.cuda.get_device_properties(self.device).L2_cache_size
            flush = torch.empty(max(FLUSH_BYTES, 2 * l2_bytes), dtype=torch.int8, device=self.device)
            spans = [(_timing_event(), _timing_event()) for _ in range(count)]
            for start, end in spans:
                flush.zero_()
                start.record()
                step()
                end.record()
        else:
            marks = [_timing_event() for _ in range(count + 1)]
            marks[0].record()
            for mark in marks[1:]:
                step()
                mark.record()
            spans = list(itertools.pairwise(marks))
        self.synchronize()
        return [start.elapsed_time(end) for start, end in spans]

    def reset_peak_memory(self) -> None:
        """Reset the CUDA caching allocator's peak."""
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated by tensors, after synchronising."""
        self.synchronize()
        return int(torch.cuda.max_memory_allocated(self.device))

    def memory_history(self) -> MemoryHistory | None:
        """torch.cuda.memory's allocation history (PyTorch's "Understanding CUDA Memory Usage")."""
        return MemoryHistory(torch.cuda.memory, _CUDA_HISTORY_OPTIONS, "torch.cuda.memory snapshot")

    def peak(self, dtype: str) -> Peak | None:
        """H100 or H200 by name; other GPUs have no entry (set measure.peak)."""
        name = self.device_name()
        entry = next((entry for model, entry in _GPU_PEAKS.items() if model in name), None)
        return datasheet_peak(entry, 1, dtype) if entry else None

    def manifest(self) -> dict[str, Any]:
        """The GPU, its compute capability and the CUDA torch was built with."""
        major, minor = torch.cuda.get_device_capability(self.device)
        return {
            "cuda.device": self.device_name(),
            "cuda.device_count": torch.cuda.device_count(),
            "cuda.capability": f"{major}.{minor}",
            "cuda.version": torch.version.cuda,
            "cuda.visible_devices": os.environ.get(_VISIBLE_DEVICES_ENV),
        }
