"""A sweep's steady state, timed in interleaved rounds before its jobs run.

Timing A's workers, then B's, then C's puts each variant in a different stretch of the host's
noise, and a slow minute reads as a difference between them. Here every job of a sweep first
makes its first call in a worker of its own (its compilation fills the caches); then the steady
state runs in rounds, each starting one fresh worker of every job in a new random order, so a
slow stretch falls on all variants alike and the comparison pairs them round by round
(`runner.measure.stats.paired_time_ratio`). A round's workers take turns a stretch of steps at
a time where their device allows it (`Backend.workers_take_turns`: the CPU), else run one at a
time; given slots (the parallel launcher's), each takes a free slot as the sweep's jobs do. The
sweep's process never touches the device: each worker is a process of its own (on Neuron, one runtime each).

Each job finds its rounds in the sweep's rounds folder under its config hash and uses them as
its steady state; a job that is not there (it takes no part, or a worker of it failed) times
its own.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from runner import names
from runner.backends.base import Backend, Slot
from runner.backends.registry import backend_class
from runner.config import RunSpec
from runner.execute.processes import Child, ChildFailed, answered, stop
from runner.execute.workers import prepare_workers, start_first_call, start_steady_state, steps
from runner.files import write_whole
from runner.measure.loop import RoundPlace, SteadyState
from runner.measure.turns import TurnsAddress, give_turns, referee

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundJob:
    """A job of the sweep whose steady state the rounds time."""

    # the job's name, for the console
    name: str
    # its config hash: where the job finds its rounds
    key: str
    spec: RunSpec
    # its worker processes: the rounds it has a worker in, from the first
    rounds: int


def rounds_of(spec: RunSpec, backend: type[Backend]) -> tuple[int, str]:
    """The rounds a job takes part in (0: none) and, for none, why it times its own steady state."""
    if spec.measure.copies is not None:
        return 0, "its copies time their steps side by side"
    if spec.distributed.ranks > 1:
        return 0, "each of its ranks times its own steps"
    if spec.measure.compile_cache is not None:
        return 0, "its first call must find the compile caches as measure.compile_cache says"
    if not (processes := backend.round_workers(spec.measure.processes)):
        return 0, "measure.processes=0 times it in its own process"
    return processes, ""


def round_orders(rounds: list[int], rng: random.Random) -> list[list[int]]:
    """Per round, the jobs (by index) with a worker in it, in a fresh random order."""
    orders = []
    for number in range(1, max(rounds, default=0) + 1):
        order = [job for job, count in enumerate(rounds) if count >= number]
        rng.shuffle(order)
        orders.append(order)
    return orders


def time_rounds(
    jobs: list[RoundJob], rounds_id: str, slots: list[Slot] | None = None, rng: random.Random | None = None
) -> dict[str, SteadyState]:
    """Each job's steady state by its key, timed in interleaved rounds; a job with a failed worker is left out."""
    failed: set[int] = set()
    prepare_workers([job.spec for job in jobs])
    for index, first in enumerate(jobs):
        log.info("rounds: first call %d/%d: %s ...", index + 1, len(jobs), first.name)
        try:
            with start_first_call(first.spec, first.name) as worker:
                log.info("rounds: %s: first call took %.3f s", first.name, worker.result())
        except ChildFailed as err:
            _leave_out(failed, index, first, err)
    orders = round_orders([job.rounds for job in jobs], rng or random.Random())
    step_ms: dict[int, list[list[list[float]]]] = {job: [] for job in range(len(jobs))}
    places: dict[int, list[RoundPlace]] = {job: [] for job in range(len(jobs))}
    for number, planned in enumerate(orders, 1):
        order = [job for job in planned if job not in failed]
        log.info("rounds: round %d/%d: %s", number, len(orders), ", ".join(jobs[job].name for job in order))
        for position, (job, samples) in enumerate(_round(jobs, order, number, slots), 1):
            if isinstance(samples, ChildFailed):
                _leave_out(failed, job, jobs[job], samples)
                continue
            step_ms[job].append(samples)
            places[job].append(RoundPlace(number, position, len(order)))
    return {
        timed.key: SteadyState(step_ms[index], places=places[index], rounds_id=rounds_id)
        for index, timed in enumerate(jobs)
        if index not in failed
    }


