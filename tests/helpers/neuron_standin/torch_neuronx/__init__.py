"""Stand-in for torch-neuronx: the documented surface on stock CPU PyTorch (see README.md)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torch_neuronx import neuron
from torch_neuronx._record import CALLS, deviates, record

__all__ = ["CALLS", "neuron"]


def _autoload() -> None:
    """The `torch.backends` entry point PyTorch calls at `import torch`; importing this module did the work."""
    record("autoload")


def _is_neuron(value: Any) -> bool:
    return isinstance(value, (str, torch.device)) and torch.device(value).type == "neuron"


class _PlaceOnCpu(TorchFunctionMode):
    """Tensors sent to 'neuron' stay on the CPU; the first one starts the fake runtime."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to:
            if any(_is_neuron(a) for a in args) or _is_neuron(kwargs.get("device")):
                neuron.start_runtime()
            args = tuple("cpu" if _is_neuron(a) else a for a in args)
            if _is_neuron(kwargs.get("device")):
                kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def _record_steps() -> None:
    """Log every profiler step, so tests can check a synchronize came right before it."""
    original = torch.profiler.profile.step

    def step(self: torch.profiler.profile) -> None:
        record("profiler_step", step_num=self.step_num)
        original(self)

    torch.profiler.profile.step = step  # type: ignore[method-assign]


def _register_collectives() -> None:
    """The "neuron" process-group backend torch-neuronx registers; here gloo, since tensors stay on the CPU."""
    import torch.distributed as dist

    def gloo(store: Any, rank: int, size: int, timeout: Any) -> Any:
        if neuron.is_initialized():  # as SRC's backend asserts: each rank's runtime starts after the group
            raise RuntimeError("neuron process group: the Neuron runtime is already initialised")
        record("process_group", backend="neuron", rank=rank, size=size)
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    if not deviates("no_process_group"):
        dist.Backend.register_backend("neuron", gloo, devices=["cpu", "neuron"])


# what the shipped package does, though its documentation gives 0 as the default
if not deviates("async_default_unset"):
    os.environ.setdefault("TORCH_NEURONX_ENABLE_ASYNC_NRT", "1")
if deviates("inflight_set_at_import"):  # a build still setting the variable SDK 2.32 removed
    os.environ.setdefault("NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS", "4")
torch.utils.rename_privateuse1_backend("neuron")
_register_collectives()
torch._register_device_module("neuron", neuron)
_PlaceOnCpu().__enter__()
_record_steps()
record("import")
