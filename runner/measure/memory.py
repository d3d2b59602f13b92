"""Memory beside time: the profiled window's allocations, their peak, and the sites that hold it.

The device's history, or the profiler's `[memory]` events in the same pickle layout (docs/optional_measurements.md):
not `torch.cuda._memory_viz._profile_to_snapshot`, which needs `with_stack=True` (seconds a step) and names no op.
"""

from __future__ import annotations

import os
import pickle
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner import names
from runner.backends.base import Backend, MemoryHistory
from runner.chrome_trace import read_chrome_trace
from runner.config import ConfigError, ProfilerConfig

PROFILER_SOURCE = "profiler memory events"
_MEMORY_EVENT = "[memory]"
# the snapshot's actions (torch.cuda.memory._snapshot): an allocation, a free asked for, and its
# memory back with the allocator (the moment the bytes stop counting)
_ALLOC, _FREE_REQUESTED, _FREE_COMPLETED = "alloc", "free_requested", "free_completed"
# frames in torch's own files are how an allocation was made; the site is the caller's line
_TORCH_DIR = str(Path(torch.__file__).parent) + os.sep
# an allocation with no frame: made outside any op, or recorded without a stack
NO_SITE = "(no frame)"


@dataclass(frozen=True)
class MemoryPeak:
    """The window's peak and the allocation sites live at it."""

    # what it was read from: the device's allocation history, or the profiler's memory events
    source: str
    peak_bytes: int
    # site -> bytes live at the peak, largest first; they sum to peak_bytes
    sites: dict[str, int]
    # the pickle memory_viz opens
    snapshot: Path

    def table(self) -> dict[str, list[Any]]:
        """The sites as an MLflow table."""
        return {names.MEMORY_SITE: list(self.sites), names.MEMORY_SITE_BYTES: list(self.sites.values())}


def memory_source(backend: Backend, profiler: ProfilerConfig) -> str:
    """What `measure.memory_snapshot=true` reads on this backend; ConfigError where there is nothing to read."""
    if (history := backend.memory_history()) is not None:
        return history.source
    if profiler.enabled and profiler.profile_memory:
        return PROFILER_SOURCE
    raise ConfigError(
        f"measure.memory_snapshot=true: backend={backend.traits.name} keeps no allocation history, so it reads the "
        "profiler's memory events, which are off here; set profiler.enabled=true and profiler.profile_memory=true, "
        "or measure.memory_snapshot=false"
    )


@contextmanager
def recording(backend: Backend, history: MemoryHistory | None, snapshot: Path) -> Iterator[None]:
    """Record the device's allocation history over the block and dump it to `snapshot`; nothing without one."""
    if history is None:
        yield
        return
    history.module._record_memory_history(**history.options)
    try:
        yield
        backend.synchronize()  # the allocator's records are asynchronous on Neuron, as its statistics are
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        history.module._dump_snapshot(str(snapshot))
    finally:
        history.module._record_memory_history(enabled=None)


def _ops_by_thread(events: list[dict[str, Any]]) -> dict[Any, list[tuple[float, float, str]]]:
    """Each thread's ops as (start, end, name), outermost first where they start together."""
    ops: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    for event in events:
        if event.get("cat") == "cpu_op" and "dur" in event:
            ops[event.get("tid")].append((float(event["ts"]), float(event["ts"]) + float(event["dur"]), event["name"]))
    for spans in ops.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
    return ops


def _op_frames(ops: list[tuple[float, float, str]], at_us: float) -> list[dict[str, Any]]:
    """The ops running at `at_us`, innermost first, as a snapshot's frames."""
    running = [name for start, end, name in ops if start <= at_us <= end]
    return [{"filename": name, "line": 0, "name": name} for name in reversed(running)]


def snapshot_from_traces(capture_dir: Path) -> dict[str, Any]:
    """The last cycle's memory events as a memory_viz snapshot (across cycles, frees between them are missed)."""
    traces = (read_chrome_trace(path) for path in sorted(capture_dir.rglob("*.json")))
    events_of = (trace["traceEvents"] for trace in traces if trace)
    recorded = [
        (events, memory) for events in events_of if (memory := [e for e in events if e.get("name") == _MEMORY_EVENT])
    ]
    devices: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    if recorded:
        events, memory = max(recorded, key=lambda pair: max(float(e["ts"]) for e in pair[1]))
        ops = _ops_by_thread(events)
        for event in sorted(memory, key=lambda e: float(e["ts"])):
            args = event["args"]
            entry = {"addr": args["Addr"], "size": abs(int(args["Bytes"])), "stream": 0, "time_us": event["ts"]}
            entry["frames"] = _op_frames(ops.get(event.get("tid"), []), float(event["ts"]))
            actions = [_ALLOC] if int(args["Bytes"]) > 0 else [_FREE_REQUESTED, _FREE_COMPLETED]
            device = devices.setdefault((args.get("Device Type"), args.get("Device Id")), [])
            device += [{"action": action, **entry} for action in actions]
    return {"segments": [], "device_traces": list(devices.values())}


def allocation_site(frames: list[dict[str, Any]]) -> str:
    """Where an allocation was made: the innermost Python frame outside torch, or the ops it ran in (`outer > op`)."""
    python = [frame for frame in frames if str(frame.get("filename", "")).endswith(".py")]
    if python:
        frame = next((f for f in python if not str(f["filename"]).startswith(_TORCH_DIR)), python[0])
        return f"{Path(frame['filename']).parent.name}/{Path(frame['filename']).name}:{frame['line']} {frame['name']}"
    return " > ".join(str(frame["name"]) for frame in reversed(frames)) or NO_SITE


def _replay(entries: list[dict[str, Any]], stop: int | None = None) -> tuple[dict[Any, dict[str, Any]], int, int]:
    """Replay entries up to index `stop`: the allocations live then by address, the peak total, its index (or -1)."""
    live: dict[Any, dict[str, Any]] = {}
    total = peak = 0
    peak_at = -1
    for index, entry in enumerate(entries[: None if stop is None else stop + 1]):
        if entry["action"] == _ALLOC:
            total += entry["size"] - live.get(entry["addr"], {"size": 0})["size"]
            live[entry["addr"]] = entry
            if total > peak:
                peak, peak_at = total, index
        elif entry["action"] == _FREE_COMPLETED and entry["addr"] in live:
            total -= live.pop(entry["addr"])["size"]
    return live, peak, peak_at


def peak_by_site(snapshot: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """The most the snapshot's recorded allocations held at once, on its busiest device, and the sites live then."""
    best_peak, best_sites = 0, {}
    for entries in snapshot.get("device_traces", []):
        _, peak, peak_at = _replay(entries)
        if peak <= best_peak:
            continue
        live, _, _ = _replay(entries, peak_at)
        sites: dict[str, int] = defaultdict(int)
        for entry in live.values():
            sites[allocation_site(entry.get("frames", []))] += entry["size"]
        best_peak, best_sites = peak, dict(sorted(sites.items(), key=lambda item: item[1], reverse=True))
    return best_peak, best_sites


def window_memory(history: MemoryHistory | None, capture_dir: Path, snapshot: Path) -> MemoryPeak:
    """The window's peak from the dumped history, or from the profiler's memory events (written to `snapshot` first)."""
    if history is None:
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_bytes(pickle.dumps(snapshot_from_traces(capture_dir)))
    with snapshot.open("rb") as f:
        peak, sites = peak_by_site(pickle.load(f))  # noqa: S301  (this job's own file)
    return MemoryPeak(history.source if history else PROFILER_SOURCE, peak, sites, snapshot)
