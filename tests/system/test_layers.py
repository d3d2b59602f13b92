"""Per-layer numerics through the CLI: a run logs the table, the plot and the first failing layer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from runner import names
from tests.helpers import REPO, RunnerInProcess, all_runs
from tests.integration.test_layers import SIZES


@pytest.mark.slow
def test_a_run_logs_the_table_the_plot_and_the_first_failing_layer(
    tmp_path: Path, tracking_uri: str, runner_in_process: RunnerInProcess
) -> None:
    sizes = [f"+workload.{key}={value}" for key, value in SIZES.items()]
    job = [
        sys.executable, "-m", "runner", "+workload=custom", "workload._target_=tests.helpers.faulty.PerturbedStack",
        "+workload.perturbed=1", *sizes, "workload.inputs=[[1,4,16]]", "backend=cpu", "measure=quick",
        "measure.layer_accuracy=true",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    done = subprocess.run(job, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.search(r"layer accuracy: \d+ layer output\(s\) compared with float64 on the CPU, \d+ over tolerance; "
                     r"layers.1.mlp is the first layer over tolerance", done.stdout), done.stdout  # fmt: skip
    (run,) = all_runs(tracking_uri)
    assert run.data.tags[names.TAG_FIRST_FAILING_LAYER] == "layers.1.mlp"
    assert run.data.metrics[names.LAYERS_FAILING] >= 1
    client = mlflow.MlflowClient(tracking_uri)
    table = json.loads(Path(client.download_artifacts(run.info.run_id, names.LAYER_TABLE_FILE)).read_text())
    assert table["columns"] == ["layer", "shape", "max_abs_err", "max_rel_err", "tolerance", "pass"]
    assert [info.path for info in client.list_artifacts(run.info.run_id, names.PLOTS_FOLDER)] == [
        f"{names.PLOTS_FOLDER}/{names.LAYER_PLOT_FILE}"
    ]
    bad = runner_in_process(*job[3:-1], "measure.layers=[layers.7]", f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode != 0 and "measure.layers: layers.7 not in the workload" in bad.stderr
    assert "Traceback" not in bad.stderr and len(all_runs(tracking_uri)) == 1
