"""The two ways a job is measured, planned by `runner.execute.plan`: in the job's own process, or as ranks.

Each `Execution` runs to what it `Measured`: the job's result and, as ranks, the other ranks'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runner.backends.base import Backend, Slot
from runner.backends.peaks import Peak
from runner.config import RunSpec
from runner.execute.in_process import measure_job
from runner.execute.ranks import cross_rank, rank_folder, run_ranks
from runner.execute.slurm_ranks import SlurmTask, lead
from runner.measure.build import BuiltWorkload
from runner.measure.loop import SteadyState
from runner.measure.result import JobResult


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
