"""Studies over sweeps: shape curves with significant crossovers (and, on priced runs, the cost frontier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Run

from runner import names
from runner.report.curves import Crossover, crossover_report, crossovers, size_curves
from tests.conftest import REPO, all_runs


def logged_run(
    client: mlflow.MlflowClient, experiment: str, workload: str, size: float, medians: list[float], stable: bool = True
) -> Run:
    run = client.create_run(experiment, run_name=f"{workload} {size:g}")
    run_id = run.info.run_id
    client.set_tag(run_id, names.TAG_WORKLOAD, workload)
    client.set_tag(run_id, names.TAG_TIMING_STABLE, str(stable).lower())
    client.log_metric(run_id, names.ROOFLINE_BYTES, size)
    client.log_metric(run_id, names.STEP_MEDIAN_MS, sorted(medians)[len(medians) // 2])
    for step, value in enumerate(medians):
        client.log_metric(run_id, names.PROCESS_MEDIAN_MS, value, step=step)
    client.set_terminated(run_id)
    return client.get_run(run_id)


def test_a_crossover_is_claimed_only_between_significant_winners(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("shapes")
    fast, slow, tied = [1.00, 1.02, 0.98], [2.00, 2.04, 1.96], [1.01, 0.99, 1.03]
    runs = [
        # small: naive wins; 2 MB: a tie (no winner); 4 MB: compiled wins but its timing is unstable;
        # 8 MB: compiled wins. The one crossover lies between 1 MB and 8 MB.
        logged_run(client, experiment, "naive", 1e6, fast),
        logged_run(client, experiment, "compiled", 1e6, slow),
        logged_run(client, experiment, "naive", 2e6, fast),
        logged_run(client, experiment, "compiled", 2e6, tied),
        logged_run(client, experiment, "naive", 4e6, slow),
        logged_run(client, experiment, "compiled", 4e6, fast, stable=False),
        logged_run(client, experiment, "naive", 8e6, slow),
        logged_run(client, experiment, "compiled", 8e6, fast),
        logged_run(client, experiment, "builtin", 1e6, fast),  # one size only: no curve
    ]
    curves = size_curves(runs)
    assert list(curves) == ["compiled", "naive"]
    found = crossovers(client, curves)
    assert found == [Crossover(before="naive", after="compiled", bytes_low=1e6, bytes_high=8e6)]
    assert crossover_report(found, curves).splitlines()[1] == "- compiled overtakes naive between 1 MB and 8 MB moved"


@pytest.mark.slow
def test_the_shapes_study_logs_its_curves_and_crossovers(tmp_path: Path, tracking_uri: str) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=rmsnorm_shapes", "backend=cpu",
        "workload=rmsnorm_naive,rmsnorm_builtin", "workload.hidden=16,32,64", "workload.seq_len=4",
        "measure.steps=20", "measure.processes=2", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Crossovers over 3 sizes" in done.stdout
    runs = all_runs(tracking_uri)
    parent = next(r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true")
    assert len(runs) == 7
    client = mlflow.MlflowClient(tracking_uri)
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/shape_curves.png" in logged
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"crossovers.md", "comparison.md"}
