"""The contract between the runner and a workload module."""

from __future__ import annotations

import copy
from typing import Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class Workload(Protocol):
    """An `nn.Module` that also builds its own inputs and a float64 reference.

    Any `nn.Module` can be profiled; a module without `example_inputs` gets random inputs
    of the shapes in `workload.inputs`, and one without `reference` skips accuracy checks.
    """

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Return the forward arguments on CPU, drawn from `generator` so runs are repeatable."""
        ...

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor | None:
        """Return the expected output, computed in float64 on CPU; None where no output value is defined."""
        ...


def require_positive(**sizes: int) -> None:
    """Reject non-positive sizes, naming the `workload.<key>` a user would fix."""
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"workload.{name} must be a positive integer, got {value!r}")


def require_positive_number(**values: float) -> None:
    """Reject non-numbers and numbers <= 0 (an epsilon, a theta), naming the `workload.<key>`."""
    for name, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"workload.{name} must be a number > 0, got {value!r}")


@runtime_checkable
class CostModel(Protocol):
    """Bytes moved and FLOPs of one forward call, for the roofline; optional for a workload."""

    def bytes_moved(self, *inputs: torch.Tensor) -> int:
        """Bytes the forward must read and write at least, for these inputs."""
        ...

    def flop_count(self, *inputs: torch.Tensor) -> int:
        """Floating-point operations of the forward, for these inputs."""
        ...


@runtime_checkable
class LncKernels(Protocol):
    """A workload whose NKI kernels launch on the Neuron runtime's logical NeuronCore (LNC); optional.

    A launch's LNC must match the runtime's or the call fails (SDK:nki/api/nki/__init__.py, `jit`);
    only the runner knows that LNC, so it calls `launch_at_lnc` once, before the first forward.
    """

    def launch_at_lnc(self, lnc: int) -> None:
        """Launch every kernel as `kernel[lnc](...)`: one program per physical NeuronCore of the LNC."""
        ...


class TokenWorkload(nn.Module):
    """A workload over activations of shape (batch, seq_len, hidden), the usual transformer layout."""

    def __init__(self, hidden: int, batch: int = 1, seq_len: int = 1) -> None:
        super().__init__()
        require_positive(hidden=hidden, batch=batch, seq_len=seq_len)
        self.batch, self.seq_len, self.hidden = batch, seq_len, hidden

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """One activation tensor of shape (batch, seq_len, hidden)."""
        shape = (self.batch, self.seq_len, self.hidden)
        return (torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype),)

    def tokens(self, x: torch.Tensor) -> int:
        """Number of token vectors in x."""
        return x.numel() // self.hidden


def float64_copy(module: nn.Module, **changes: object) -> nn.Module:
    """A float64 CPU copy of `module`, with attributes changed (e.g. attention='naive')."""
    twin = copy.deepcopy(module).to("cpu", torch.float64)
    for name, value in changes.items():
        setattr(twin, name, value)
    return twin


def as_float64(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Detached float64 CPU copies of the inputs, for a reference computation."""
    return tuple(t.detach().to("cpu", torch.float64) for t in inputs)
