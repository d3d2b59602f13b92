"""Device decisions come from the backend classes: collectives, compile caches, manifest contents."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from runner import names
from runner.backends.cpu import CpuBackend
from runner.backends.cuda import CudaBackend
from runner.backends.neuron import NeuronBackend
from runner.backends.neuron_cache import NEFF_CACHE_ENV
from runner.backends.registry import BACKEND_CLASSES, COMPILE_CACHES
from runner.config import BackendConfig
from runner.config_loading import load_run_spec
from runner.execute import ranks
from runner.execute.workers import WORKER_START_ENV
from runner.job.manifest import build_manifest
from runner.measure.compile_cache import use_compile_cache
from tests.helpers import compose_cfg


class Joined(Exception):
    """Raised by the stand-in for init_process_group, carrying the backend it was asked for."""


def test_a_rank_joins_the_process_group_its_backend_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def init_process_group(backend: str, **_: object) -> None:
        raise Joined(backend)

    monkeypatch.setattr(ranks.dist, "init_process_group", init_process_group)
    monkeypatch.setattr(CpuBackend, "traits", replace(CpuBackend.traits, collective_backend="a-test-backend"))
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu"))
    with pytest.raises(Joined, match="^a-test-backend$"):
        ranks.measure_rank(spec, tmp_path, 0)


def test_the_cache_study_moves_every_backends_compile_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (variable for cache in COMPILE_CACHES for variable in cache.folders.values()):
        monkeypatch.setenv(variable, "unchanged")  # restored after the test: use_compile_cache sets them
    root = tmp_path / "cache"
    use_compile_cache(load_run_spec(compose_cfg(
        "+workload=rmsnorm_compiled", "measure.compile_cache=cold", f"measure.compile_cache_dir={root}"
    )))  # fmt: skip
    for cls in BACKEND_CLASSES:
        for folder, variable in cls.compile_cache.folders.items():
            assert os.environ[variable] == str(root / folder)
    assert os.environ[NEFF_CACHE_ENV] == str(root / "neff")  # the one copy of Neuron's variable


def test_the_manifest_records_every_backends_variables_and_packages() -> None:
    environ = {"OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": "1", "NEURON_RT_VISIBLE_CORES": "0-1", "HOME": "/root"}
    manifest = build_manifest(CpuBackend(BackendConfig(name="cpu")), environ=environ)
    assert manifest["environment"] == {key: value for key, value in environ.items() if key != "HOME"}
    for cls in (CpuBackend, CudaBackend, NeuronBackend):
        assert set(cls.traits.manifest_packages) <= set(manifest["packages"])
        assert set(cls.traits.manifest_system_packages) <= set(manifest["system_packages"])


@pytest.mark.parametrize(
    ("placement", "overrides", "workers"),
    [
        pytest.param("one_core", [], [([0], 1), ([1], 1), ([0], 1)], id="one-core-in-turn"),
        pytest.param("slot_cores", [], [([0, 1], 2)] * 3, id="slot-cores"),
        pytest.param("unpinned", [], [(None, 3)] * 3, id="unpinned-with-the-jobs-threads"),
        pytest.param("one_core", ["measure.copies=2"], [([0], 1), ([1], 1)], id="copies"),
        pytest.param("one_core", ["distributed.ranks=2"], [], id="ranks-time-their-own"),
    ],
)
def test_the_manifest_names_each_workers_cores_and_threads(
    placement: str, overrides: list[str], workers: list[tuple[list[int] | None, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)  # the job's own
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu", f"backend.cpu_placement={placement}",
                                     *overrides))  # fmt: skip
    facts = CpuBackend(spec.backend).placement_facts(spec)
    assert facts[names.MANIFEST_CPU_PLACEMENT] == placement
    assert facts[names.MANIFEST_CPU_WORKERS] == [{"cores": cores, "threads": threads} for cores, threads in workers]


def test_the_manifest_says_how_workers_start_and_why_they_are_spawned() -> None:
    backend = CpuBackend(BackendConfig(name="cpu"))
    forked = build_manifest(backend, environ={})["workers"]
    assert forked == {"start_method": "forkserver", "why": "forked from a server that imported " + ", ".join(
        ["torch", "runner.execute.workers", "workloads"]
    )}  # fmt: skip
    asked = build_manifest(backend, environ={WORKER_START_ENV: "spawn"})["workers"]
    assert asked == {"start_method": "spawn", "why": "RUNNER_WORKER_START=spawn"}


class Clock:
    """Where there is no GPU: time that passes only as the fakes below say, the same on every host."""

    now = 0.0
    RECORD_MS, STEP_MS, FLUSH_MS = 1.0, 2.0, 20.0

    @classmethod
    def spend(cls, ms: float) -> None:
        cls.now += ms


class ClockEvent:
    """Stands in for torch.cuda.Event: its time is the clock's when it was recorded, and recording costs time."""

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing
        self.at = float("nan")

    def record(self) -> None:
        self.at = Clock.now
        Clock.spend(Clock.RECORD_MS)

    def elapsed_time(self, end: ClockEvent) -> float:
        return end.at - self.at


@pytest.fixture
def cuda_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> CudaBackend:
    """CudaBackend with its events, synchronize, device properties and flush answered on the CPU, by `Clock`."""
    monkeypatch.setattr(torch.cuda, "Event", ClockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("Props", (), {"L2_cache_size": 64}))
    monkeypatch.setattr("runner.backends.cuda.FLUSH_BYTES", 1024)
    monkeypatch.setattr(CudaBackend, "device", property(lambda self: torch.device("cpu")))
    return CudaBackend(BackendConfig(name="cuda"))


def test_cuda_steps_back_to_back_add_up_to_their_block_waits_between_them_included(
    cuda_on_the_cpu: CudaBackend,
) -> None:
    started = Clock.now
    times = cuda_on_the_cpu.time_steps(lambda: Clock.spend(Clock.STEP_MS), 4, flush_cache=False)
    # each from the previous step's mark to its own: every record but the last falls inside a step
    assert times == [Clock.STEP_MS + Clock.RECORD_MS] * 4 and sum(times) == Clock.now - started - Clock.RECORD_MS


def test_cuda_steps_with_the_cache_flushed_leave_the_flush_outside_their_events(
    cuda_on_the_cpu: CudaBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[int] = []

    def zero_(tensor: torch.Tensor) -> torch.Tensor:
        flushed.append(tensor.numel())
        Clock.spend(Clock.FLUSH_MS)
        return tensor

    monkeypatch.setattr(torch.Tensor, "zero_", zero_)
    times = cuda_on_the_cpu.time_steps(lambda: Clock.spend(Clock.STEP_MS), 3, flush_cache=True)
    assert flushed == [1024] * 3  # max(FLUSH_BYTES, 2 x L2) bytes, before each step
    assert times == [Clock.RECORD_MS + Clock.STEP_MS] * 3  # each step's own pair; the flush between pairs
