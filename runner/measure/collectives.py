"""What a rank's steps do with the other ranks (`distributed.ranks`); nothing without a process group."""

from __future__ import annotations

import torch
import torch.distributed as dist

# the span around the gradients' all-reduce: its self time is the wait for the other ranks,
# which no op records (gloo and nccl wait outside any op)
GRADIENT_ALLREDUCE = "runner::allreduce_gradients"
# op names of collectives, as torch.profiler records them, and that span
COLLECTIVE_MARKERS = ("c10d::", "gloo:", "nccl:", "allreduce", "all_reduce", "allgather", "reduce_scatter", "broadcast")


def all_ranks_agree(flag: bool, device: torch.device) -> bool:
    """True while any rank says true: phases whose length depends on the clock stay in step."""
    if not dist.is_initialized():
        return flag
    vote = torch.tensor([int(flag)]).to(device)
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return bool(vote.item())


def average_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Data parallel: every rank's gradients replaced by their mean over the ranks."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.profiler.record_function(GRADIENT_ALLREDUCE):
        for parameter in parameters:
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
                parameter.grad /= dist.get_world_size()
