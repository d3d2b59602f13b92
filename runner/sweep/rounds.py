"""A sweep's steady state, timed in interleaved rounds (`runner.execute.rounds`) before its launcher runs the jobs.

Each job's first call fills the caches in a worker of its own, and the sweep's process never touches the device.
A job's rounds are left under its config hash in `names.ROUNDS_FOLDER`; a job not there times its own.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from runner import names
from runner.backends.base import Slot, check_cache_flush
from runner.backends.neuron import trainium_generation
from runner.backends.neuron_hbm import device_profiled, first_cores, reservation_note
from runner.backends.registry import backend_class
from runner.config import ConfigError, RunSpec
from runner.config_loading import load_run_spec
from runner.execute.processes import Child, ChildFailed, ChildSilent, answered, stop
from runner.execute.rounds import or_failure, round_orders, run_round
from runner.execute.workers import (
    Timer,
    prepare_workers,
    start_first_call,
    start_steady_state,
    steady_state_timing,
    steps,
)
from runner.job import STATUS_FILE, SWEEP_ID_ENV, JobStatus, config_hash, finished_run_id, write_status
from runner.measure.loop import RoundPlace, SteadyState, save_hung
from runner.measure.turns import TurnsAddress
from runner.secrets import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundJob:
    """A job of the sweep whose steady state the rounds time."""

    name: str  # for the console
    key: str  # its config hash: where the job finds its rounds
    spec: RunSpec
    rounds: int  # the rounds it has a worker in, from the first
    resume: bool = False  # whether a FINISHED run of its configuration skips it

    def skipped(self) -> bool:
        """True when it resumes and its configuration has a FINISHED run."""
        tracking = self.spec.tracking
        return self.resume and tracking.enabled and finished_run_id(tracking, self.key) is not None


class JobSide:
    """A job as a side of the rounds (`runner.execute.rounds.Side`): a fresh worker of this process's fork server."""

    def __init__(self, index: int, job: RoundJob) -> None:
        self.name = str(index)
        self.job = job
        self._worker: Child | None = None

    def start(self, number: int, turns_at: TurnsAddress | None) -> None:
        """Start the job's worker of round `number`."""
        name = f"round {number} worker of {self.job.name}"
        self._worker = start_steady_state(self.job.spec, name, number, turns_at=turns_at)

    def ended(self) -> bool:
        """Whether its worker has ended."""
        return self._worker is not None and not self._worker.is_alive()

    def result(self, timeout_s: float | None = None) -> list[list[float]]:
        """Its worker's per-repeat step times in ms (the worker is stopped whatever happens)."""
        assert self._worker is not None
        return steps(self._worker, timeout_s)

    def stop(self) -> None:
        """Stop its worker if it still runs."""
        if self._worker is not None:
            stop([self._worker])


@dataclass
class RoundsOutcome:
    """What the rounds left each job, by its key: its steady state, or why it hung (timing it again would hang too)."""

    steady: dict[str, SteadyState]
    hung: dict[str, str]


