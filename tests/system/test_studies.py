"""Studies run as real sweeps: shape curves, core scaling, queue depths and the compile cache, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from runner import names
from tests.helpers import REPO, all_runs


@pytest.mark.slow
def test_the_shapes_study_logs_its_curves_crossovers_and_cost_frontier(tmp_path: Path, tracking_uri: str) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=rmsnorm_shapes", "backend=cpu",
        "workload=rmsnorm_naive,rmsnorm_builtin", "workload.hidden=16,32,64", "workload.seq_len=4",
        "measure.steps=20", "measure.processes=2", "backend.price_per_hour=0.5",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Crossovers over 3 sizes" in done.stdout
    runs = all_runs(tracking_uri)
    parent = next(r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true")
    assert len(runs) == 7
    client = mlflow.MlflowClient(tracking_uri)
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, names.PLOTS_FOLDER)}
    assert {
        f"{names.PLOTS_FOLDER}/{names.SHAPE_CURVES_PLOT_FILE}",
        f"{names.PLOTS_FOLDER}/{names.COST_FRONTIER_PLOT_FILE}",
    } <= logged
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {
        names.CROSSOVERS_FILE,
        names.COMPARISON_TEXT_FILE,
    }


@pytest.mark.slow
def test_the_scaling_study_runs_copies_side_by_side(tmp_path: Path, tracking_uri: str) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=core_scaling", "backend=cpu", "measure=quick",
        "measure.copies=1,2", "workload.hidden=16", "workload.seq_len=4", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    slots = "CPU slot 0 (cores 0, 1 threads); CPU slot 1 (cores 1, 1 threads)"
    assert f"steady state: 2 copies at once ({slots})" in done.stdout
    runs = all_runs(tracking_uri)
    parent = next(r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true")
    two = next(r for r in runs if r.data.metrics.get(names.SCALING_COPIES) == 2)
    client = mlflow.MlflowClient(tracking_uri)
    assert len(client.get_metric_history(two.info.run_id, names.PROCESS_MEDIAN_MS)) == 2  # one median per copy
    assert f"{names.PLOTS_FOLDER}/{names.CORE_SCALING_PLOT_FILE}" in {
        a.path for a in client.list_artifacts(parent.info.run_id, names.PLOTS_FOLDER)
    }
    assert names.SCALING_FILE in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "| 2 |" in done.stdout


@pytest.mark.slow
def test_the_queue_depth_study_plots_throughput_against_latency(tmp_path: Path, tracking_uri: str) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=queue_depth", "backend=cpu", "measure=quick",
        "measure.mode=throughput", "measure.inflight=1,4", "workload.hidden=16", "workload.seq_len=4",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    runs = all_runs(tracking_uri)
    (parent,) = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true"]
    depths = sorted(r.data.metrics[names.THROUGHPUT_INFLIGHT] for r in runs if r is not parent)
    assert depths == [1, 4]
    plots = {
        info.path for info in mlflow.MlflowClient(tracking_uri).list_artifacts(parent.info.run_id, names.PLOTS_FOLDER)
    }
    assert f"{names.PLOTS_FOLDER}/{names.QUEUE_DEPTH_PLOT_FILE}" in plots


@pytest.mark.slow
def test_the_compile_cache_study_hits_the_cache_the_cold_job_filled(tmp_path: Path, tracking_uri: str) -> None:
    user_cache = tmp_path / "users_own_cache"
    user_cache.mkdir()
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=compile_cache", "backend=cpu", "measure=quick",
        "workload.hidden=16", "workload.seq_len=4", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(user_cache)}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    jobs = {r.data.tags.get(names.TAG_COMPILE_CACHE): r for r in all_runs(tracking_uri)}
    cold, warm = jobs["cold"].data.metrics, jobs["warm"].data.metrics
    assert cold[names.COMPILE_CACHE_MISSES] >= 1 and cold[names.COMPILE_CACHE_HITS] == 0
    assert warm[names.COMPILE_CACHE_HITS] >= 1 and warm[names.COMPILE_CACHE_MISSES] == 0
    assert cold[names.FIRST_CALL_S] > 0 and warm[names.FIRST_CALL_S] > 0
    assert not any(user_cache.iterdir())  # the user's own cache is neither read nor written
    assert any((tmp_path / "sweep" / "compile_cache" / "inductor").iterdir())
