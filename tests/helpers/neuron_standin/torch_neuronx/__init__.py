"""Stand-in for torch-neuronx: the documented surface on stock CPU PyTorch (see README.md)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from torch_neuronx import neuron
from torch_neuronx._record import CALLS, deviates, record

__all__ = ["CALLS", "neuron"]


def _autoload() -> None:
    """The `torch.backends` entry point PyTorch calls at `import torch`; importing this module did the work."""
    record("autoload")


def _is_device(value: Any, kind: str) -> bool:
    return isinstance(value, (str, torch.device)) and torch.device(value).type == kind


def _is_neuron(value: Any) -> bool:
    return _is_device(value, "neuron")


class _PlaceOnCpu(TorchFunctionMode):
    """Tensors sent to 'neuron' stay on the CPU; the first one starts the fake runtime."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        targets = [*args[1:], kwargs.get("device")] if func is torch.Tensor.to else []
        to_neuron = any(_is_neuron(a) for a in targets)
        if to_neuron:
            neuron.start_runtime()
            args = tuple("cpu" if _is_neuron(a) else a for a in args)
            if _is_neuron(kwargs.get("device")):
                kwargs["device"] = "cpu"
        to_cpu = func is torch.Tensor.cpu or any(_is_device(a, "cpu") for a in targets)
        result = func(*args, **kwargs)
        if _FALLBACK_OPS and (to_neuron or (to_cpu and getattr(args[0], _ON_NEURON, False))):
            result = result.clone() if result is args[0] else result  # a move makes a new tensor, as on a device
            setattr(result, _ON_NEURON, to_neuron)
        return result


# NEURON_STANDIN_CPU_FALLBACK: the ATen ops (comma list, e.g. aten::pow) this build runs on the CPU
_FALLBACK_OPS = {op for op in os.environ.get("NEURON_STANDIN_CPU_FALLBACK", "").split(",") if op}
# set on tensors moved to "neuron" and on what ops compute from them: only their ops can fall back
_ON_NEURON = "_standin_on_neuron"
_fell_back: list[str] = []


class _TrackFallbacks(TorchDispatchMode):
    """A listed op on a 'neuron' tensor is listed per execution, as SRC's op tracking; its outputs stay on 'neuron'."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        on_neuron = any(getattr(t, _ON_NEURON, False) for t in pytree.tree_leaves((args, kwargs)))
        if on_neuron and func._schema.name in _FALLBACK_OPS:
            _fell_back.append(func._schema.name)
        result = func(*args, **kwargs)
        for t in pytree.tree_leaves(result) if on_neuron else []:
            if isinstance(t, torch.Tensor):
                setattr(t, _ON_NEURON, True)
        return result


if not deviates("no_op_tracking"):  # SRC torch_neuronx/__init__.py; a build without them deviates

    def get_fallback_ops() -> list[str]:
        """The ops that fell back to the CPU since the last clear_op_tracking(), once per execution."""
        return list(_fell_back)

    def clear_op_tracking() -> None:
        _fell_back.clear()


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
if _FALLBACK_OPS:
    _TrackFallbacks().__enter__()
_record_steps()
record("import")
