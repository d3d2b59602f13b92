"""Modules used by tests as `_target_`s: they count calls or fail on purpose."""

from __future__ import annotations

import torch
from torch import nn


class CountingModule(nn.Module):
    """Counts forward calls, to check the loop runs exactly the steps the schedule needs."""

    calls = 0

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return x * 2.0


class FailingModule(nn.Module):
    """Raises in forward after its first call, as a workload crashing mid-profile would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("workload failed on purpose")
        return x