def _round(
    jobs: list[RoundJob], order: list[int], number: int, slots: list[Slot] | None
) -> list[tuple[int, list[list[float]] | ChildFailed]]:
    """One worker of each job in `order`, started in that order: in turns, one at a time, or each in a free slot."""
    if (
        not slots
        and len(order) > 1
        and all(backend_class(jobs[job].spec.backend.name).workers_take_turns for job in order)
    ):
        return _round_in_turns(jobs, order, number)
    results: list[tuple[int, list[list[float]] | ChildFailed]] = []
    free = list(slots or [])
    running: dict[Child, tuple[int, Slot]] = {}
    try:
        for job in order:
            spec, name = jobs[job].spec, f"round {number} worker of {jobs[job].name}"
            if not slots:
                results.append((job, _steps_or_failure(start_steady_state(spec, name, number))))
                continue
            while not free:
                for worker in answered(running):
                    done, slot = running.pop(worker)
                    results.append((done, _steps_or_failure(worker)))
                    free.append(slot)
            slot = free.pop(0)
            # the slot's environment places the worker; backend.cores would pin it back to the job's cores
            unpinned = replace(spec, backend=spec.backend.unpinned())
            running[start_steady_state(unpinned, f"{name} [{slot.name}]", number, slot)] = (job, slot)
        for worker, (job, _) in running.items():
            results.append((job, _steps_or_failure(worker)))
    finally:
        stop(running)
    started = {job: place for place, job in enumerate(order)}  # positions are start order, not end order
    return sorted(results, key=lambda result: started[result[0]])


def _round_in_turns(
    jobs: list[RoundJob], order: list[int], number: int
) -> list[tuple[int, list[list[float]] | ChildFailed]]:
    """One worker of each job, all started at once, running a stretch at a time in `order`'s turns.

    The host's drift over seconds then falls on every job's stretches alike (runner.measure.turns);
    a worker that fails is left out of the turns, and its job out of the rounds.
    """
    workers: dict[int, Child] = {}
    with referee() as (path, listener):
        try:
            for job in order:
                name = f"round {number} worker of {jobs[job].name}"
                workers[job] = start_steady_state(jobs[job].spec, name, number, turns_at=TurnsAddress(path, str(job)))
            try:
                give_turns(listener, [str(job) for job in order], lambda job: not workers[int(job)].is_alive())
            except TimeoutError as err:  # the workers waiting for turns then fail too
                log.warning("rounds: round %d: %s", number, err)
            return [(job, _steps_or_failure(worker)) for job, worker in workers.items()]
        finally:
            stop(workers.values())


def _steps_or_failure(worker: Child) -> list[list[float]] | ChildFailed:
    try:
        return steps(worker)
    except ChildFailed as err:
        return err


def _leave_out(failed: set[int], index: int, job: RoundJob, err: ChildFailed) -> None:
    failed.add(index)
    log.warning("rounds: %s left out, it will time its own steady state: %s", job.name, str(err).splitlines()[0])


def save_rounds(folder: Path, measured: dict[str, SteadyState]) -> None:
    """Write each job's rounds where it will look for them."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, steady in measured.items():
        write_whole(folder / f"{key}.json", json.dumps(asdict(steady)))


def sweep_rounds(key: str) -> SteadyState | None:
    """The steady state the sweep's rounds (`names.ROUNDS_DIR_ENV`) timed for the job with this key, if any."""
    folder = os.environ.get(names.ROUNDS_DIR_ENV)
    if not folder or not (path := Path(folder) / f"{key}.json").is_file():
        return None
    data = json.loads(path.read_text())
    data["places"] = [RoundPlace(**place) for place in data["places"]]
    return SteadyState(**data)
