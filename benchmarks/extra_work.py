"""A module that does a known amount of extra work, for benchmarks/gate_detection.py.

`RepeatedRMSNorm` applies the naive RMSNorm `repeats` times in a row, `repeats` read from
$EXTRA_WORK_REPEATS (default 10): with 11 it does 10% more work while the job's config, and
so its config hash, stays the same, as in CI where a commit changes code and not config.
benchmarks/gate_detection.py makes that change a commit (`DEFAULT_REPEATS = 11`) in a copy of the
project and gates it against its parent.

EXTRA_WORK_REPEATS=11 python -m runner +workload=custom workload._target_=benchmarks.extra_work.RepeatedRMSNorm \
    workload.inputs=null +workload.hidden=512 +workload.batch=4 +workload.seq_len=128 backend=cpu
"""

from __future__ import annotations

import os

import torch
from torch import nn

from workloads.base import TokenWorkload

REPEATS_ENV = "EXTRA_WORK_REPEATS"
DEFAULT_REPEATS = 10


class RepeatedRMSNorm(TokenWorkload):
    """The naive RMSNorm applied `$EXTRA_WORK_REPEATS` times; inputs (batch, seq_len, hidden) from TokenWorkload."""

    def __init__(self, hidden: int, batch: int = 1, seq_len: int = 1, eps: float = 1e-6) -> None:
        super().__init__(hidden, batch, seq_len)
        self.eps = eps
        self.repeats = int(os.environ.get(REPEATS_ENV, DEFAULT_REPEATS))
        if self.repeats < 1:
            raise ValueError(f"{REPEATS_ENV} must be >= 1, got {self.repeats}")
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden))

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """One activation tensor of shape (batch, seq_len, hidden), drawn from `generator`."""
        return super().example_inputs(dtype, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x*x, mean, +eps, rsqrt, *x, *weight, `repeats` times."""
        for _ in range(self.repeats):
            x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight
        return x
