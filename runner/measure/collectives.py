"""What a rank's steps do with the other ranks (`distributed.ranks`); nothing without a process group."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from runner import names
from runner.backends.peaks import LINK_WORDS, Peak, link_between
from runner.measure.traces import STEP, Span

# the span around the wait for the gradients' all-reduces: its self time is the wait for the
# other ranks, which no op records (gloo and nccl wait outside any op)
_GRADIENT_ALLREDUCE = "runner::allreduce_gradients"
# parts of the names of collectives as torch.profiler records them (c10d ops, gloo's spans, nccl's
# kernels), and of that span; not a bare "broadcast", which aten::broadcast_tensors would match
COLLECTIVE_MARKERS = ("c10d::", "gloo:", "nccl", "allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter")


def all_ranks_max(value: int, device: torch.device) -> int:
    """The largest of the ranks' values (this one's without a process group): counts all ranks keep to."""
    if not dist.is_initialized():
        return value
    vote = torch.tensor([value]).to(device)
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return int(vote.item())


class GradientAverager:
    """Data parallel as DDP does it: each gradient's all-reduce overlaps the rest of the backward.

    One per parameter, not DDP's 25 MB buckets: right for the small models profiled here, chatty for large ones.
    """

    def __init__(self, parameters: list[torch.nn.Parameter]) -> None:
        self.pending: list[tuple[torch.nn.Parameter, dist.Work]] = []
        self.ranks = dist.get_world_size() if dist.is_initialized() else 1
        if self.ranks > 1:
            for parameter in parameters:
                parameter.register_post_accumulate_grad_hook(self._start)  # type: ignore[no-untyped-call]

    def _start(self, parameter: torch.nn.Parameter) -> None:
        assert parameter.grad is not None
        work = dist.all_reduce(parameter.grad, async_op=True)
        assert work is not None
        self.pending.append((parameter, work))

    def wait(self) -> None:
        """Wait for the all-reduces (under `_GRADIENT_ALLREDUCE`); every gradient becomes its mean over the ranks."""
        if self.ranks == 1:
            return
        with torch.profiler.record_function(_GRADIENT_ALLREDUCE):
            for parameter, work in self.pending:
                work.wait()
                assert parameter.grad is not None
                parameter.grad /= self.ranks
        self.pending.clear()


def is_collective(name: str) -> bool:
    """A collective, the wait for one, or the kernel that runs one."""
    return any(marker in name.lower() for marker in COLLECTIVE_MARKERS)


@dataclass
class CollectiveTiming:
    """How a rank's recorded steps spent their time with the other ranks."""

    # the share of the step spent in collectives or waiting on them (see `collective_timing`)
    share: float
    # the share of the collectives' run time that compute overlapped (as HTA's); None: no collective ran
    overlap: float | None
    # a recorded step's mean time, in ms
    step_ms: float

    @property
    def compute_ms(self) -> float:
        """A recorded step's time outside `share`, in ms: measured, so a wait for a late rank cannot shrink it."""
        return self.step_ms * (1 - self.share)


def _merged(spans: Iterable[Span]) -> list[tuple[float, float]]:
    intervals: list[tuple[float, float]] = []
    for start, end in sorted((span.start_us, span.end_us) for span in spans):
        if intervals and start <= intervals[-1][1]:
            intervals[-1] = (intervals[-1][0], max(intervals[-1][1], end))
        else:
            intervals.append((start, end))
    return intervals


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _common_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    common, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        common += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return common


def _descendants(span: Span) -> list[Span]:
    return [found for child in span.children for found in (child, *_descendants(child))]


def collective_timing(steps: list[Span]) -> CollectiveTiming | None:
    """Collective share and overlap of a rank's recorded steps (from `traces.read_steps`); None without steps.

    With device kernels the share is the collective kernels' time no compute hid (the device waits
    for nccl, not the host); on CPU gloo runs on threads of its own, waited for by the step's thread.
    """
    if not steps:
        return None
    step_threads = {step.thread for step in steps}
    step_time = _length(_merged(steps))
    step_ms = step_time / len(steps) / 1000
    spans = [span for step in steps for span in _descendants(step)]
    own = [span for span in spans if span.thread in step_threads and not span.device]
    kernels = [span for span in spans if span.device]
    if any(is_collective(span.name) for span in kernels):
        running = _merged(span for span in kernels if is_collective(span.name))
        common = _common_length(running, _merged(span for span in kernels if not is_collective(span.name)))
        return CollectiveTiming((_length(running) - common) / step_time, common / _length(running), step_ms)
    share = _length(_merged(span for span in own if is_collective(span.name))) / step_time
    running = _merged(span for span in spans if span.thread not in step_threads and is_collective(span.name))
    compute = [
        span
        for span in own
        if not STEP.match(span.name) and not any(is_collective(s.name) for s in [span, *_descendants(span)])
    ]
    overlap = _common_length(running, _merged(compute)) / _length(running) if running else None
    return CollectiveTiming(share, overlap, step_ms)


def collective_bandwidth(
    collective_bytes: float, step_ms: float, ranks: int, peak: Peak | None, ranks_cores: list[int]
) -> tuple[dict[str, float], dict[str, str]]:
    """nccl-tests' algbw and busbw of one step's collectives, and their share of the crossed link's figure if known."""
    algbw = collective_bytes / (step_ms / 1000) / 1e9
    busbw = algbw * 2 * (ranks - 1) / ranks
    metrics = {names.COLLECTIVE_ALGBW_GBPS: algbw, names.COLLECTIVE_BUSBW_GBPS: busbw}
    if peak is None or not peak.links_gbps:
        return metrics, {names.TAG_COLLECTIVE_LINK: "no link figures for this device (links_gbps in conf/peaks.yaml)"}
    nodes = ranks // int(os.environ.get("LOCAL_WORLD_SIZE") or ranks)  # torchrun's; without it all on this node
    link = link_between(ranks_cores, peak.cores_per_chip, nodes)
    figure = peak.links_gbps.get(link)
    if figure is None:
        return metrics, {names.TAG_COLLECTIVE_LINK: f"{LINK_WORDS[link]}: no documented figure"}
    metrics[names.COLLECTIVE_LINK_GBPS] = figure
    metrics[names.COLLECTIVE_BUSBW_LINK_FRACTION] = busbw / figure
    return metrics, {names.TAG_COLLECTIVE_LINK: f"{LINK_WORDS[link]}: {figure:g} GB/s, {peak.source}"}
