"""Modules used by tests as `_target_`s: they count calls, record their inputs or fail on purpose."""

from __future__ import annotations

import time

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


class RecordingModule(nn.Module):
    """Records each call's input address and sum, and sleeps `pause_s`: steps of known length and memory.

    With `log_to`, each call also appends `label` to that file, so calls in other processes show.
    """

    seen: list[tuple[int, float]] = []

    def __init__(self, hidden: int = 8, pause_s: float = 0.0, log_to: str | None = None, label: str = "") -> None:
        super().__init__()
        self.hidden, self.pause_s, self.log_to, self.label = hidden, pause_s, log_to, label

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).seen.append((x.data_ptr(), float(x.sum())))
        if self.log_to:
            with open(self.log_to, "a") as log:
                log.write(self.label + "\n")
        time.sleep(self.pause_s)
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
