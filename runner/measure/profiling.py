"""The profiled window: a torch.profiler with the configured schedule, or a no-op twin the loop uses alike."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler_util import EventList

from runner.backends.base import Backend
from runner.config import ProfilerConfig, ScheduleConfig

US_PER_MS = 1000.0
_HOST_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops")
TraceHandler = Callable[[torch.profiler.profile], None]


class NullProfiler:
    """Stands in for torch.profiler.profile when profiler.enabled=false."""

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        """Nothing to record: the loop reports its own progress."""

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """No events were recorded."""
        return EventList()  # type: ignore[no-untyped-call]


def make_schedule(schedule: ScheduleConfig) -> Callable[[int], torch.profiler.ProfilerAction]:
    """torch.profiler.schedule from the config: step number -> what the profiler does; no skip_first (0).

    The loop starts after the warm-up and the steady state, so schedule.wait is all the skipping it needs.
    """
    options = ("wait", "warmup", "active", "repeat")
    return torch.profiler.schedule(**{option: getattr(schedule, option) for option in options})


class CycleRecorder:
    """Snapshots per-op self time at each cycle's end: with acc_events=True, successive ones differ by one cycle."""

    def __init__(self, with_shapes: bool) -> None:
        self.with_shapes = with_shapes
        # per cycle: row key -> (self CPU us, self device us), cumulative
        self.snapshots: list[dict[tuple[str, str], tuple[float, float]]] = []

    def wrap(self, handler: TraceHandler | None) -> TraceHandler:
        """Return an on_trace_ready handler that snapshots, then calls the backend's handler."""

        def on_trace_ready(prof: torch.profiler.profile) -> None:
            events = prof.key_averages(group_by_input_shape=self.with_shapes)
            self.snapshots.append({self.row_key(e): (e.self_cpu_time_total, e.self_device_time_total) for e in events})
            if handler is not None:
                handler(prof)

        return on_trace_ready

    def row_key(self, event: Any) -> tuple[str, str]:
        """How op-table rows are keyed: op name, plus input shapes when they are recorded."""
        return (event.key, str(event.input_shapes) if self.with_shapes else "")

    def per_step_ms(self, active: int, device: bool) -> dict[tuple[str, str], list[float]]:
        """Per row, self time per active step in each cycle (ms); empty with one cycle."""
        if len(self.snapshots) < 2:
            return {}
        clock = 1 if device else 0
        keys: set[tuple[str, str]] = set().union(*self.snapshots)
        return {
            key: [
                (now.get(key, (0.0, 0.0))[clock] - before.get(key, (0.0, 0.0))[clock]) / active / US_PER_MS
                for before, now in pairwise([{}, *self.snapshots])
            ]
            for key in keys
        }


def host_options(profiler: ProfilerConfig) -> dict[str, Any]:
    """What the profiler records with each op: the same in the window and in the sessions that measure its cost."""
    return {option: getattr(profiler, option) for option in _HOST_OPTIONS}


def build_profiler(
    backend: Backend, profiler: ProfilerConfig, schedule: ScheduleConfig, capture_dir: Path, recorder: CycleRecorder
) -> torch.profiler.profile | NullProfiler:
    """Return the profiler for the profiled window, configured for `backend`."""
    if not profiler.enabled:
        return NullProfiler()
    kwargs: dict[str, Any] = backend.profiler_kwargs(profiler, capture_dir)
    kwargs["on_trace_ready"] = recorder.wrap(kwargs.get("on_trace_ready"))
    # so key_averages() covers every cycle; on Neuron only then, as its documentation does not list acc_events
    if schedule.repeat > 1:
        kwargs["acc_events"] = True
    return torch.profiler.profile(
        activities=list(backend.traits.activities), schedule=make_schedule(schedule), **host_options(profiler), **kwargs
    )


STDOUT_FD, STDERR_FD = 1, 2


@contextmanager
def tee_fd(fd: int = STDERR_FD, show: bool = True) -> Iterator[list[str]]:
    """Copy what C code (device runtimes: dropped events) writes to `fd` into a list, still showing it if `show`."""
    chunks: list[str] = []
    stream = sys.stdout if fd == STDOUT_FD else sys.stderr
    stream.flush()
    shown = os.dup(fd)
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)

    def pump() -> None:
        while data := os.read(read_end, 65536):
            if show:
                os.write(shown, data)
            chunks.append(data.decode(errors="replace"))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield chunks
    finally:
        stream.flush()
        os.dup2(shown, fd)  # drops the pipe's last writer, so pump() sees end-of-file
        thread.join(timeout=5)
        os.close(read_end)
        os.close(shown)
