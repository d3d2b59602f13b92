"""Which processes measure a job, and where: one `Execution`, planned before the job's run opens.

Planning refuses what cannot run (leaving no run behind), sets the compile caches before the
backend loads its libraries, and does what must come before this process touches the device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from runner.backends.base import Backend, Slot, check_cache_flush
from runner.backends.neuron import NeuronBackend, trainium_generation
from runner.backends.neuron_hbm import device_profiled, first_cores, reservation_note
from runner.backends.peaks import Peak
from runner.backends.registry import make_backend
from runner.config import ConfigError, RunSpec
from runner.execute.in_process import measure_job
from runner.execute.ranks import cross_rank, rank_folder, run_ranks
from runner.execute.slurm_ranks import SlurmTask, check_world, lead, slurm_task
from runner.execute.workers import prepare_workers, steady_state_concurrently
from runner.measure.build import BuiltWorkload, build_workload
from runner.measure.compile_cache import use_compile_cache
from runner.measure.layers import check_layer_names
from runner.measure.loop import SteadyState
from runner.measure.memory import memory_source
from runner.measure.result import JobResult
from runner.measure.roofline import resolve_peak

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measured:
    """What running an `Execution` measured: the job's result and the other ranks' (none unless distributed)."""

    # rank 0's, with the cross-rank metrics and the tag naming the slowest rank
    result: JobResult
    # each other rank's, by the folder its files and metrics go under (rank1, rank2, ...)
    other_ranks: dict[str, JobResult] = field(default_factory=dict)

    @property
    def every_rank(self) -> list[JobResult]:
        """Every rank's result, in rank order."""
        return [self.result, *self.other_ranks.values()]


@dataclass(frozen=True)
class InProcess:
    """The job's own process measures the workload it built; its steady state may be `timed` already.

    Copies are timed before this process touches the device: on Neuron the first process to start
    the runtime holds its NeuronCores, so the copies could not get them after.
    """

    spec: RunSpec
    output_dir: Path
    backend: Backend
    workload: BuiltWorkload
    peak: Peak | None
    timed: SteadyState | None = None

    @property
    def placement(self) -> str:
        """Where the job ran, for the console."""
        return self.backend.placement()

    def run(self) -> Measured:
        """The job's one result."""
        return Measured(measure_job(self.spec, self.output_dir, self.backend, self.workload, self.peak, self.timed))


@dataclass(frozen=True)
class Ranks:
    """The job as ranks, a process each: spawned on this host's slots, or a Slurm job's tasks.

    On this host the job's process never touches the device; in a Slurm job it is task 0: it measures
    as rank 0 and collects the others.
    """

    spec: RunSpec
    output_dir: Path
    backend: Backend
    # a slot per rank on this host, or this process's place among the Slurm job's tasks
    where: list[Slot] | SlurmTask

    @property
    def placement(self) -> str:
        """Where the job ran, for the console."""
        world = self.where.world if isinstance(self.where, SlurmTask) else len(self.where)
        return f"{world} ranks, each on its own share of the machine"

    def run(self) -> Measured:
        """Each rank's result: rank 0's is the job's, with what compares the ranks; the others go under rank<k>/."""
        if isinstance(self.where, SlurmTask):
            results = lead(self.spec, self.output_dir, self.where)
        else:
            results = run_ranks(self.spec, self.output_dir, self.where)
        metrics, tags = cross_rank(results)
        result, *others = results
        result.metrics.update(metrics)
        result.tags.update(tags)
        return Measured(result, {rank_folder(rank): other for rank, other in enumerate(others, 1)})


Execution = InProcess | Ranks


def plan(spec: RunSpec, output_dir: Path, config_key: str = "", rounds_dir: Path | None = None) -> Execution:
    """The backend and how the job is measured (in-process, built here); `config_key` finds its rounds in `rounds_dir`.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    use_compile_cache(spec)  # before the backend loads its libraries, and before anything compiles
    backend = make_backend(spec.backend)
    backend.worker_processes(spec.measure.processes, spec.distributed.ranks)
    check_cache_flush(spec, type(backend))
    if spec.measure.memory_snapshot:
        memory_source(backend, spec.profiler)
    if (task := slurm_task()) is not None:
        check_world(task, spec.distributed.ranks)
        return Ranks(_rank_spec(spec), output_dir, backend, task)
    if spec.distributed.ranks > 1:
        slots = backend.concurrent_slots(spec.distributed.ranks, "distributed.ranks")
        _note_device_profiling(spec, f"distributed.ranks={len(slots)}", first_cores(slots))
        return Ranks(_rank_spec(spec), output_dir, backend, slots)
    if isinstance(backend, NeuronBackend):
        _note_device_profiling(spec, "this job", (backend.cores or [0])[:1])
    timed = SteadyState.load(rounds_dir / f"{config_key}.json") if rounds_dir is not None else None
    if timed is None and backend.worker_processes(spec.measure.processes):
        prepare_workers([spec])
    if spec.measure.copies is not None:
        timed = steady_state_concurrently(spec, backend.concurrent_slots(spec.measure.copies))
    backend.match_workers()
    workload = build_workload(spec.workload, backend)
    if spec.measure.layer_accuracy:
        check_layer_names(workload.eager, spec.measure.layers)
    peak = resolve_peak(spec.measure.peak, backend, spec.workload.dtype)
    return InProcess(spec, output_dir, backend, workload, peak, timed)


def _note_device_profiling(spec: RunSpec, who: str, process_cores: list[int]) -> None:
    """Say what HBM a DEVICE capture reserves on the chip its processes (first cores given) share most."""
    if not device_profiled(spec.profiler.enabled, spec.profiler.modes):
        return
    if note := reservation_note(who, trainium_generation(), process_cores):
        log.log(logging.WARNING if len(process_cores) > 1 else logging.INFO, note)


def _rank_spec(spec: RunSpec) -> RunSpec:
    """The spec each rank runs: its own steps in its own process.

    Raises:
        ConfigError: measure.copies asks for processes of their own (`Backend.worker_processes` refuses the rest).
    """
    ranks = spec.distributed.ranks
    if spec.measure.copies is not None:
        raise ConfigError(f"measure.copies={spec.measure.copies} and distributed.ranks={ranks}: choose one")
    return replace(spec, measure=replace(spec.measure, processes=0))
