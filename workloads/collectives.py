"""Collective micro-benchmarks: one all-reduce per step, over every rank of the job.

Run with `distributed.ranks=N` and sweep `workload.megabytes` (`+experiment=allreduce_sizes`):
each job logs the algorithm and bus bandwidth of its message size, as nccl-tests defines them
(algbw = bytes / time; busbw = algbw * 2(n-1)/n for an all-reduce, comparable across rank counts).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from workloads.base import require_positive_number

BYTES_PER_MB = 10**6


class AllReduce(nn.Module):
    """All-reduce a tensor of `megabytes` in place each step.

    The reduction is MAX rather than nccl-tests' SUM: it moves the same bytes, and values stay
    finite however many steps run on the same tensor. Alone (one rank) the step does nothing.
    """

    def __init__(self, megabytes: float = 1.0) -> None:
        super().__init__()
        require_positive_number(megabytes=megabytes)
        self.megabytes = megabytes

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """One flat tensor of the message size (at least one element)."""
        numel = max(1, int(self.megabytes * BYTES_PER_MB) // torch.empty((), dtype=dtype).element_size())
        return (torch.rand(numel, generator=generator).to(dtype),)

    def forward(self, message: torch.Tensor) -> torch.Tensor:
        """The all-reduce itself, in a span whose time includes the wait, which no op records."""
        if dist.is_initialized():
            with torch.profiler.record_function("workloads::all_reduce"):
                dist.all_reduce(message, op=dist.ReduceOp.MAX)
        return message

    def collective_bytes(self, message: torch.Tensor) -> int:
        """The message size, in bytes, that algbw divides by the step time."""
        return message.nbytes
