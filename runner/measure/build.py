"""Build a workload from its spec: the module from `_target_`, its inputs, on the backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.backends.base import Backend
from runner.backends.cores import LNC_ENV, logical_nc_config
from runner.backends.neuron import trainium_generation
from runner.config import ConfigError, WorkloadSpec
from runner.config_loading import locate_target
from runner.measure.collectives import GradientAverager
from workloads.base import LncKernels


@dataclass
class BuiltWorkload:
    """The module to call (compiled when asked), its inputs on the device, and one measured step."""

    module: nn.Module
    # the uncompiled module, which owns the reference implementation when there is one
    eager: nn.Module
    inputs: tuple[torch.Tensor, ...]
    # what one measured and profiled step runs: a forward, or a whole training step
    step: Callable[[], Any]


def _forward_step(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Callable[[], Any]:
    """A forward call without autograd bookkeeping."""

    def step() -> Any:
        with torch.no_grad():
            return module(*inputs)

    return step


def train_step(
    eager: nn.Module, module: nn.Module, inputs: tuple[torch.Tensor, ...], spec: WorkloadSpec
) -> Callable[[], Any]:
    """Forward, mean-square loss, backward (over all ranks), optimizer step; float inputs need grad for a backward."""
    params = [p for p in eager.parameters() if p.requires_grad]
    optimizers = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}
    optimizer = optimizers[spec.optimizer](params, lr=spec.lr) if params else None
    averager = GradientAverager(params)
    for tensor in inputs:
        if tensor.is_floating_point():
            tensor.requires_grad_(True)

    def step() -> Any:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        for tensor in inputs:
            tensor.grad = None
        loss = module(*inputs).float().square().mean()
        loss.backward()
        averager.wait()
        if optimizer is not None:
            optimizer.step()
        return loss

    return step


def _inputs(module: nn.Module, spec: WorkloadSpec, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(spec.seed)
    if spec.inputs is not None:
        return tuple(torch.randn(shape, generator=generator).to(dtype) for shape in spec.inputs)
    make = getattr(module, "example_inputs", None)
    if make is None:
        raise ConfigError(
            f"workload.inputs is required: {spec.target} has no example_inputs(); "
            "declare shapes, e.g. workload.inputs=[[8,512]]"
        )
    return tuple(make(dtype, generator))


def _runtime_lnc() -> int:
    """The Neuron runtime's LNC, which an NKI kernel's launch must match; it is the host's, whatever the backend.

    Raises:
        ConfigError: it is unknown (Trn3 with NEURON_LOGICAL_NC_CONFIG unset), or the variable is not 1 or 2.
    """
    lnc, words = logical_nc_config(trainium_generation())
    if lnc is None:
        raise ConfigError(
            f"workload: an NKI kernel launches at the Neuron runtime's LNC, {words}; set {LNC_ENV}, one of: 1, 2"
        )
    return lnc


def build_workload(spec: WorkloadSpec, backend: Backend) -> BuiltWorkload:
    """Instantiate, seed, cast and place the workload, compiled when `workload.compile`; ConfigError on bad kwargs."""
    torch.manual_seed(spec.seed)
    try:
        module = locate_target(spec.target)(**spec.kwargs)
    except (TypeError, ValueError, ImportError) as err:  # ImportError: a package the module needs is not here
        raise ConfigError(str(err) if str(err).startswith("workload.") else f"workload: {err}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"workload._target_={spec.target!r} must build a torch.nn.Module")
    if isinstance(module, LncKernels):
        module.launch_at_lnc(_runtime_lnc())
    dtype = getattr(torch, spec.dtype)
    inputs = tuple(t.to(backend.device) for t in _inputs(module, spec, dtype))
    eager = module.to(backend.device, dtype).eval()
    compiled = eager
    if spec.compile:
        compiled = torch.compile(eager, backend=backend.traits.compile_backend)  # type: ignore[assignment]
    step = train_step(eager, compiled, inputs, spec) if spec.mode == "train_step" else _forward_step(compiled, inputs)
    return BuiltWorkload(module=compiled, eager=eager, inputs=inputs, step=step)
