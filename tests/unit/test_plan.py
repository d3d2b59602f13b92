"""How a job is measured, planned from its spec: who times its steady state, an Execution per mode, refusals."""

from __future__ import annotations

import ast
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from runner.backends.base import Backend
from runner.backends.cpu import CpuBackend
from runner.backends.neuron import NeuronBackend
from runner.config import ConfigError, RunSpec
from runner.config_loading import load_run_spec
from runner.execute import plan as planning
from runner.execute.execution import InProcess, Ranks
from runner.execute.plan import plan
from runner.execute.slurm_ranks import SlurmTask
from runner.execute.workers import Timer, steady_state_timing
from tests.helpers import REPO, compose_cfg


def spec_of(*overrides: str) -> RunSpec:
    return load_run_spec(compose_cfg("+workload=rmsnorm_naive", "workload.hidden=8", "backend=cpu", *overrides))


def test_a_single_process_job_is_measured_in_process_on_the_workload_built_here(tmp_path: Path) -> None:
    execution = plan(spec_of(), tmp_path)
    assert isinstance(execution, InProcess) and execution.timed is None
    assert execution.workload.eager is not None and execution.output_dir == tmp_path
    assert execution.placement == execution.backend.placement()


def test_ranks_on_this_host_get_a_slot_each_and_time_their_steps_in_their_own_process(tmp_path: Path) -> None:
    execution = plan(spec_of("distributed.ranks=2", "measure.processes=0"), tmp_path)
    assert isinstance(execution, Ranks) and isinstance(execution.where, list) and len(execution.where) == 2
    assert execution.spec.measure.processes == 0
    assert execution.placement == "2 ranks, each on its own share of the machine"


def test_task_0_of_a_slurm_job_plans_to_lead_its_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = SlurmTask(rank=0, world=2, local_rank=0, tasks_per_node=1, node=0, job_id="42")
    monkeypatch.setattr(planning, "slurm_task", lambda: task)
    execution = plan(spec_of("distributed.ranks=2", "measure.processes=0"), tmp_path)
    assert isinstance(execution, Ranks) and execution.where == task
    with pytest.raises(ConfigError, match=r"distributed.ranks=3, but the Slurm job has 2 tasks"):
        plan(spec_of("distributed.ranks=3", "measure.processes=0"), tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("distributed.ranks=2", "measure.copies=2"), r"measure.copies=2 and distributed.ranks=2: choose one"),
        (("distributed.ranks=2", "measure.processes=3"), r"measure.processes=3: with distributed.ranks=2"),
    ],
)
def test_what_cannot_run_is_refused_while_planning(tmp_path: Path, overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(spec_of(*overrides), tmp_path)


OWN = "measure.processes=0 times it in its own process"
CACHE = {"compile_cache": "cold", "compile_cache_dir": "/tmp/cache"}
CACHE_WHY = "its first call must find the compile caches as measure.compile_cache says"
RANKS_WHY = "each of its ranks times its own steps"
COPIES_WHY = "its copies time their steps side by side"
ROUNDS_WHY = "its sweep's rounds time it, interleaved with the other jobs'"


@cache
def default_spec() -> RunSpec:
    return spec_of()


def spec_with(ranks: int = 1, **measure: object) -> RunSpec:
    """The default spec with distributed.ranks and these measure keys, without composing it again."""
    spec = default_spec()
    return replace(spec, measure=replace(spec.measure, **measure), distributed=replace(spec.distributed, ranks=ranks))


def workers_why(count: int) -> str:
    return f"{count} fresh worker processes time it, one after another"


@pytest.mark.parametrize(
    ("keys", "backend", "rounds", "timer", "processes", "why"),
    [
        ({}, CpuBackend, False, Timer.WORKERS, 3, workers_why(3)),
        ({}, CpuBackend, True, Timer.ROUNDS, 3, ROUNDS_WHY),
        ({"processes": 0}, CpuBackend, False, Timer.OWN_PROCESS, 0, OWN),
        ({"processes": 0}, CpuBackend, True, Timer.OWN_PROCESS, 0, OWN),
        ({"processes": 2}, CpuBackend, False, Timer.WORKERS, 2, workers_why(2)),
        ({"processes": 2}, CpuBackend, True, Timer.ROUNDS, 2, ROUNDS_WHY),
        ({"ranks": 2, "processes": 0}, CpuBackend, False, Timer.RANKS, 0, RANKS_WHY),
        ({"ranks": 2, "processes": 0}, CpuBackend, True, Timer.RANKS, 0, RANKS_WHY),
        # both: it runs as ranks, which refuse its copies (`plan._rank_spec`)
        ({"ranks": 2, "processes": 0, "copies": 2}, CpuBackend, True, Timer.RANKS, 0, RANKS_WHY),
        ({"copies": 2}, CpuBackend, False, Timer.COPIES, 2, COPIES_WHY),
        ({"copies": 2}, CpuBackend, True, Timer.COPIES, 2, COPIES_WHY),
        (CACHE, CpuBackend, False, Timer.WORKERS, 3, workers_why(3)),
        (CACHE, CpuBackend, True, Timer.WORKERS, 3, CACHE_WHY),
        ({**CACHE, "processes": 0}, CpuBackend, True, Timer.OWN_PROCESS, 0, CACHE_WHY),
        # the job's process holds the device, so it times its own; the rounds run before any job holds it
        ({}, NeuronBackend, False, Timer.OWN_PROCESS, 0, OWN),
        ({}, NeuronBackend, True, Timer.ROUNDS, 3, ROUNDS_WHY),
        ({"processes": 0}, NeuronBackend, True, Timer.OWN_PROCESS, 0, OWN),
    ],
)
def test_who_times_the_steady_state_is_decided_from_the_spec_the_backend_and_the_sweeps_rounds(
    keys: dict[str, object], backend: type[Backend], rounds: bool, timer: Timer, processes: int, why: str
) -> None:
    timing = steady_state_timing(spec_with(**keys), backend, rounds)
    assert (timing.timer, timing.processes, timing.why) == (timer, processes, why)


@pytest.mark.parametrize("rounds", [False, True])
def test_worker_processes_a_backend_cannot_serve_are_refused_whoever_would_time_them(rounds: bool) -> None:
    with pytest.raises(ConfigError, match=r"measure.processes=2: a NeuronCore serves one process at a time"):
        steady_state_timing(spec_with(processes=2), NeuronBackend, rounds)


def project_modules(path: Path) -> set[str]:
    """The runner modules a file imports (`from runner import names` is runner.names, `CONF_DIR` is runner)."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "runner":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                is_module = (REPO / submodule.replace(".", "/")).with_suffix(".py").exists()
                modules.add(submodule if is_module else str(node.module))
        elif isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names if alias.name.split(".")[0] == "runner"}
    return modules


def test_the_job_module_imports_at_most_12_project_modules() -> None:
    modules = project_modules(REPO / "runner" / "experiment.py")
    assert "runner.names" in modules and len(modules) <= 12, sorted(modules)
