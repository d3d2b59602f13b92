"""The timing loop's primitives, which every measuring process runs: a synchronized step, warm-up, timed steps."""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runner.backends.base import Backend
from runner.config import ConfigError, RunSpec
from runner.files import write_whole
from runner.measure.build import BuiltWorkload
from runner.measure.collectives import all_ranks_max
from runner.measure.host_memory import freed_memory_kept
from runner.measure.layouts import MemoryLayouts
from runner.measure.turns import NoTurns, RefereedTurns, Turns
from runner.signals import raise_if_stopped

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 2.0
# the fewest steps `measure.steps_s` leaves a process to time (a median and p10/p90 to read), and a stretch of
# memory: at 8x512x1024 a sweep's speedups landed within 5% of a Timer's in the same rounds in 11 of 20 at 4 steps
# a stretch, 15 of 20 at 8 (docs/trust.md; both against a reference that then slowed the last stretch alike)
FEWEST_TIMED_STEPS = 30
FEWEST_STEPS_A_STRETCH = 8
# a process timing its steps alone
_NO_TURNS = NoTurns()
# untimed calls before a stretch that follows a move of its memory or another worker's turn: at least SETTLE_CALLS,
# then until one takes at most SETTLED_RATIO times a warm call, MOST_SETTLE_CALLS at most (docs/trust.md)
SETTLE_CALLS = 2
SETTLED_RATIO = 1.1
MOST_SETTLE_CALLS = 16
# calls timed as the warm-up ends, in its turn: their median is the warm call a stretch settles to
WARM_CALLS = 3
# a benchmark's knob, no config key (docs/trust.md): the memory layouts each process's steps are timed in
LAYOUTS_ENV = "RUNNER_LAYOUTS"


@dataclass(frozen=True)
class RoundPlace:
    """Where one worker process timed its steps: its round, its place in that round's order, the round's workers."""

    # from 1: the worker's round (a single run's k-th worker is its round k)
    round: int
    # from 1: when it started among the round's workers (in a sweep, the round's random order)
    position: int
    # the workers of that round: one per job taking part
    workers: int


