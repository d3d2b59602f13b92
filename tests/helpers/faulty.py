"""Workloads that fail on purpose, for the sweep fault-injection tests."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn

from workloads.blocks import SwiGLU
from workloads.llama import DecoderStack


class Faulty(nn.Module):
    """Behaves like an identity until its second call, then fails the way `fault` says.

    raise: a Python exception; abort: os.abort() (SIGABRT, like a native crash);
    kill: SIGKILL to itself (like the out-of-memory killer); hang: never returns (a deadlock);
    nonfinite: returns NaN without raising;
    slow: sleeps `slow_ms` in every call; anything else never fails. With `rank`, only that
    torch.distributed rank misbehaves; with `fail_after_s`, it fails no sooner than that many
    seconds after its first call; with `build_s`, it takes that many seconds to build (a slow build, or a loaded
    host's), before the job can open its run.
    """

    def __init__(
        self,
        fault: str = "none",
        label: str = "",
        rank: int | None = None,
        slow_ms: float = 5.0,
        fail_after_s: float = 0.0,
        build_s: float = 0.0,
    ) -> None:
        super().__init__()
        time.sleep(build_s)
        self.fault = fault  # label only tells otherwise equal configurations apart
        self.rank, self.slow_ms, self.fail_after_s = rank, slow_ms, fail_after_s
        self.scale = nn.Parameter(torch.ones(1))  # something to train, so train_step all-reduces
        self.calls = 0
        self.first_call = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            self.first_call = time.monotonic()
        if self.rank is not None and (not dist.is_initialized() or dist.get_rank() != self.rank):
            return x * self.scale
        if self.fault == "slow":
            time.sleep(self.slow_ms / 1000)
        if self.calls > 1 and time.monotonic() - self.first_call >= self.fail_after_s:
            if self.fault == "raise":
                raise RuntimeError("injected failure")
            if self.fault == "abort":
                os.abort()
            if self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            while self.fault == "hang":
                time.sleep(60)
        return x * float("nan") if self.fault == "nonfinite" else x * self.scale


class DriftingSwiGLU(SwiGLU):
    """A SwiGLU whose output is 0.1% off except in float64: a faulty kernel, seen from the reference."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return out if out.dtype == torch.float64 else out * 1.001


class PerturbedStack(DecoderStack):
    """A decoder stack whose layer `perturbed` has a drifting MLP, for the per-layer accuracy tests."""

    def __init__(self, perturbed: int, **sizes: int) -> None:
        super().__init__(**sizes)
        self.layers[perturbed].mlp.__class__ = DriftingSwiGLU  # same weights, drifting forward


class ReferenceOutOfMemory(nn.Module):
    """Doubles its input, but its float64 reference runs out of memory: a failure after every timed phase."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        raise MemoryError("float64 reference: out of memory")
