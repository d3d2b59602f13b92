"""Who times a job's steady state (`steady_state_timing`), and the fresh worker processes that may.

The plan, the job's process and a sweep's rounds all ask `steady_state_timing`. Workers run one after another
(`measure.processes`) or side by side (`measure.copies`).

One after another, pyperf-style: a process carries state from what ran before (heap mode, thread
pools, the profiler's initialisation), and a median that depends on it moves from run to run.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import multiprocessing
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from enum import Enum
from multiprocessing.synchronize import Barrier
from typing import Any

import torch

from runner import names
from runner.backends.base import WHOLE_MACHINE, Backend, Placement, Slot
from runner.backends.registry import backend_class, make_backend
from runner.config import ConfigError, RunSpec
from runner.execute.processes import FORK_SERVER_PRELOAD, Child, StartMethod, start_fork_server, stop
from runner.measure.accuracy import check_accuracy, check_finite
from runner.measure.build import build_workload
from runner.measure.host_memory import keep_freed_memory
from runner.measure.loop import RoundPlace, SteadyState, steady_state, timed_step, timed_steps, warm_up
from runner.measure.turns import TurnsAddress, turns_for

log = logging.getLogger(__name__)
# how long a copy waits for the others to be ready (their first calls may compile)
_BARRIER_TIMEOUT_S = 1800
# what torch.profiler imports as it first starts (`prepare_trace` asks `hasattr(torch,
# "_inductor")`): 1.6-2.2 s on this project's 2-core host, paid by the job's first profiled window
_PROFILER_PRELOAD = ("torch._inductor",)
# a benchmark's knob, no config key (docs/trust.md): spawn starts each worker in a new interpreter, not a fork
WORKER_START_ENV = "RUNNER_WORKER_START"


class Timer(Enum):
    """Who times a job's steady state."""

    RANKS = "ranks"  # each rank, in its own process
    COPIES = "copies"  # measure.copies processes, side by side
    ROUNDS = "rounds"  # its sweep's rounds (runner.sweep.rounds), a worker per round, interleaved with other jobs'
    WORKERS = "workers"  # measure.processes fresh workers of the job's own, one after another
    OWN_PROCESS = "own process"  # the job's process, which is then warm for what follows


@dataclass(frozen=True)
class Timing:
    """Who times a job's steady state, in how many processes, and why: a sweep says it for jobs not in its rounds."""

    timer: Timer
    # the rounds' or fresh workers, or the copies; 0 in the job's (or each rank's) own process
    processes: int
    why: str


def steady_state_timing(spec: RunSpec, backend: type[Backend], rounds: bool) -> Timing:
    """Who times the job's steady state on `backend`; `rounds`: its sweep times its jobs in rounds before they run.

    The plan, the job's process and the sweep's rounds all ask here, so they cannot disagree on who times a job.

    Raises:
        ConfigError: measure.processes asks for worker processes that `backend` cannot serve.
    """
    if spec.distributed.ranks > 1:
        return Timing(Timer.RANKS, 0, "each of its ranks times its own steps")
    if spec.measure.copies is not None:
        return Timing(Timer.COPIES, spec.measure.copies, "its copies time their steps side by side")
    why = ""
    if rounds:
        if spec.measure.compile_cache is not None:
            why = "its first call must find the compile caches as measure.compile_cache says"
        # the rounds run before any job holds the device: even a device whose job process holds it has worker rounds
        elif workers := (
            backend.traits.default_processes
            if spec.measure.processes is None
            else backend.worker_processes(spec.measure.processes)
        ):
            return Timing(Timer.ROUNDS, workers, "its sweep's rounds time it, interleaved with the other jobs'")
    if processes := backend.worker_processes(spec.measure.processes):
        return Timing(Timer.WORKERS, processes, why or f"{processes} fresh worker processes time it, one after another")
    return Timing(Timer.OWN_PROCESS, 0, why or "measure.processes=0 times it in its own process")


@dataclass(frozen=True)
class WorkerStart:
    """How a job's workers and copies start (runner.execute.processes), and why: for the manifest."""

    method: StartMethod
    why: str