@dataclass
class SteadyState:
    """Steady-state step times, wherever they were timed."""

    # per process (worker processes, copies, or the job's own), per repeat, in ms
    step_ms: list[list[list[float]]]
    # measure.copies: seconds from the first copy's first timed step to the last copy's last; else None
    copies_window_s: float | None = None
    # worker processes timed in rounds (runner.execute.rounds): each one's place, in step_ms order
    places: list[RoundPlace] = field(default_factory=list)
    # shared by the jobs whose workers were interleaved in the same rounds; they pair by round
    rounds_id: str | None = None
    # timed in the job's own process, which is then warm for what follows (throughput, the profiled window)
    in_job_process: bool = False

    def save(self, path: Path) -> None:
        """Write it whole where its job will read it (a sweep's rounds folder)."""
        write_whole(path, json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> SteadyState | None:
        """What `save` wrote there; None when nothing was.

        Raises:
            HungWorkload: `save_hung` wrote there instead.
        """
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        if HUNG_KEY in data:
            raise HungWorkload(data[HUNG_KEY])
        data["places"] = [RoundPlace(**place) for place in data["places"]]
        return cls(**data)


class HungWorkload(RuntimeError):
    """A sweep's rounds stopped the job's worker past its time: timing the workload again would hang the job too."""


HUNG_KEY = "hung"


def save_hung(path: Path, why: str) -> None:
    """Leave, where the job reads its steady state (`SteadyState.load`), why its workload hung instead."""
    write_whole(path, json.dumps({HUNG_KEY: why}))


# what `measure()` calls for the steady state after the first call: the caller chooses the processes
SteadyStateSource = Callable[[], SteadyState]


def timed_step(workload: BuiltWorkload, backend: Backend) -> float:
    """One synchronized step's wall time in seconds."""
    return backend.synchronized_steps(workload.step, 1)[0] / 1000


class Progress:
    """Logs `phase: step i/n` every few seconds and at the end, so long phases show life."""

    def __init__(self, phase: str, total: int) -> None:
        self.phase, self.total = phase, total
        self.last = time.perf_counter()

    def step(self, done: int) -> None:
        """Report step `done` if enough time passed, or if it is the last one; a safe point for a stop."""
        raise_if_stopped()
        now = time.perf_counter()
        if done == self.total or now - self.last >= PROGRESS_EVERY_S:
            log.info("%s: step %d/%d", self.phase, done, self.total)
            self.last = now


def warm_up(workload: BuiltWorkload, backend: Backend, spec: RunSpec) -> float:
    """`measure.warmup` calls, continued until `measure.warmup_s` have passed; seconds per call (0 for none)."""
    calls, start = 0, time.perf_counter()
    until = start + spec.measure.warmup_s
    progress = Progress("warm-up", spec.measure.warmup)  # a warm-up of many calls shows life, as a timed phase does
    # ranks in lock step go on while any rank would, or one would wait in a collective forever
    while all_ranks_max(int(calls < spec.measure.warmup or time.perf_counter() < until), backend.device):
        workload.step()
        calls += 1
        if calls <= spec.measure.warmup:
            progress.step(calls)
    backend.synchronize()
    return (time.perf_counter() - start) / calls if calls else 0.0


def steps_to_time(spec: RunSpec, call_s: float, backend: Backend) -> int:
    """`measure.steps`, or fewer to fill `measure.steps_s` (drift limits a median); the most any rank asks for."""
    steps = spec.measure.steps
    if spec.measure.steps_s is not None and call_s > 0:
        steps = min(steps, max(fewest_timed_steps(backend), math.ceil(spec.measure.steps_s / call_s)))
    return all_ranks_max(steps, backend.device)


def fewest_timed_steps(backend: Backend) -> int:
    """The fewest steps `measure.steps_s` leaves a process: `FEWEST_TIMED_STEPS`, `FEWEST_STEPS_A_STRETCH` a layout."""
    return max(FEWEST_TIMED_STEPS, FEWEST_STEPS_A_STRETCH * layouts_count(backend.traits.default_layouts))


def capped_steps_note(spec: RunSpec, steady: SteadyState) -> str | None:
    """One line when `measure.steps_s` timed fewer steps than `measure.steps` asked for, else None."""
    timed = max(len(repeat) for process in steady.step_ms for repeat in process)
    if timed >= spec.measure.steps:
        return None
    return (
        f"measure.steps={spec.measure.steps} asked, {timed} timed per process: measure.steps_s={spec.measure.steps_s} "
        "caps a process's timed steps at that many seconds (measure.steps_s=null times every step)"
    )


def stretch_ends(steps: int, stretches: int) -> list[int]:
    """Where each of `stretches` near-equal runs of `steps` steps ends; the verdict cuts its blocks there too."""
    return [(stretch + 1) * steps // stretches for stretch in range(stretches)]


def layouts_count(default: int) -> int:
    """The memory layouts a process times its steps in: RUNNER_LAYOUTS, else the backend's `default`."""
    knob = os.environ.get(LAYOUTS_ENV, str(default))
    if not knob.isdigit() or int(knob) < 1:
        raise ConfigError(f"{LAYOUTS_ENV}={knob!r} is not allowed; give a whole number >= 1, or unset it ({default})")
    return int(knob)


def layout_stretch_ends(steps: int, default_layouts: int) -> list[int]:
    """Where each stretch of memory of `steps` timed steps ends: RUNNER_LAYOUTS of them, at most one a step."""
    return stretch_ends(steps, min(layouts_count(default_layouts), steps))


def check_knobs(default_layouts: int) -> None:
    """Refuse a bad benchmark knob of this layer's (docs/trust.md) as the job is planned, before its run opens."""
    layouts_count(default_layouts)
    freed_memory_kept()


def settle(timed_call: Callable[[], float], warm_ms: float, any_rank_cold: Callable[[bool], bool] = bool) -> None:
    """Call the step untimed (`timed_call`: one call, its ms) until it is about as fast as a warm call (`warm_ms`).

    A stretch after a move of memory or another worker's turn starts cold: on this project's host the first
    steps of a sweep worker's first stretch read up to 2.2x its median (docs/trust.md). Ranks in lock step
    call on while any rank is cold (`any_rank_cold`), or one would wait in a collective for ever.
    """
    for call in range(1, MOST_SETTLE_CALLS + 1):
        if not any_rank_cold(timed_call() > SETTLED_RATIO * warm_ms or call < SETTLE_CALLS):
            return


def timed_steps(
    workload: BuiltWorkload,
    backend: Backend,
    spec: RunSpec,
    phase: str,
    steps: int,
    turns: Turns = _NO_TURNS,
    warm: tuple[MemoryLayouts, float] | None = None,
) -> list[float]:
    """`steps` steps' times in ms by the backend's step clock, in RUNNER_LAYOUTS stretches of memory, each in turn.

    The device's clock times `measure.inflight` steps between synchronizes (`Backend.time_steps`). `warm`: the
    layouts the warm-up moved and a warm call's ms there, which a stretch that starts cold is settled to first
    (`settle`; without: `SETTLE_CALLS` calls).
    """
    layouts, warm_ms = warm or (MemoryLayouts(workload.inputs), math.inf)
    samples: list[float] = []
    progress = Progress(phase, steps)
    for stretch, end in enumerate(layout_stretch_ends(steps, backend.traits.default_layouts)):
        turns.take()
        if stretch:
            layouts.move()
        if stretch or isinstance(turns, RefereedTurns):
            settle(
                lambda: backend.time_steps(workload.step, 1, spec.measure.flush_cache)[0],
                warm_ms,
                lambda cold: bool(all_ranks_max(int(cold), backend.device)),
            )
        while len(samples) < end:
            count = min(spec.measure.inflight, end - len(samples))
            samples += backend.time_steps(workload.step, count, spec.measure.flush_cache)
            progress.step(len(samples))
        turns.give()
    return samples


def steady_state(
    workload: BuiltWorkload, backend: Backend, spec: RunSpec, turns: Turns = _NO_TURNS
) -> list[list[float]]:
    """Warm up, then time the steady state's synchronized steps (`steps_to_time`), `measure.repeats` times."""
    repeats, layouts = [], MemoryLayouts(workload.inputs)
    for repeat in range(1, spec.measure.repeats + 1):
        turns.take()
        if layouts_count(backend.traits.default_layouts) > 1:
            layouts.move()  # the first stretch too is timed in a moved layout: the built one read 1.12-1.17x
        call_s = warm_up(workload, backend, spec)
        warm_ms = statistics.median(backend.time_steps(workload.step, WARM_CALLS, spec.measure.flush_cache))
        turns.give()
        phase = f"steady state {repeat}/{spec.measure.repeats}"
        steps = steps_to_time(spec, call_s, backend)
        repeats.append(timed_steps(workload, backend, spec, phase, steps, turns, (layouts, warm_ms)))
    return repeats


def in_this_process(workload: BuiltWorkload, backend: Backend, spec: RunSpec) -> SteadyStateSource:
    """The steady state timed in the job's own process, on the workload it built."""
    return lambda: SteadyState([steady_state(workload, backend, spec)], in_job_process=True)
