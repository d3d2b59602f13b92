"""RMSNorm three ways: separate ops, the fused built-in, and (via workload.compile) compiled.

All variants share inputs, weight and reference so that only the lowering path differs.
"""

from __future__ import annotations

import torch
from torch import nn

from workloads.base import TokenWorkload, as_float64, require_positive_number


class RMSNorm(TokenWorkload):
    """Shared shape, weight, inputs and reference for the RMSNorm variants."""

    def __init__(self, hidden: int, batch: int = 1, seq_len: int = 1, eps: float = 1e-6) -> None:
        super().__init__(hidden, batch, seq_len)
        require_positive_number(eps=eps)
        self.eps = eps
        # Not all ones, so a variant that forgot the weight fails the reference check.
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden))

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x and the weight, write the output: the least traffic any variant needs."""
        return 2 * x.numel() * x.element_size() + self.weight.numel() * self.weight.element_size()

    def flop_count(self, x: torch.Tensor) -> int:
        """Per element x*x, the sum, *rsqrt and *weight (4); per row the mean, +eps and rsqrt (3)."""
        return 4 * x.numel() + 3 * self.tokens(x)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm in float64 on CPU."""
        (x64, weight) = as_float64(x, self.weight)
        return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + self.eps) * weight


class NaiveRMSNorm(RMSNorm):
    """Separate ATen ops: mul, mean, add, rsqrt, mul, mul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension with one ATen op per arithmetic step."""
        variance = (x * x).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


class BuiltinRMSNorm(RMSNorm):
    """`torch.nn.functional.rms_norm`: one fused op where the backend provides it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension with PyTorch's built-in RMSNorm."""
        return torch.nn.functional.rms_norm(x, (self.hidden,), self.weight, self.eps)