def worker_start(environ: Mapping[str, str] = os.environ) -> WorkerStart:
    """A fork of the fork server where the platform and `RUNNER_WORKER_START` allow it, else a spawn.

    Every device allows it: the server touches no device (a child forked after CUDA or the Neuron
    runtime started cannot use it; autoload waits for first use; reference: sections 5.1, 10.6).
    """
    requested = environ.get(WORKER_START_ENV, "auto")
    if requested not in ("auto", "spawn"):
        raise ConfigError(f"{WORKER_START_ENV}={requested!r} is not allowed; choose one of: auto, spawn")
    if requested == "spawn":
        return WorkerStart("spawn", f"{WORKER_START_ENV}=spawn")
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return WorkerStart("spawn", f"multiprocessing has no fork server on {sys.platform}")
    return WorkerStart("forkserver", f"forked from a server that imported {', '.join(FORK_SERVER_PRELOAD)}")


def _set_what_start_reads(spec: RunSpec) -> None:
    """Set what an interpreter reads as it starts (MALLOC_*, OMP_NUM_THREADS), which a fork has from its server."""
    keep_freed_memory()
    if (threads := os.environ.get("OMP_NUM_THREADS", "")).isdigit():  # torch reads it only as it loads
        torch.set_num_threads(int(threads))


def _worker(
    spec: RunSpec, start_together: Barrier | None, placement: Placement | None, turns_at: TurnsAddress | None = None
) -> tuple[list[list[float]], float, float]:
    # born ignoring SIGINT (runner.execute.processes): the job stops its workers itself
    try:
        turns = turns_for(turns_at)
        turns.take()  # whatever this worker runs happens in its turns: the others time theirs meanwhile
        _set_what_start_reads(spec)
        if placement is not None:
            placement.take()  # before the workload's first call starts torch's threads
        backend = make_backend(spec.backend)
        workload = build_workload(spec.workload, backend)
        timed_step(workload, backend)  # its first call: compilation, caches
        turns.give()
        if start_together is None:
            samples = steady_state(workload, backend, spec, turns)
            turns.finish()
            return samples, 0.0, 0.0
        warm_up(workload, backend, spec)
        start_together.wait(_BARRIER_TIMEOUT_S)
        started = time.monotonic()  # one clock for every process on the machine
        # every copy times all of measure.steps: their throughput is counted over one shared window
        samples = [
            timed_steps(workload, backend, spec, "copy steady state", spec.measure.steps)
            for _ in range(spec.measure.repeats)
        ]
        return samples, started, time.monotonic()
    except Exception:
        if start_together is not None:
            start_together.abort()  # the other copies stop waiting for this one
        raise


def device_runtime_installed() -> bool:
    """Whether torch here could start a device runtime: a CUDA build, or torch-neuronx installed (no runtime starts).

    A process forked after the runtime started, or after CUDA's device count was asked, cannot use
    the device ("Cannot re-initialize CUDA in forked subprocess"). Importing the compiler asks it on
    a CUDA build: on an H200 every compiled job's forked workers failed so, and CPU jobs' too.
    """
    return torch.version.cuda is not None or importlib.util.find_spec("torch_neuronx") is not None


def prepare_workers(specs: list[RunSpec]) -> None:
    """Start a fork server now, its imports beside the job's work; import here what the job needs before it times.

    The server preloads the compiler only where no device runtime is installed (`device_runtime_installed`).
    """
    if worker_start().method == "forkserver":
        compiling = [] if device_runtime_installed() else [spec for spec in specs if spec.workload.compile]
        compiled = {backend_class(spec.backend.name) for spec in compiling}
        preload = dict.fromkeys(module for backend in compiled for module in backend.traits.compiler_preload)
        start_fork_server(preload)
        profiled = _PROFILER_PRELOAD if any(spec.profiler.enabled for spec in specs) else ()
        for module in (*profiled, *preload):
            with suppress(ImportError):  # as in the server: whoever needs it imports it then, and says why
                importlib.import_module(module)


def _first_call(spec: RunSpec) -> float:
    """Build the workload and make its first call (compilation fills the caches); its seconds."""
    _set_what_start_reads(spec)
    backend = make_backend(spec.backend)
    return timed_step(build_workload(spec.workload, backend), backend)


