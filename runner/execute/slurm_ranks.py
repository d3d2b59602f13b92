"""A job as the tasks of one Slurm job, across hosts (`hydra/launcher=slurm`, `distributed.ranks`): one rank each.

Task 0 is the job (status file, MLflow run): it measures as rank 0, then collects the others'
results, which each leaves (or its traceback) in `rank<k>/rank_result.pickle` under the job's
folder, shared by a Slurm sweep's nodes.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from dataclasses import dataclass, replace
from pathlib import Path

from runner.config import ConfigError, RunSpec
from runner.execute.processes import Answer, ChildFailed, ChildRaised
from runner.execute.ranks import Rendezvous, measure_rank, rank_folder, torchrun_env
from runner.files import write_whole
from runner.measure.result import JobResult

log = logging.getLogger(__name__)
RESULT_FILE = "rank_result.pickle"
# how often task 0 looks for the other ranks' results, and how long it waits for the rest of
# their word once one rank has failed (a raising rank writes its traceback at once)
POLL_S = 0.5
LAST_WORDS_S = 10.0


@dataclass(frozen=True)
class SlurmTask:
    """A process's place among the tasks of its Slurm job."""

    rank: int
    world: int
    local_rank: int
    tasks_per_node: int
    node: int
    job_id: str


def slurm_task() -> SlurmTask | None:
    """The Slurm task this process is, when submitit runs the job as several tasks; else None."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or int(os.environ.get("SLURM_NTASKS", "1")) < 2:
        return None
    import submitit

    env = submitit.JobEnvironment()
    per_node = env.num_tasks // env.num_nodes
    return SlurmTask(env.global_rank, env.num_tasks, env.local_rank, per_node, env.node, env.job_id)


def check_world(task: SlurmTask, ranks: int) -> None:
    """Refuse a Slurm job whose task count is not the configured number of ranks.

    Raises:
        ConfigError: naming distributed.ranks and the launcher's keys.
    """
    if task.world != ranks:
        raise ConfigError(
            f"distributed.ranks={ranks}, but the Slurm job has {task.world} tasks "
            "(hydra.launcher.nodes x hydra.launcher.tasks_per_node); make them equal"
        )


def task_env(task: SlurmTask) -> dict[str, str]:
    """The variables torchrun would give this task, meeting where submitit says the job's ranks meet."""
    from submitit.helpers import TorchDistributedEnvironment

    found = TorchDistributedEnvironment()  # the allocation's first node, a port chosen from the job id
    rendezvous = Rendezvous(found.master_addr, found.master_port, task.job_id)
    return torchrun_env(rendezvous, task.rank, task.world, task.local_rank, task.tasks_per_node, task.node)


def _measure_task(spec: RunSpec, output_dir: Path, task: SlurmTask) -> JobResult:
    """Rendezvous, pin this task to its share of its node, and measure it as its rank."""
    from runner.backends.registry import make_backend

    os.environ.update(task_env(task))
    # the slot pins the task; backend.cores would pin every task of a node to the same cores
    spec = replace(spec, backend=spec.backend.unpinned())
    backend = make_backend(spec.backend)
    slot = backend.concurrent_slots(task.tasks_per_node, "hydra.launcher.tasks_per_node")[task.local_rank]
    backend.take_slot(slot)
    log.info("rank %d of %d on %s: %s", task.rank, task.world, os.uname().nodename, slot.name)
    return measure_rank(spec, output_dir, task.rank)


def follow(spec: RunSpec, output_dir: Path, task: SlurmTask) -> None:
    """A task other than 0: measure as its rank and leave the result, or the traceback, for task 0."""
    try:
        check_world(task, spec.distributed.ranks)  # else task 0 refuses the job: no rendezvous to wait for
        answer = Answer(value=_measure_task(spec, output_dir, task))
    except Exception as err:  # anything: task 0 reports it, naming this rank
        answer = Answer.of_error(err)
    # whole or absent: task 0 never reads half a result
    write_whole(output_dir / rank_folder(task.rank) / RESULT_FILE, pickle.dumps(answer))


def lead(spec: RunSpec, output_dir: Path, task: SlurmTask) -> list[JobResult]:
    """Task 0: measure as rank 0, then every rank's JobResult in rank order.

    Raises:
        ChildFailed: naming the rank that raised, or those with no result within distributed.timeout_s.
    """
    try:
        own = _measure_task(spec, output_dir, task)
    except Exception as err:  # another rank's failure breaks rank 0's collectives: name that rank first
        reports = _await_reports(output_dir, task.world, LAST_WORDS_S, until_an_error=True)
        _raise_first_error(reports)
        silent = _silent(reports, task.world)
        hint = f"rank {silent} left no result: it died or hung" if silent else ""
        raise ChildRaised("rank 0", Answer.of_error(err), hint) from err
    reports = _await_reports(output_dir, task.world, spec.distributed.timeout_s)
    _raise_first_error(reports)
    if silent := _silent(reports, task.world):
        raise ChildFailed(f"rank {silent} left no result within distributed.timeout_s (it died or hung)")
    return [own, *(reports[rank].value for rank in range(1, task.world))]


def _await_reports(output_dir: Path, world: int, wait_s: float, until_an_error: bool = False) -> dict[int, Answer]:
    """What ranks 1.. left, once all have (or one failed, with `until_an_error`), or after `wait_s`."""
    deadline = time.monotonic() + wait_s
    reports: dict[int, Answer] = {}
    while True:
        for rank in range(1, world):
            path = output_dir / rank_folder(rank) / RESULT_FILE
            if rank not in reports and path.is_file():
                reports[rank] = pickle.loads(path.read_bytes())
        failed = any(answer.error is not None for answer in reports.values())
        if len(reports) == world - 1 or (until_an_error and failed) or time.monotonic() > deadline:
            return reports
        time.sleep(POLL_S)


def _raise_first_error(reports: dict[int, Answer]) -> None:
    for rank, answer in sorted(reports.items()):
        if answer.error is not None:
            raise ChildRaised(f"rank {rank}", answer)


def _silent(reports: dict[int, Answer], world: int) -> str:
    """The ranks that left nothing, as a list to print ("" when none)."""
    return ", ".join(str(rank) for rank in range(1, world) if rank not in reports)
