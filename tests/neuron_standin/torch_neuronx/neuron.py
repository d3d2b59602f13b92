"""The `torch.neuron` device module of the stand-in."""

from __future__ import annotations

import os

from torch_neuronx._record import record

_runtime_started = False


def total_cores() -> int:
    return int(os.environ.get("NEURON_STANDIN_CORES", "8"))


def start_runtime() -> None:
    """NRT starts on first device use and reads NEURON_RT_VISIBLE_CORES then."""
    global _runtime_started
    if not _runtime_started:
        _runtime_started = True
        record("runtime_start", visible_cores=os.environ.get("NEURON_RT_VISIBLE_CORES"))


def is_available() -> bool:
    return total_cores() > 0


def device_count() -> int:
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if _runtime_started and visible:
        return sum(int(p.split("-")[-1]) - int(p.split("-")[0]) + 1 for p in visible.split(","))
    return total_cores()


def current_device() -> int:
    return 0


def get_device_name(device: int | None = None) -> str:
    return f"neuron:{device or 0}"


def synchronize(device: int | None = None) -> None:
    start_runtime()
    record("synchronize")


def is_initialized() -> bool:
    return _runtime_started


def _is_in_bad_fork() -> bool:
    return False


def manual_seed_all(seed: int) -> None:
    return None


def memory_allocated(device: int | None = None) -> int:
    return 1 << 20


def max_memory_allocated(device: int | None = None) -> int:
    return 2 << 20


def memory_reserved(device: int | None = None) -> int:
    return 4 << 20


def reset_peak_memory_stats(device: int | None = None) -> None:
    record("reset_peak_memory_stats")
