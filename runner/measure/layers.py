"""Per-layer numerics (`measure.layer_accuracy=true`): which submodule's output first drifts past tolerance."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.config import ConfigError
from runner.measure.accuracy import TOLERANCE


@dataclass
class LayerError:
    """One submodule call: its output's shape and its error against the float64 reference."""

    name: str
    shape: tuple[int, ...]
    max_abs_err: float
    max_rel_err: float
    tolerance: float

    @property
    def passed(self) -> bool:
        """Within the dtype's tolerance."""
        return self.max_rel_err <= self.tolerance


def check_layer_names(module: nn.Module, names: list[str] | None) -> None:
    """Refuse (ConfigError) `measure.layers` entries the module does not have, listing some it does."""
    known = [name for name, _ in module.named_modules() if name]
    missing = [name for name in names or [] if name not in known]
    if missing:
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise ConfigError(f"measure.layers: {', '.join(missing)} not in the workload; its submodules: {shown}")


@contextmanager
def _recording(module: nn.Module, names: list[str] | None) -> Iterator[dict[str, torch.Tensor]]:
    """Each named submodule's output per call, in call order (a second call of one is `name#2`)."""
    outputs: dict[str, torch.Tensor] = {}
    calls: Counter[str] = Counter()

    def hook_for(name: str) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            values = output if isinstance(output, (tuple, list)) else [output]
            tensor = next((t for t in values if isinstance(t, torch.Tensor)), None)
            if tensor is not None and tensor.is_floating_point():
                calls[name] += 1
                key = name if calls[name] == 1 else f"{name}#{calls[name]}"
                outputs[key] = tensor.detach().to("cpu", torch.float64)

        return hook

    chosen = [(name, sub) for name, sub in module.named_modules() if name and (names is None or name in names)]
    handles = [sub.register_forward_hook(hook_for(name)) for name, sub in chosen]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def layer_errors(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], dtype: str, names: list[str] | None
) -> list[LayerError]:
    """Each hooked layer's error against a float64 CPU copy, in call order: errors carry forward."""
    reference = copy.deepcopy(module).to("cpu", torch.float64)
    with torch.no_grad():
        with _recording(module, names) as device_outputs:
            module(*inputs)
        with _recording(reference, names) as reference_outputs:
            reference(*(t.detach().to("cpu", torch.float64) for t in inputs))
    errors = []
    for name, actual in device_outputs.items():
        expected = reference_outputs.get(name)
        if expected is None or expected.shape != actual.shape:
            continue
        max_abs = (actual - expected).abs().max().item() if actual.numel() else 0.0
        scale = expected.abs().max().item() if expected.numel() else 0.0
        errors.append(LayerError(name, tuple(actual.shape), max_abs, max_abs / (scale or 1.0), TOLERANCE[dtype]))
    return errors


def first_failing(errors: list[LayerError]) -> str | None:
    """The first layer, in call order, over its tolerance."""
    return next((error.name for error in errors if not error.passed), None)


def layer_table(errors: list[LayerError]) -> dict[str, list[Any]]:
    """The per-layer table as MLflow table columns."""
    return {
        "layer": [e.name for e in errors],
        "shape": [str(list(e.shape)) for e in errors],
        "max_abs_err": [e.max_abs_err for e in errors],
        "max_rel_err": [e.max_rel_err for e in errors],
        "tolerance": [e.tolerance for e in errors],
        "pass": [e.passed for e in errors],
    }