def time_rounds(
    jobs: list[RoundJob],
    rounds_id: str,
    slots: list[Slot] | None = None,
    rng: random.Random | None = None,
    timeout_s: float | None = None,
) -> RoundsOutcome:
    """Each job's steady state, timed in interleaved rounds, each worker stopped past `timeout_s` (None: no limit).

    A job whose worker failed is left out (it times its own steady state and meets its error itself);
    one whose worker ran past `timeout_s` is left out as hung.
    """
    failed: set[int] = set()
    hung: dict[str, str] = {}
    prepare_workers([job.spec for job in jobs])
    for index, first in enumerate(jobs):
        log.info("rounds: first call %d/%d: %s ...", index + 1, len(jobs), first.name)
        try:
            with start_first_call(first.spec, first.name) as worker:
                log.info("rounds: %s: first call took %.3f s", first.name, worker.result(timeout_s))
        except ChildSilent:
            hung[first.key] = _leave_out_hung(failed, index, first, "its first call", timeout_s)
        except ChildFailed as err:
            _leave_out(failed, index, first, err)
    orders = round_orders([job.rounds for job in jobs], rng or random.Random())
    steady = {index: SteadyState([], rounds_id=rounds_id) for index in range(len(jobs))}
    for number, planned in enumerate(orders, 1):
        order = [job for job in planned if job not in failed]
        log.info("rounds: round %d/%d: %s", number, len(orders), ", ".join(jobs[job].name for job in order))
        if slots:
            results = _round_in_slots(jobs, order, number, slots, timeout_s)
        else:
            in_turns = all(backend_class(jobs[job].spec.backend.name).traits.workers_take_turns for job in order)
            results = run_round([JobSide(job, jobs[job]) for job in order], number, in_turns, timeout_s)
        for position, (job, samples) in enumerate(zip(order, results, strict=True), 1):
            if isinstance(samples, ChildSilent):
                hung[jobs[job].key] = _leave_out_hung(failed, job, jobs[job], f"round {number}", timeout_s)
            elif isinstance(samples, ChildFailed):
                _leave_out(failed, job, jobs[job], samples)
            else:
                steady[job].step_ms.append(samples)
                steady[job].places.append(RoundPlace(number, position, len(order)))
    return RoundsOutcome({jobs[index].key: timed for index, timed in steady.items() if index not in failed}, hung)


def _round_in_slots(
    jobs: list[RoundJob], order: list[int], number: int, slots: list[Slot], timeout_s: float | None
) -> list[list[list[float]] | ChildFailed]:
    """One worker of each job in `order`, started in that order, each in a free slot; results in `order`.

    A worker still running `timeout_s` after it started is stopped, its result a ChildSilent.
    """
    results: dict[int, list[list[float]] | ChildFailed] = {}
    free = list(slots)
    running: dict[Child, tuple[int, Slot, float]] = {}

    def collect(worker: Child) -> None:
        done, slot, started = running.pop(worker)
        left = None if timeout_s is None else max(0.0, started + timeout_s - time.monotonic())
        results[done] = or_failure(partial(steps, worker, left))
        free.append(slot)

    try:
        for job in order:
            while not free:  # the first to answer, or past its time the oldest, frees its slot
                oldest = min(running, key=lambda worker: running[worker][2])
                wait_s = None if timeout_s is None else max(0.0, running[oldest][2] + timeout_s - time.monotonic())
                for worker in answered(running, wait_s) or [oldest]:
                    collect(worker)
            slot = free.pop(0)
            # the slot's environment places the worker; backend.cores would pin it back to the job's cores
            unpinned = replace(jobs[job].spec, backend=jobs[job].spec.backend.unpinned())
            name = f"round {number} worker of {jobs[job].name} [{slot.name}]"
            running[start_steady_state(unpinned, name, number, slot)] = (job, slot, time.monotonic())
        for worker in list(running):
            collect(worker)
    finally:
        stop(running)
    return [results[job] for job in order]


def _leave_out(failed: set[int], index: int, job: RoundJob, err: ChildFailed) -> None:
    failed.add(index)
    log.warning("rounds: %s left out, it will time its own steady state: %s", job.name, str(err).splitlines()[0])


def _leave_out_hung(failed: set[int], index: int, job: RoundJob, where: str, timeout_s: float | None) -> str:
    """Leave the job out as hung (`where`: its worker past `timeout_s`); why, for the job to fail with."""
    failed.add(index)
    why = f"its workload hung: {where} gave no answer within {timeout_s or 0:g} s (hydra.launcher.timeout_s)"
    log.error("rounds: %s left out, and fails without running: %s", job.name, why)
    return why