def _checked_first_call(spec: RunSpec) -> dict[str, str | float]:
    """Build the workload, make its first call, then check its output as a job does: the side's non-timing lines.

    Its first call's seconds, the device memory peak of that step where the backend counts one, whether its
    output is finite and, with measure.accuracy, its accuracy check: under the names a run logs them.
    """
    _set_what_start_reads(spec)
    backend = make_backend(spec.backend)
    workload = build_workload(spec.workload, backend)
    logged: dict[str, str | float] = {names.FIRST_CALL_S: timed_step(workload, backend)}
    if (peak := backend.peak_memory_bytes()) is not None:  # the step's, before the checks' own tensors
        logged[names.PEAK_DEVICE_MB] = peak / 2**20
    with torch.no_grad():  # after the first call, so compilation stays in it
        output = workload.module(*workload.inputs)
    logged.update(check_finite(output))
    if spec.measure.accuracy:
        logged.update(check_accuracy(workload.eager, workload.inputs, output, spec.workload.dtype)[1])
    return logged


def checked_first_call(spec: RunSpec, name: str) -> dict[str, str | float]:
    """A worker's first call and output checks (`_checked_first_call`), once it answers; the worker is stopped."""
    with _start(f"check worker of {name}", _checked_first_call, spec) as worker:
        return worker.result()  # type: ignore[no-any-return]


def _placement(spec: RunSpec, number: int, slot: Slot) -> Placement | None:
    """Where worker `number` (from 1) of this spec runs on its share of the machine, as its backend decides."""
    return backend_class(spec.backend.name).worker_placement(spec.backend, number, slot)


def _start(name: str, target: Callable[..., Any], spec: RunSpec, *args: Any, slot: Slot = WHOLE_MACHINE) -> Child:
    method = worker_start().method
    return Child(name, target, spec, *args, env=dict(slot.env), start_method=method)


def start_first_call(spec: RunSpec, name: str) -> Child:
    """A worker that makes the workload's first call only: `Child.result()` is its seconds."""
    return _start(f"first-call worker of {name}", _first_call, spec)


def start_steady_state(
    spec: RunSpec, name: str, number: int, slot: Slot = WHOLE_MACHINE, turns_at: TurnsAddress | None = None
) -> Child:
    """Steady-state worker `number` (from 1) on `slot`, in `turns_at`'s turns if given: `steps(worker)` reads it."""
    return _start(name, _worker, spec, None, _placement(spec, number, slot), turns_at, slot=slot)


def _result(worker: Child, timeout_s: float | None = None) -> tuple[list[list[float]], float, float]:
    with worker:  # a stop, an error in the pipe, no answer in time: never leave a worker behind
        return worker.result(timeout_s)  # type: ignore[no-any-return]


def steps(worker: Child, timeout_s: float | None = None) -> list[list[float]]:
    """A steady-state worker's per-repeat step times in ms, once it answers (ChildSilent: not within `timeout_s`).

    The worker is stopped whatever happens.
    """
    return _result(worker, timeout_s)[0]


def steady_state_in_processes(spec: RunSpec, count: int, turns_at: TurnsAddress | None = None) -> SteadyState:
    """Per worker process, its per-repeat step times in ms; one at a time (with `turns_at`, taking turns)."""
    runs = []
    for number in range(1, count + 1):
        log.info("steady state: worker process %d/%d ...", number, count)
        runs.append(steps(start_steady_state(spec, f"steady-state worker {number}", number, turns_at=turns_at)))
    places = [RoundPlace(number, 1, 1) for number in range(1, count + 1)]
    return SteadyState(runs, places=places, rounds_id=uuid.uuid4().hex)


def steady_state_concurrently(spec: RunSpec, slots: list[Slot]) -> SteadyState:
    """The copies' step times (one per slot, timing together) and the seconds all their timed steps spanned.

    The job's own process must not hold the device meanwhile: on Neuron the first process to start
    the runtime keeps its cores.
    """
    # the slot's environment pins each copy; backend.cores would pin every copy back to the job's cores
    spec = replace(spec, backend=spec.backend.unpinned())
    method = worker_start().method
    start_together = multiprocessing.get_context(method).Barrier(len(slots))
    log.info("steady state: %d copies at once (%s) ...", len(slots), "; ".join(slot.name for slot in slots))
    workers: list[Child] = []
    try:
        for number, slot in enumerate(slots, 1):
            placement = _placement(spec, number, slot)
            workers.append(_start(f"copy {number}", _worker, spec, start_together, placement, slot=slot))
        results = [_result(worker) for worker in workers]
        window_s = max(end for _, _, end in results) - min(start for _, start, _ in results)
        return SteadyState([samples for samples, _, _ in results], window_s)
    finally:
        stop(workers)  # a failed or stopped copy: never leave the others behind
