"""What the ranks' metrics count as time in collectives, and as collectives overlapping compute.

The spans are laid out by hand so each figure is known; the ranks tests measure real ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import names
from runner.backends.neuron import NeuronBackend
from runner.backends.peaks import datasheet_peak, link_between
from runner.execute.ranks import cross_rank
from runner.measure.collectives import collective_bandwidth, collective_timing, is_collective
from runner.measure.optable import OpTable
from runner.measure.result import JobResult
from runner.measure.traces import Span

STEP_THREAD, GLOO_THREAD = "1/1", "1/7"


def span(name: str, start: float, end: float, thread: str = STEP_THREAD, *children: Span, device: bool = False) -> Span:
    return Span(name, start, end - start, thread, device, list(children))


def test_on_cpu_the_share_is_the_steps_own_wait_and_the_overlap_is_gloos_threads_against_its_compute() -> None:
    step = span(
        "ProfilerStep#3", 0, 100, STEP_THREAD,
        span("aten::mm", 0, 40),
        span("autograd::engine::evaluate_function: AccumulateGrad", 40, 43, STEP_THREAD,
             span("c10d::allreduce_", 40, 42)),
        span("aten::mm", 43, 80),
        span("runner::allreduce_gradients", 80, 100, STEP_THREAD, span("aten::div_", 95, 96)),
        span("gloo:all_reduce", 41, 90, GLOO_THREAD),
    )  # fmt: skip
    timing = collective_timing([step])
    assert timing is not None
    assert timing.share == pytest.approx((42 - 40 + 100 - 80) / 100)
    assert timing.compute_ms == pytest.approx((100 - 22) / 1000)  # the trace's microseconds outside the share
    # gloo ran 41-90; the step's thread computed 43-80 (the span that enqueued it is not compute)
    assert timing.overlap == pytest.approx((80 - 43) / (90 - 41))


def test_with_device_kernels_the_overlap_is_between_kernels() -> None:
    launch = span(
        "cudaLaunchKernel", 0, 1, STEP_THREAD,
        span("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 30, "0/7", device=True),
        span("ampere_sgemm_128x64", 20, 60, "0/8", device=True),
    )  # fmt: skip
    step = span("ProfilerStep#5", 0, 100, STEP_THREAD, launch, span("aten::mm", 1, 100))
    timing = collective_timing([step])
    assert timing is not None and timing.overlap == pytest.approx(10 / 20)
    assert timing.share == pytest.approx(10 / 100)  # 10-20: nccl's kernel with no compute beside it
    assert timing.compute_ms == pytest.approx(90 / 1000)


def test_a_rank_waiting_longer_for_a_late_one_keeps_its_compute() -> None:
    """Compute is measured per recorded step, not inferred from a share: a longer wait leaves it as it was."""

    def step(number: int, start: float, wait: float) -> Span:
        mm = span("aten::mm", start, start + 30)
        return span(f"ProfilerStep#{number}", start, start + 30 + wait, STEP_THREAD, mm,
                    span("runner::allreduce_gradients", start + 30, start + 30 + wait))  # fmt: skip

    short, long = collective_timing([step(1, 0, 10)]), collective_timing([step(1, 0, 10), step(2, 100, 70)])
    assert short is not None and long is not None
    assert short.compute_ms == pytest.approx(long.compute_ms) == pytest.approx(30 / 1000)
    assert long.share > short.share


def rank_result(folder: Path, median_ms: float, compute_us: float, wait_us: float) -> JobResult:
    """A rank whose one recorded step computes, then waits in the gradients' all-reduce."""
    events = [("ProfilerStep#4", 0, compute_us + wait_us), ("aten::mul", 0, compute_us),
              ("runner::allreduce_gradients", compute_us, wait_us)]  # fmt: skip
    trace = [{"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}
             for name, ts, dur in events]  # fmt: skip
    folder.mkdir()
    (folder / "trace.json").write_text(json.dumps({"traceEvents": trace}))
    return JobResult({names.STEP_MEDIAN_MS: median_ms}, {}, OpTable([], 1, False), "", folder)


def test_the_slow_rank_keeps_its_compute_though_its_profiled_step_waited_for_the_other(tmp_path: Path) -> None:
    """Rank 1 sleeps 50 ms a step; in the profiled step it also waited 15 ms for rank 0's profiler to start."""
    fast = rank_result(tmp_path / "rank0", 52.0, compute_us=4_000, wait_us=56_000)
    slow = rank_result(tmp_path / "rank1", 52.0, compute_us=50_000, wait_us=15_000)
    metrics, tags = cross_rank([fast, slow])
    assert tags == {names.TAG_SLOWEST_RANK: "1"}
    assert metrics[f"rank1/{names.RANK_COMPUTE_MS}"] == pytest.approx(50.0)  # not 52 x (1 - 15/65) = 40
    assert metrics[f"rank0/{names.RANK_COMPUTE_MS}"] == pytest.approx(4.0)
    assert metrics[names.RANKS_COMPUTE_SPREAD] == pytest.approx(12.5)


def test_no_collective_run_no_overlap_and_no_steps_no_timing() -> None:
    timing = collective_timing([span("ProfilerStep#1", 0, 10, STEP_THREAD, span("aten::mm", 0, 10))])
    assert timing is not None and timing.share == 0 and timing.overlap is None
    assert collective_timing([]) is None


@pytest.mark.parametrize(
    ("name", "collective"),
    [("c10d::allreduce_", True), ("gloo:all_reduce", True), ("nccl:all_reduce", True),
     ("ncclDevKernel_AllGather_RING_LL", True), ("aten::broadcast_tensors", False), ("aten::mm", False)],
)  # fmt: skip
def test_what_counts_as_a_collective(name: str, collective: bool) -> None:
    assert is_collective(name) is collective


@pytest.mark.parametrize(
    ("cores", "cores_per_chip", "nodes", "link"),
    [
        pytest.param([0, 1], 4, 1, "intra_chip", id="two-cores-of-one-trn2-chip"),
        pytest.param([3, 4], 4, 1, "chip_to_chip", id="cores-of-two-trn2-chips"),
        pytest.param([0, 1], 2, 1, "intra_chip", id="the-two-cores-of-a-trn1-chip"),
        pytest.param([], None, 1, "chip_to_chip", id="one-device-per-rank"),
        pytest.param([0, 1], 4, 2, "node_to_node", id="ranks-on-two-nodes"),
    ],
)
def test_the_link_the_ranks_cross(cores: list[int], cores_per_chip: int | None, nodes: int, link: str) -> None:
    assert link_between(cores, cores_per_chip, nodes) == link


def test_busbw_is_a_fraction_only_of_the_link_the_ranks_cross(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    peak = datasheet_peak("trn2_core", 1, "bfloat16")
    one_chip, one_chip_tags = collective_bandwidth(1e9, 10.0, 2, peak, [0, 1])
    assert one_chip[names.COLLECTIVE_BUSBW_GBPS] == pytest.approx(100)
    assert names.COLLECTIVE_BUSBW_LINK_FRACTION not in one_chip and names.COLLECTIVE_LINK_GBPS not in one_chip
    assert one_chip_tags[names.TAG_COLLECTIVE_LINK] == "intra-chip: no documented figure"
    two_chips, two_chips_tags = collective_bandwidth(1e9, 10.0, 2, peak, [3, 4])
    assert two_chips[names.COLLECTIVE_BUSBW_LINK_FRACTION] == pytest.approx(100 / 1280)
    assert two_chips_tags[names.TAG_COLLECTIVE_LINK].startswith("chip-to-chip: 1280 GB/s, datasheet: trn2_core")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one rank on each of two nodes: EFA, given per instance only
    across, across_tags = collective_bandwidth(1e9, 10.0, 2, peak, [0])
    assert names.COLLECTIVE_BUSBW_LINK_FRACTION not in across
    assert across_tags[names.TAG_COLLECTIVE_LINK] == "node-to-node (EFA): no documented figure"


def test_a_neuron_rank_finds_its_nodes_ranks_cores_from_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = object.__new__(NeuronBackend)  # the method reads the rank's environment only: no runtime
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert backend.ranks_cores() == [3, 4]  # across the Trn2 chips of cores 0-3 and 4-7
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")  # the `neuron` process group pins a rank to its local rank
    assert backend.ranks_cores() == [0, 1]
