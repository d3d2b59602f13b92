"""Per-layer numerics: a decoder stack with one drifting layer is located by the per-layer table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import torch

from runner import names
from runner.config import ConfigError
from runner.measure.layers import check_layer_names, first_failing, layer_errors
from tests.helpers import REPO, all_runs
from tests.helpers.faulty import PerturbedStack

SIZES = {"layers": 3, "hidden": 16, "heads": 2, "intermediate": 32, "batch": 1, "seq_len": 4}


def stack(perturbed: int) -> tuple[PerturbedStack, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    module = PerturbedStack(perturbed, **SIZES)
    return module, module.example_inputs(torch.float32, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("perturbed", [0, 1, 2])
def test_the_first_layer_over_tolerance_is_the_perturbed_one(perturbed: int) -> None:
    module, inputs = stack(perturbed)
    errors = layer_errors(module, inputs, "float32", None)
    assert first_failing(errors) == f"layers.{perturbed}.mlp"
    culprit = [e.name for e in errors].index(f"layers.{perturbed}.mlp")
    assert all(e.passed for e in errors[:culprit])  # everything before it, its own projections included
    assert errors[culprit].max_rel_err > 1e-4 > 1e-5 == errors[culprit].tolerance
    assert errors[culprit].shape == (1, 4, 16)


def test_only_the_named_layers_are_compared() -> None:
    module, inputs = stack(1)
    errors = layer_errors(module, inputs, "float32", ["layers.0.mlp", "layers.2.mlp"])
    assert [e.name for e in errors] == ["layers.0.mlp", "layers.2.mlp"]
    assert [e.passed for e in errors] == [True, False]  # layer 1's drift carries into layer 2


def test_unknown_layer_names_are_refused_naming_the_key() -> None:
    module, _ = stack(1)
    with pytest.raises(
        ConfigError, match=r"measure.layers: layers.9.mlp not in the workload; its submodules: layers, "
    ):
        check_layer_names(module, ["layers.0.mlp", "layers.9.mlp"])


@pytest.mark.slow
def test_a_run_logs_the_table_the_plot_and_the_first_failing_layer(tmp_path: Path, tracking_uri: str) -> None:
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
    table = json.loads(Path(client.download_artifacts(run.info.run_id, "layer_accuracy.json")).read_text())
    assert table["columns"] == ["layer", "shape", "max_abs_err", "max_rel_err", "tolerance", "pass"]
    assert [info.path for info in client.list_artifacts(run.info.run_id, "plots")] == ["plots/layer_accuracy.png"]
    bad = subprocess.run([*job[:-1], "measure.layers=[layers.7]", f"hydra.run.dir={tmp_path / 'bad'}"],
                         cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "measure.layers: layers.7 not in the workload" in bad.stderr
    assert "Traceback" not in bad.stderr and len(all_runs(tracking_uri)) == 1
