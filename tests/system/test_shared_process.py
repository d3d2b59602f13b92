"""Sweeps under the in-process launcher on a stand-in Neuron host: what the runtime reads once per process.

Each test runs `python -m runner` in a subprocess (`run_neuron`): the process is the point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import names
from tests.helpers import all_runs
from tests.system.test_neuron_backend import calls, run_neuron

pytestmark = pytest.mark.slow


def runtime_starts(tmp_path: Path) -> list[dict[str, object]]:
    return [event for event in calls(tmp_path) if event["event"] == "runtime_start"]


def test_a_sweep_over_a_process_level_key_gives_each_job_its_process(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "-m", "backend=neuron", "backend.async_runtime=true,false")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hydra/launcher=isolated chosen: jobs cannot share a process over backend.async_runtime" in done.stdout
    # each job started its own runtime, with its own value
    assert sorted(str(start["async_nrt"]) for start in runtime_starts(tmp_path)) == ["0", "1"]
    runs = all_runs(tracking_uri)
    jobs = [run for run in runs if run.data.tags.get(names.TAG_SWEEP) != "true"]
    assert len({run.data.tags[names.TAG_PID] for run in jobs}) == 2
    assert all(run.info.status == "FINISHED" for run in jobs)


def test_a_sweep_over_other_keys_runs_in_one_process(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "-m", "backend=neuron", "backend.cores=1", "measure.steps=20,21")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hydra/launcher=isolated" not in done.stdout
    (start,) = runtime_starts(tmp_path)
    assert start["visible_cores"] == "1"
    jobs = [run for run in all_runs(tracking_uri) if run.data.tags.get(names.TAG_SWEEP) != "true"]
    assert len(jobs) == 2 and len({run.data.tags[names.TAG_PID] for run in jobs}) == 1


def test_a_resumed_sweep_over_cores_runs_the_core_it_has_not_measured(tmp_path: Path, tracking_uri: str) -> None:
    first = run_neuron(tmp_path, "backend=neuron", "backend.cores=0")
    assert first.returncode == 0, first.stderr[-3000:]
    done = run_neuron(tmp_path, "-m", "backend=neuron", "backend.cores=0,1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sweep: 2 job(s): 1 finished, 1 skipped (already FINISHED), 0 failed" in done.stdout
    assert [start["visible_cores"] for start in runtime_starts(tmp_path)] == ["0", "1"]
