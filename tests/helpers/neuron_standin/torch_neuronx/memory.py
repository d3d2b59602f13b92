"""`torch.neuron.memory` of the stand-in: an allocation history in torch.cuda.memory's form (README.md).

Tensors stay on the CPU here, so the history is a fixed one (HISTORY): what matters is that the
runner records it over its window, dumps it, and reads the peak and its sites from the pickle.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from torch_neuronx._record import deviates, record

MIB = 2**20
WORKLOAD_FILE = "/standin/workloads/standin.py"
TORCH_FRAME = {"filename": str(Path(torch.__file__).parent / "nn" / "functional.py"), "line": 1, "name": "linear"}


def _frames(line: int) -> list[dict[str, Any]]:
    """A stack innermost first: a frame in torch's own files, then the workload line that called it."""
    return [TORCH_FRAME, {"filename": WORKLOAD_FILE, "line": line, "name": "forward"}]


# 2 MiB at line 10 and 1 MiB at line 11 are live together (the peak, 3 MiB); line 10's is freed
# before line 12 allocates 512 KiB
HISTORY = [
    {"action": "alloc", "addr": 0x1000_0000, "size": 2 * MIB, "stream": 0, "frames": _frames(10)},
    {"action": "alloc", "addr": 0x2000_0000, "size": MIB, "stream": 0, "frames": _frames(11)},
    {"action": "free_requested", "addr": 0x1000_0000, "size": 2 * MIB, "stream": 0, "frames": _frames(10)},
    {"action": "free_completed", "addr": 0x1000_0000, "size": 2 * MIB, "stream": 0, "frames": _frames(10)},
    {"action": "alloc", "addr": 0x3000_0000, "size": MIB // 2, "stream": 0, "frames": _frames(12)},
]
_recording = False


def _record_memory_history(enabled: str | None = "all", **options: Any) -> None:
    """Start (`enabled="all"`, the default) or stop (`enabled=None`) recording the allocation history."""
    global _recording
    record("record_memory_history", enabled=enabled, options=sorted(options))
    _recording = enabled is not None


def _snapshot() -> dict[str, Any]:
    """The allocator's state and the history recorded so far (none when recording never started)."""
    return {"segments": [], "device_traces": [list(HISTORY) if _recording else []]}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Write `_snapshot()` as the pickle PyTorch's memory_viz opens."""
    record("dump_snapshot", filename=filename, recording=_recording)
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


if deviates("no_memory_snapshot"):  # a build without the snapshot calls: only the statistics
    del _record_memory_history, _dump_snapshot
