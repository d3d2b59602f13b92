"""One ATen op on inputs of given shapes: any row of a run's op table, runnable on its own.

`python -m runner +workload=aten_op workload.op=aten::mul workload.shapes=[[4,128,512],[512]]`
times that op alone, on any backend, with a float64 CPU reference and a roofline model where
the op has an obvious one: pointwise ops move their inputs and output and do one FLOP per
output element; matmuls and convolutions count FLOPs as torch's FlopCounterMode does.
Arguments the op table does not record (scalars, dims, flags) keep the op's defaults.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from workloads.base import require_positive

# inputs are drawn from [LOW, LOW + 1): positive, so rsqrt, log, div and sqrt stay finite
LOW = 0.5


def resolve_op(name: str) -> Any:
    """`aten::mul` or `aten::mul.Tensor` -> the torch.ops callable.

    Raises:
        ValueError: naming workload.op, when there is no such ATen op.
    """
    namespace, _, rest = name.partition("::")
    packet_name, _, overload = rest.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None) if namespace == "aten" and packet_name else None
    op = getattr(packet, overload or "default", None) if overload else packet
    if op is None:
        raise ValueError(f"workload.op={name!r} is not an ATen op; give one as the op table names it, e.g. aten::mul")
    return op


def _tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [t for t in output if isinstance(t, torch.Tensor)] if isinstance(output, (tuple, list)) else []


class AtenOp(nn.Module):
    """Calls one ATen op on its inputs; `shapes` gives one tensor shape per positional argument."""

    def __init__(self, op: str, shapes: list[list[int]]) -> None:
        super().__init__()
        self.op_name = op
        self.op = resolve_op(op)
        if not all(isinstance(shape, list) and all(isinstance(s, int) for s in shape) for shape in shapes):
            raise ValueError(f"workload.shapes={shapes}: give one list of sizes per argument, e.g. [[4,128,512],[512]]")
        self.shapes = [tuple(shape) for shape in shapes]
        for shape in self.shapes:
            if shape:
                require_positive(**{f"shapes[{i}]": size for i, size in enumerate(shape)})
        try:  # on the meta device: checks the call without computing anything
            self.op(*(torch.empty(shape, device="meta") for shape in self.shapes))
        except (RuntimeError, TypeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"workload.shapes={shapes}: {op} does not take tensors of these shapes ({first})"
            ) from None

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """One tensor per shape, uniform in [0.5, 1.5)."""
        return tuple((torch.rand(shape, generator=generator) + LOW).to(dtype) for shape in self.shapes)

    def forward(self, *inputs: torch.Tensor) -> Any:
        """The op itself."""
        return self.op(*inputs)

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The op in float64 on CPU (the first tensor output)."""
        return _tensors(self.op(*(t.detach().cpu().to(torch.float64) for t in inputs)))[0]

    def bytes_moved(self, *inputs: torch.Tensor) -> int:
        """Every input read once and every output written once."""
        outputs = _tensors(self.op(*(t.to("meta") for t in inputs)))
        return sum(t.nbytes for t in (*inputs, *outputs))

    def flop_count(self, *inputs: torch.Tensor) -> int:
        """FlopCounterMode's count (matmuls, convolutions), else one FLOP per output element of a pointwise op."""
        meta = [t.to("meta") for t in inputs]
        with FlopCounterMode(display=False) as counter:
            outputs = _tensors(self.op(*meta))
        counted = int(counter.get_total_flops())
        if counted or not self.is_pointwise():
            return counted
        return sum(t.numel() for t in outputs)

    def is_pointwise(self) -> bool:
        """Whether ATen tags the op (any overload, for a packet) as pointwise."""
        overloads = [getattr(self.op, o) for o in self.op.overloads()] if hasattr(self.op, "overloads") else [self.op]
        return any(torch.Tag.pointwise in overload.tags for overload in overloads)
