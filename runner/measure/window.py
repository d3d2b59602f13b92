"""Does the profiled window represent the steady state? The profiler's own cost, measured apart, and the verdict."""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity

from runner.backends.base import Backend
from runner.config import ProfilerConfig, ScheduleConfig
from runner.measure.build import BuiltWorkload
from runner.measure.loop import timed_step
from runner.measure.profiling import host_options, tee_fd

log = logging.getLogger(__name__)
MS_PER_S = 1000.0
# short profiler sessions the cost is measured in: a stall must hit all of them to count
COST_SESSIONS = 5
SESSION = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
# unprofiled steps before each session's reference step: the end of a profiler session slows the
# next step or two (0.1-0.3 ms, then 0.04, against 0.03 ms for a tiny RMSNorm on this project's CPU hosts)
SETTLE_STEPS = 2
# the window represents the steady state when its mean step is within this factor of the steady
# median plus the profiler's cost; also the factor that makes a steady step a slow one
TOLERANCE = 2.0


@dataclass(frozen=True)
class ProfilerCost:
    """The profiler's own cost on one step of this workload, in ms."""

    # a cycle's first recorded step, which the profiler's start lands on (docs/measurement.md)
    first_ms: float
    # each later recorded step of the cycle: the cost of its recorded ops
    later_ms: float

    def per_recorded_step(self, schedule: ScheduleConfig) -> list[float]:
        """The cost of each recorded step of the window, in the order they ran."""
        return [self.first_ms if i % schedule.active == 0 else self.later_ms for i in range(schedule.active_steps)]


def profiler_cost(workload: BuiltWorkload, backend: Backend, profiler: ProfilerConfig) -> ProfilerCost:
    """Measure what the profiler adds to this workload's step, apart from the window and before it.

    A stall only adds time, so the fastest recorded step less the fastest unprofiled one is the
    cost: with the window's own steps a stall of its one recorded step would pass for the cost.
    Run first, the sessions also take the process's first profiler start out of the window. Host
    activity only: on CUDA, whose kernels go untraced, the cost is a lower bound. Where
    most steps stall, every session may have, and the cost reads high (`timing.stable=false` then).
    """
    log.info("the profiler's own cost: %d short profiler sessions ...", COST_SESSIONS)
    reference: list[float] = []
    first: list[float] = []
    later: list[float] = []
    options = host_options(profiler)
    with tee_fd(show=False) as printed:
        for _ in range(COST_SESSIONS):
            for _ in range(SETTLE_STEPS):
                timed_step(workload, backend)
            reference.append(timed_step(workload, backend))
            with torch.profiler.profile(
                activities=[ProfilerActivity.CPU], schedule=SESSION, acc_events=True, **options
            ) as prof:
                for kind in ([], first, later):  # a warm-up step (SESSION), then two recorded ones
                    kind.append(timed_step(workload, backend))
                    prof.step()
    log.debug("the profiler's cost sessions printed: %s", "".join(printed))
    unprofiled = min(reference)
    cost = ProfilerCost(max(0.0, min(first) - unprofiled) * MS_PER_S, max(0.0, min(later) - unprofiled) * MS_PER_S)
    log.info(
        "the profiler's own cost: %.4f ms on a cycle's first recorded step, %.4f ms later", cost.first_ms, cost.later_ms
    )
    return cost


def judge_window(
    profiled_ms: list[float],
    cost: ProfilerCost,
    schedule: ScheduleConfig,
    steady_ms: list[float],
    steady_median_ms: float,
    max_steps: int,
) -> str | None:
    """Why the profiled steps, less the profiler's cost, are not what the steady state predicts; None if they are.

    Their mean (what the op table reads) may be `TOLERANCE` times off (docs/measurement.md). The
    lower bound keeps the cost in: subtracting a cost that dwarfs a tiny step would flag its noise.
    """
    costs = cost.per_recorded_step(schedule)
    mean_cost, mean_step = statistics.fmean(costs), statistics.fmean(profiled_ms)
    expected = steady_median_ms + mean_cost
    if steady_median_ms / TOLERANCE <= mean_step <= TOLERANCE * expected:
        return None
    seen = (
        f"its {len(profiled_ms)} profiled step(s) averaged {mean_step:.4f} ms where the steady state predicts "
        f"{expected:.4f} ms (median {steady_median_ms:.4f} + the profiler's measured cost {mean_cost:.4f}), "
        f"{mean_step / expected:.1f}x"
    )
    excess = abs(sum(profiled_ms) - sum(costs) - len(profiled_ms) * steady_median_ms)
    wider = _wider_window(excess, cost, steady_ms, steady_median_ms, max_steps, len(profiled_ms))
    return f"{seen}; widen it: {wider}"


def _wider_window(
    excess_ms: float, cost: ProfilerCost, steady_ms: list[float], steady_median_ms: float, max_steps: int, recorded: int
) -> str:
    """`schedule.active` and `schedule.repeat` for a window this far off to read the steady state (see docs)."""
    typical = steady_median_ms + cost.later_ms
    steps = max(recorded + 1, min(math.ceil(excess_ms / ((TOLERANCE - 1) * typical)), max_steps))
    slow_share = sum(ms > TOLERANCE * steady_median_ms for ms in steady_ms) / len(steady_ms)
    active = steps if slow_share == 0 else max(1, min(steps, math.floor(math.log(2) / -math.log1p(-slow_share))))
    return f"schedule.active={active} schedule.repeat={math.ceil(steps / active)}"
