"""Which processes measure a job, and where: one `Execution`, planned before the job's run opens.

Planning refuses what cannot run (leaving no run behind), sets the compile caches before the
backend loads its libraries, and does what must come before this process touches the device.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from runner.backends.base import check_cache_flush
from runner.backends.neuron import NeuronBackend, trainium_generation
from runner.backends.neuron_hbm import device_profiled, first_cores, reservation_note
from runner.backends.registry import make_backend
from runner.config import ConfigError, RunSpec
from runner.execute.execution import Execution as Execution  # re-exported: plan()'s answer, imported with it
from runner.execute.execution import InProcess, Ranks
from runner.execute.slurm_ranks import check_world, slurm_task
from runner.execute.workers import (
    Timer,
    prepare_workers,
    steady_state_concurrently,
    steady_state_timing,
    worker_start,
)
from runner.measure.build import build_workload
from runner.measure.compile_cache import use_compile_cache
from runner.measure.layers import check_layer_names
from runner.measure.loop import SteadyState, check_knobs
from runner.measure.memory import memory_source
from runner.measure.roofline import resolve_peak

log = logging.getLogger(__name__)


def plan(spec: RunSpec, output_dir: Path, config_key: str = "", rounds_dir: Path | None = None) -> Execution:
    """The backend and how the job is measured (in-process, built here); `config_key` finds its rounds in `rounds_dir`.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    use_compile_cache(spec)  # before the backend loads its libraries, and before anything compiles
    backend = make_backend(spec.backend)
    # the benchmarks' knobs (docs/trust.md), read where workers time: refused now, before anything slow
    check_knobs(backend.traits.default_layouts)
    worker_start()
    backend.worker_processes(spec.measure.processes, spec.distributed.ranks)
    check_cache_flush(spec, type(backend))
    if spec.measure.memory_snapshot:
        memory_source(backend, spec.profiler)
    rounds = rounds_dir / f"{config_key}.json" if rounds_dir is not None else None
    timing = steady_state_timing(spec, type(backend), rounds is not None)
    if (task := slurm_task()) is not None:
        check_world(task, spec.distributed.ranks)
        return Ranks(_rank_spec(spec), output_dir, backend, task)
    if timing.timer is Timer.RANKS:
        slots = backend.concurrent_slots(spec.distributed.ranks, "distributed.ranks")
        _note_device_profiling(spec, f"distributed.ranks={len(slots)}", first_cores(slots))
        return Ranks(_rank_spec(spec), output_dir, backend, slots)
    if isinstance(backend, NeuronBackend):
        _note_device_profiling(spec, "this job", (backend.cores or [0])[:1])
    timed = SteadyState.load(rounds) if rounds is not None and timing.timer is Timer.ROUNDS else None
    if timing.timer is Timer.ROUNDS and timed is None:  # its sweep timed no rounds, or left it out: it times its own
        timing = steady_state_timing(spec, type(backend), rounds=False)
    # workers and copies start from the fork server: prepared where the backend serves workers
    if timing.timer in (Timer.WORKERS, Timer.COPIES) and backend.worker_processes(spec.measure.processes):
        prepare_workers([spec])
    if timing.timer is Timer.COPIES:
        timed = steady_state_concurrently(spec, backend.concurrent_slots(timing.processes))
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
