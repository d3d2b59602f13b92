"""Per-layer numerics: a decoder stack with one drifting layer is located by the per-layer table."""

from __future__ import annotations

import pytest
import torch

from runner.config import ConfigError
from runner.measure.layers import check_layer_names, first_failing, layer_errors
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
