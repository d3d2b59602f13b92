"""The profiled window: a torch.profiler with the configured schedule, or a no-op twin.

Both objects have `step()`, `key_averages()` and context-manager use, so the measurement
loop never branches on whether profiling is on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler_util import EventList

from runner.backends import CpuBackend
from runner.config import ProfilerConfig, ScheduleConfig


class NullProfiler:
    """Stands in for torch.profiler.profile when profiler.enabled=false."""

    step_num = 0

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        """Count the step, like the real profiler, so progress reporting stays the same."""
        self.step_num += 1

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """No events were recorded."""
        return EventList()  # type: ignore[no-untyped-call]


def build_profiler(
    backend: CpuBackend, profiler: ProfilerConfig, schedule: ScheduleConfig, trace_dir: Path
) -> torch.profiler.profile | NullProfiler:
    """Return the profiler for the profiled window, configured for `backend`."""
    if not profiler.enabled:
        return NullProfiler()
    kwargs: dict[str, Any] = backend.profiler_kwargs(profiler, trace_dir)
    return torch.profiler.profile(
        activities=backend.activities(),
        schedule=torch.profiler.schedule(
            wait=schedule.wait,
            warmup=schedule.warmup,
            active=schedule.active,
            repeat=schedule.repeat,
            skip_first=schedule.skip_first,
        ),
        record_shapes=profiler.record_shapes,
        profile_memory=profiler.profile_memory,
        with_stack=profiler.with_stack,
        with_flops=profiler.with_flops,
        # keep every cycle's events, so key_averages() covers all active steps, not the last cycle
        acc_events=True,
        **kwargs,
    )
