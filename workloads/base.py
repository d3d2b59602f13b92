"""The contract between the runner and a workload module."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Workload(Protocol):
    """An `nn.Module` that also builds its own inputs and a float64 reference.

    Any `nn.Module` can be profiled; a module without `example_inputs` gets random inputs
    of the shapes in `workload.inputs`, and one without `reference` skips accuracy checks.
    """

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Return the forward arguments on CPU, drawn from `generator` so runs are repeatable."""
        ...

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Return the expected output, computed in float64 on CPU."""
        ...


def require_positive(**sizes: int) -> None:
    """Reject non-positive sizes, naming the `workload.<key>` a user would fix."""
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"workload.{name} must be a positive integer, got {value!r}")


@runtime_checkable
class CostModel(Protocol):
    """Bytes moved and FLOPs of one forward call, for the roofline; optional for a workload."""

    def bytes_moved(self, *inputs: torch.Tensor) -> int:
        """Bytes the forward must read and write at least, for these inputs."""
        ...

    def flop_count(self, *inputs: torch.Tensor) -> int:
        """Floating-point operations of the forward, for these inputs."""
        ...