def _round_job(job_config: DictConfig, swept: set[str]) -> RoundJob | str:
    """The job as the rounds time it, or why it times its own steady state.

    Raises:
        ConfigError: the job's config is refused, naming the job and its overrides (its turn may come late).
    """
    task = copy.deepcopy(job_config)
    with open_dict(task):
        del task["hydra"]
    workload = job_config.hydra.runtime.choices.get("workload") or "custom"
    overrides = [redact(o) for o in job_config.hydra.overrides.task]
    name = names.job_name(workload, overrides, swept)
    try:
        spec = load_run_spec(task)
        # the class, not a backend: making one pins this process (NEURON_RT_VISIBLE_CORES), which every job inherits
        backend = backend_class(spec.backend.name)
        check_cache_flush(spec, backend)  # the job would refuse it too, once its turn came
        timing = steady_state_timing(spec, backend, rounds=True)
    except ConfigError as err:
        raise ConfigError(f"sweep job {job_config.hydra.job.num} [{' '.join(overrides)}]: {err}") from None
    if timing.timer is not Timer.ROUNDS:
        return timing.why
    key = config_hash(OmegaConf.to_container(task, resolve=True))  # type: ignore[arg-type]
    return RoundJob(name, key, spec, timing.processes, bool(task.get("resume", True)))


def before_launch(
    config: DictConfig, job_configs: list[DictConfig], slots: list[Slot] | None = None, timeout_s: float | None = None
) -> None:
    """Before a launcher of the runner's sweep runs these jobs: check each, mark each scheduled, time them in rounds.

    Jobs that run side by side in `slots` with DEVICE profiling hear what HBM its captures reserve on a chip.

    A job a stop keeps from starting stays scheduled, which the sweep's summary counts as not run. `slots`: those the
    parallel launcher runs the jobs in, where the rounds run their workers too; None when jobs run one at a time.
    `timeout_s`: the launcher's, which bounds each of a job's workers too (None: no limit).
    """
    swept, saved, sweep_id = names.swept_keys(), HydraConfig.instance().cfg, os.environ[SWEEP_ID_ENV]
    jobs, own = [], Counter[str]()
    try:
        for job_config in job_configs:  # a job's bad config refuses the sweep before any job is scheduled
            HydraConfig.instance().set_config(job_config)  # for the job's own ${hydra:...} values
            if isinstance(job := _round_job(job_config, swept), RoundJob):
                jobs.append(job)
            else:
                own[job] += 1
        for job_config in job_configs:
            HydraConfig.instance().set_config(job_config)
            job_dir = Path(job_config.hydra.sweep.dir, str(job_config.hydra.sweep.subdir))
            overrides = " ".join(redact(o) for o in job_config.hydra.overrides.task)
            try:
                write_status(job_dir, status=JobStatus.SCHEDULED, sweep_id=sweep_id, overrides=overrides)
            except OSError as err:  # the job's own start says so too; the summary then cannot count it unrun
                log.error("could not write %s in %s: %s", STATUS_FILE, job_dir, err.strerror or err)
    finally:
        HydraConfig.instance().cfg = saved
    for why, count in own.items():  # once per reason, not once per job
        log.info("rounds: %d of %d jobs time their own steady state: %s", count, len(job_configs), why)
    if slots and any(device_profiled(bool(job.profiler.enabled), job.profiler.modes) for job in job_configs):
        jobs_at_once = f"hydra.launcher.jobs={len(slots)}"
        if note := reservation_note(jobs_at_once, trainium_generation(), first_cores(slots)):
            log.warning(note)  # the jobs' own plans each see one process
    time_sweep_rounds(config, jobs, sweep_id, slots, timeout_s)


def time_sweep_rounds(
    config: DictConfig,
    candidates: list[RoundJob],
    sweep_id: str,
    slots: list[Slot] | None = None,
    timeout_s: float | None = None,
) -> None:
    """Time the jobs' steady state in rounds (when two take part) into the folder they read, emptied of older rounds.

    A job whose workload hung finds why there instead, and fails without running it again.
    """
    folder = Path(config.hydra.sweep.dir) / names.ROUNDS_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    jobs = [candidate for candidate in candidates if not candidate.skipped()]
    if len(jobs) < 2:
        return
    outcome = time_rounds(jobs, sweep_id, slots, timeout_s=timeout_s)
    for key, steady in outcome.steady.items():
        steady.save(folder / f"{key}.json")
    for key, why in outcome.hung.items():
        save_hung(folder / f"{key}.json", why)
