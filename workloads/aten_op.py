"""One ATen op on inputs of given shapes: any row of a run's op table, runnable on its own.

`python -m runner +workload=aten_op workload.op=aten::mul workload.shapes=[[4,128,512],[512]]`
times that op alone, on any backend, with a float64 CPU reference and a roofline model where
the op has an obvious one: pointwise ops move their inputs and output and do one FLOP per
output element; matmuls and convolutions count FLOPs as torch's FlopCounterMode does.
Arguments the op table does not record (scalars, dims, flags) keep the op's defaults.
In-place ops are refused: each timed step would start from the previous step's result, so
values drift towards zero or infinity (and denormals are slow on CPU); their out-of-place
form costs the same reads and writes.
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
        ValueError: naming workload.op, when there is no such ATen op or it is an in-place one.
    """
    namespace, _, rest = name.partition("::")
    packet_name, _, overload = rest.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None) if namespace == "aten" and packet_name else None
    op = getattr(packet, overload or "default", None) if overload else packet
    if op is None:
        raise ValueError(f"workload.op={name!r} is not an ATen op; give one as the op table names it, e.g. aten::mul")
    if out_of_place(name) != name:
        raise ValueError(
            f"workload.op={name!r} writes into its input, so every step would start from the last one's result; "
            f"replay its out-of-place form, {out_of_place(name)}"
        )
    return op


def out_of_place(name: str) -> str:
    """`aten::div_` -> `aten::div` (ATen names an in-place op by a trailing underscore); other names unchanged."""
    packet_name, dot, overload = name.partition(".")
    if packet_name.endswith("_") and not packet_name.removeprefix("aten::").startswith("_"):
        return packet_name[:-1] + dot + overload
    return name


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
        metas = [torch.empty(shape, device="meta") for shape in self.shapes]
        try:  # on the meta device: checks the call without computing anything
            outputs = _tensors(self.op(*metas))
        except (RuntimeError, TypeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"workload.shapes={shapes}: {op} does not take tensors of these shapes ({first})"
            ) from None
        if any(output is arg for output in outputs for arg in metas):
            raise ValueError(
                f"workload.op={op!r} returns its input unchanged for workload.shapes={shapes}, its other arguments "
                "at their defaults: there is nothing to time"
            )

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """One tensor per shape, uniform in [0.5, 1.5)."""
        return tuple((torch.rand(shape, generator=generator) + LOW).to(dtype) for shape in self.shapes)

    def forward(self, *inputs: torch.Tensor) -> Any:
        """The op itself."""
        return self.op(*inputs)

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor | None:
        """The op in float64 on CPU (the first tensor output); None where the op's values are undefined.

        `empty*` ops return uninitialised memory and random ops draw new values: there is no
        answer to compare against, so the accuracy check says skipped rather than fail.
        """
        if self.has_undefined_output():
            return None
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
        return self._tagged(torch.Tag.pointwise)

    def has_undefined_output(self) -> bool:
        """Whether the op returns uninitialised memory (`empty*`) or random values."""
        packet_name = self.op_name.partition("::")[2].partition(".")[0]
        return packet_name.startswith(("empty", "new_empty")) or self._tagged(torch.Tag.nondeterministic_seeded)

    def _tagged(self, tag: torch.Tag) -> bool:
        """Whether ATen gives the op (any overload, for a packet) this tag."""
        overloads = [getattr(self.op, o) for o in self.op.overloads()] if hasattr(self.op, "overloads") else [self.op]
        return any(tag in overload.tags for overload in overloads)
