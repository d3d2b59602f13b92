"""New memory layouts within one process's timed steps, so its median rests on more than one (docs/trust.md)."""

from __future__ import annotations

import random

import torch

from runner.measure.host_memory import KEEP_UP_TO_BYTES

# host blocks held through a stretch: at most this many, each at most the largest input's size within
# what the heap serves (larger blocks are mappings of their own, which shift nothing)
_MOST_PADS = 8
_PAD_FLOOR_BYTES = 4096


class MemoryLayouts:
    """Moves a workload's inputs to new memory, with host blocks of random size held so the step's land anew too."""

    def __init__(self, inputs: tuple[torch.Tensor, ...]) -> None:
        self.inputs = inputs
        self.pad_limit = min(max([_PAD_FLOOR_BYTES, *(tensor.nbytes for tensor in inputs)]), KEEP_UP_TO_BYTES)
        self.pads: list[torch.Tensor] = []
        self.random = random.Random()  # each process its own draws

    def move(self) -> None:
        """Take new memory for the inputs, after new pads and before the old ones go."""
        sizes = [self.random.randint(1, self.pad_limit) for _ in range(self.random.randint(1, _MOST_PADS))]
        self.pads = [torch.empty(size, dtype=torch.uint8) for size in sizes]
        for tensor in self.inputs:
            # in place, so the step (a closure over these tensors) reads the new memory
            tensor.data = tensor.data.clone()
