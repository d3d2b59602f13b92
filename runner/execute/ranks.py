"""A job as N torch.distributed ranks on this host (`distributed.ranks=N`), each a spawned process on its own slot.

The job's own process only coordinates: it never touches the device (on Neuron the first process
to start the runtime keeps its cores) nor joins a collective, so it sees a rank die or fail at once.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from runner import names
from runner.backends.base import Slot
from runner.backends.registry import make_backend
from runner.config import RunSpec
from runner.execute.in_process import measure_job
from runner.execute.processes import Child, ChildDied, ChildRaised, answered, stop
from runner.measure.build import build_workload
from runner.measure.collectives import collective_timing
from runner.measure.result import JobResult
from runner.measure.roofline import resolve_peak
from runner.measure.traces import steps_under

log = logging.getLogger(__name__)


def rank_folder(rank: int) -> str:
    """The output and artifact folder of one rank: rank0, rank1, ..."""
    return names.RANK_FOLDER.format(rank=rank)


def free_port() -> int:
    """A loopback port free now, for a rendezvous that starts in a moment."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks of one job meet (rank 0's host and a free port there), and the job's id."""

    address: str
    port: int
    run_id: str


def torchrun_env(
    rendezvous: Rendezvous, rank: int, world: int, local_rank: int, local_world: int, node: int
) -> dict[str, str]:
    """Every variable torchrun gives a rank (torch/distributed/elastic/agent/server/local_elastic_agent.py).

    TorchNeuron's process group takes torchrun's path only with LOCAL_RANK and LOCAL_WORLD_SIZE set.
    """
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(world // local_world),
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": rendezvous.address,
        "MASTER_PORT": str(rendezvous.port),
        "TORCHELASTIC_RUN_ID": rendezvous.run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def measure_rank(spec: RunSpec, output_dir: Path, rank: int) -> JobResult:
    """Join the ranks (torchrun's variables are set), measure the job as this rank, leave; its JobResult."""
    backend = make_backend(spec.backend)
    timeout = timedelta(seconds=spec.distributed.timeout_s)
    try:
        dist.init_process_group(backend.traits.collective_backend, timeout=timeout)
        workload = build_workload(spec.workload, backend)
        peak = resolve_peak(spec.measure.peak, backend, spec.workload.dtype)
        return measure_job(spec, output_dir / rank_folder(rank), backend, workload, peak, None)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(spec: RunSpec, output_dir: Path, slots: list[Slot]) -> list[JobResult]:
    """Each rank's JobResult, in rank order; the first rank to fail or die fails the job.

    Raises:
        ChildFailed: naming the rank that raised, died or hung, after every rank is stopped.
    """
    world = len(slots)
    # the slot's environment pins each rank; backend.cores would pin every rank to the job's cores
    spec = replace(spec, backend=spec.backend.unpinned())
    rendezvous = Rendezvous("127.0.0.1", free_port(), uuid.uuid4().hex)
    ranks: list[Child] = []
    try:
        for rank, slot in enumerate(slots):
            own = torchrun_env(rendezvous, rank, world, local_rank=rank, local_world=world, node=0)
            env = {**own, **dict(slot.env)}
            ranks.append(Child(f"rank {rank}", measure_rank, spec, output_dir, rank, env=env))
            log.info("rank %d of %d: pid %s on %s", rank, world, ranks[-1].pid, slot.name)
        return _collect(ranks)
    finally:
        stop(ranks)


def _collect(ranks: list[Child]) -> list[JobResult]:
    results: dict[int, JobResult] = {}
    waiting = dict(enumerate(ranks))
    while waiting:
        # no timeout: a rank stuck in a collective raises after distributed.timeout_s; the launcher's bounds the job
        ready = answered(waiting.values())
        died: list[ChildDied] = []
        raised: dict[int, ChildRaised] = {}
        for rank in [rank for rank, child in waiting.items() if child in ready]:
            try:
                results[rank] = waiting[rank].result()
            except ChildDied as death:
                died.append(death)
            except ChildRaised as raising:
                raised[rank] = raising
            else:
                del waiting[rank]
        if died:  # a rank that died makes the others' collectives fail: name the dead one first
            raise died[0]
        for rank, first in sorted(raised.items()):
            others = [r for r in waiting if r != rank and waiting[r].is_alive()]
            running = f"still running then: rank {', '.join(map(str, others))}" if others else ""
            raise ChildRaised(waiting[rank].name, first.answer, running) from None
    return [results[rank] for rank in range(len(ranks))]


def cross_rank(results: list[JobResult]) -> tuple[dict[str, float], dict[str, str]]:
    """Per-rank and cross-rank metrics, and the tag naming the slowest rank (none without traces).

    In lock step the ranks' step times agree: the straggler is the rank with the most compute (its
    recorded steps' time outside collectives and the waits for them), the one the others wait for.
    """
    metrics: dict[str, float] = {names.RANKS: float(len(results))}
    medians = [result.metrics[names.STEP_MEDIAN_MS] for result in results]
    metrics[names.RANKS_STEP_MEDIAN_MAX_MS] = max(medians)
    metrics[names.RANKS_STRAGGLER_RATIO] = max(medians) / statistics.median(medians)
    found = [collective_timing(steps_under(result.capture_dir)) for result in results]
    timings = [timing for timing in found if timing is not None]
    if len(timings) < len(results):  # in lock step the step times alone cannot name the straggler
        return metrics, {}
    compute = [timing.compute_ms for timing in timings]
    for rank, timing in enumerate(timings):
        metrics[f"{rank_folder(rank)}/{names.RANK_COLLECTIVE_SHARE}"] = timing.share
        metrics[f"{rank_folder(rank)}/{names.RANK_COMPUTE_MS}"] = compute[rank]
        if timing.overlap is not None:
            metrics[f"{rank_folder(rank)}/{names.RANK_COLLECTIVE_OVERLAP}"] = timing.overlap
    metrics[names.RANKS_COMPUTE_SPREAD] = max(compute) / min(compute) if min(compute) > 0 else float("nan")
    metrics[names.RANKS_COLLECTIVE_SHARE] = statistics.fmean(timing.share for timing in timings)
    if overlaps := [timing.overlap for timing in timings if timing.overlap is not None]:
        metrics[names.RANKS_COLLECTIVE_OVERLAP] = statistics.fmean(overlaps)
    slowest = max(range(len(results)), key=lambda rank: compute[rank])
    return metrics, {names.TAG_SLOWEST_RANK: str(slowest)}
