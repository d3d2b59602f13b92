"""Workloads that fail on purpose, for the sweep fault-injection tests."""

from __future__ import annotations

import os
import signal

import torch
from torch import nn


class Faulty(nn.Module):
    """Behaves like an identity until its second call, then fails the way `fault` says.

    raise: a Python exception; abort: os.abort() (SIGABRT, like a native crash);
    kill: SIGKILL to itself (like the out-of-memory killer); nonfinite: returns NaN without raising;
    anything else never fails.
    """

    def __init__(self, fault: str = "none", label: str = "") -> None:
        super().__init__()
        self.fault = fault  # label only tells otherwise equal configurations apart
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            if self.fault == "raise":
                raise RuntimeError("injected failure")
            if self.fault == "abort":
                os.abort()
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return x * float("nan") if self.fault == "nonfinite" else x * 1.0
