"""CPU workers and copies run where backend.cpu_placement puts them, and the manifest says where."""

from __future__ import annotations

import os
from pathlib import Path

import mlflow
import pytest
from omegaconf import OmegaConf

from runner import names
from runner.backends.cpu import CpuBackend
from runner.config_loading import load_run_spec
from runner.execute.workers import steady_state_concurrently
from runner.experiment import run_experiment
from tests.helpers import all_runs, compose_cfg, job_for
from tests.helpers.placement import placements

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="placing workers on distinct cores needs two")


def probe(folder: Path, *overrides: str) -> list[str]:
    return [
        "backend=cpu", "measure=quick", "+workload=custom", "workload._target_=tests.helpers.placement.PlacementProbe",
        f"+workload.folder={folder}", "workload.inputs=[[4]]", *overrides,
    ]  # fmt: skip


def test_workers_take_one_core_each_in_turn_and_the_manifest_records_it(tmp_path: Path) -> None:
    cfg = compose_cfg(*probe(tmp_path, "backend.cpu_placement=one_core", "measure.processes=2"))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    run_experiment(load_run_spec(cfg), job_for(tmp_path), resolved)
    job, *taken = placements(tmp_path)  # read back inside the job's process, then each worker
    assert job == {"cores": CORES, "threads": 1}  # its profiled window runs as its workers' steps do
    assert taken == [{"cores": [CORES[0]], "threads": 1}, {"cores": [CORES[1]], "threads": 1}]
    (run,) = all_runs()
    device = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")["device"]
    assert device[names.MANIFEST_CPU_PLACEMENT] == "one_core"
    assert device[names.MANIFEST_CPU_WORKERS] == taken


def test_copies_get_cores_of_their_own(tmp_path: Path) -> None:
    spec = load_run_spec(compose_cfg(*probe(tmp_path, "backend.cpu_placement=slot_cores", "tracking=off")))
    steady_state_concurrently(spec, CpuBackend(spec.backend).concurrent_slots(2))
    first, second = placements(tmp_path)
    assert first["threads"] == second["threads"] == len(CORES) // 2
    assert not set(first["cores"]) & set(second["cores"])  # type: ignore[arg-type]
