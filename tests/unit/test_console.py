"""What the terminal shows at the end of a job: each check in its own line, with the figures it used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from runner import names
from runner.measure.accuracy import TOLERANCE, check_accuracy, check_finite, finite_warning
from runner.measure.optable import OpTable
from runner.measure.result import JobResult
from runner.measure.roofline import over_peak
from runner.report.console import job_summary

STEADY = {
    names.STEP_MEDIAN_MS: 1.0,
    names.STEP_P10_MS: 0.9,
    names.STEP_P90_MS: 1.1,
    names.STEP_CV: 0.01,
    names.STEPS_TIMED: 600.0,
    names.FIRST_CALL_S: 0.1,
}


def summary(tmp_path: Path, metrics: dict[str, float], tags: dict[str, str], **fields: object) -> str:
    result = JobResult({**STEADY, **metrics}, tags, OpTable([], 1, False), "", tmp_path, **fields)  # type: ignore[arg-type]
    return job_summary("job", "cpu", result, "MLflow run r")


def test_layer_accuracy_says_what_it_compared_when_every_layer_passes(tmp_path: Path) -> None:
    table = {"layer": ["layers.0", "layers.1", "norm"]}
    text = summary(
        tmp_path,
        {names.LAYERS_FAILING: 0.0},
        {names.TAG_FIRST_FAILING_LAYER: "none"},
        tables={names.LAYER_TABLE_FILE: table},
    )
    assert "layer accuracy: 3 layer output(s) compared with float64 on the CPU, none over tolerance" in text
    failing = summary(
        tmp_path,
        {names.LAYERS_FAILING: 2.0},
        {names.TAG_FIRST_FAILING_LAYER: "layers.1"},
        tables={names.LAYER_TABLE_FILE: table},
    )
    assert "3 layer output(s) compared with float64 on the CPU, 2 over tolerance; layers.1 is the first" in failing
    assert "layer accuracy" not in summary(tmp_path, {}, {})  # not asked for: not shown


class Halving(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 2

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        return x.double() / 2


def test_the_printed_tolerance_is_the_one_the_check_uses() -> None:
    x = torch.ones(4, dtype=torch.bfloat16)
    for dtype in ("bfloat16", "float32", "float16"):
        metrics, tags = check_accuracy(Halving(), (x,), x / 2, dtype)
        printed = re.search(r"against tolerance (\S+) for", tags[names.TAG_ACCURACY_DETAIL])
        assert printed is not None and float(printed.group(1)) == TOLERANCE[dtype] == metrics[names.ACCURACY_TOLERANCE]


def test_a_non_finite_output_warns_how_many_elements_without_the_tags_false() -> None:
    (finite,) = check_finite(torch.tensor([1.0, float("nan"), float("inf")])).values()
    assert finite_warning(finite) == "the workload's output is not finite: 2 of 3 elements are NaN or infinite"
    assert finite_warning(*check_finite(torch.ones(2)).values()) is None


def test_the_roofline_names_the_ceiling_it_is_above(tmp_path: Path) -> None:
    roofline = {
        names.ROOFLINE_ACHIEVED_GBPS: 0.05,
        names.ROOFLINE_BANDWIDTH_FRACTION: 0.0014,
        names.ROOFLINE_PEAK_GBPS: 35.7,
        names.ROOFLINE_ACHIEVED_GFLOPS: 17.7,
        names.ROOFLINE_COMPUTE_FRACTION: 1.77,
        names.ROOFLINE_PEAK_GFLOPS: 10.0,
    }
    assert over_peak(roofline) == ["compute 177% of 10.0 GFLOP/s"]
    text = summary(tmp_path, roofline, {names.TAG_ROOFLINE_PEAK: "measured"})
    assert "roofline: 0.05 GB/s = 0.1% of 35.7 GB/s; 17.70 GFLOP/s = 177.0% of 10.0 GFLOP/s [measured]" in text
    assert over_peak({**roofline, names.ROOFLINE_COMPUTE_FRACTION: 0.5}) == []


def test_a_cpu_calibration_says_so_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.backends import peaks

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    printed_before: list[str] = []

    def calibrate(dtype: str) -> tuple[float, float]:
        printed_before.append(capsys.readouterr().err)
        return 10.0, 20.0

    monkeypatch.setattr(peaks, "calibrate_cpu", calibrate)
    assert peaks.cpu_peak("float32").gflops == 20.0
    assert printed_before == [printed_before[0]] and "calibrating this machine's CPU peaks" in printed_before[0]
    peaks.cpu_peak("float32")  # cached: measured once, said once
    assert len(printed_before) == 1 and "calibrating" not in capsys.readouterr().err


def test_the_rounds_say_whether_the_workers_ran_alone_or_interleaved_with_the_sweeps(tmp_path: Path) -> None:
    own = {"round": [1, 2, 3], "position": [1, 1, 1], "workers": [1, 1, 1], "median_ms": [1.0, 1.1, 1.0]}
    assert "rounds: 3, one fresh worker process each, one after another" in summary(
        tmp_path, {}, {}, tables={names.ROUNDS_FILE: own}
    )
    shared = {**own, "position": [2, 1, 3], "workers": [3, 3, 3]}
    text = summary(tmp_path, {}, {}, tables={names.ROUNDS_FILE: shared})
    assert "rounds: 3, each one fresh worker of this job and of 2 other job(s) of the sweep in a random order" in text
    assert "rounds:" not in summary(tmp_path, {}, {})  # timed in the job's own process: no rounds


def test_the_steady_state_line_says_how_many_steps_it_timed(tmp_path: Path) -> None:
    # measure.steps_s may have timed fewer than measure.steps: the count is what the median rests on
    assert "steady state: median 1.0000 ms/step over 600 steps (p10 0.9000," in summary(tmp_path, {}, {})


def test_a_device_clocked_job_names_its_clock_and_explains_its_synchronized_step(tmp_path: Path) -> None:
    """The compiled RMSNorm on an H200 (issue 48): its wall step 12x its device time; where the rest went."""
    wall = {names.SYNC_STEP_MS: 0.0818, names.DEVICE_BUSY_MS: 0.0066, names.HOST_AND_IDLE_MS: 0.0752}
    text = summary(tmp_path, wall, {names.TAG_STEP_CLOCK: "device, cache flushed before each step"})
    assert "steady state (by device events, steps back to back; cache flushed before each step): median 1.0000" in text
    explained = "0.0818 ms wall = 0.0066 ms device busy (8%) + 0.0752 ms launches, host Python and idle (92%)"
    assert f"synchronized step: {explained}" in text
    unprofiled = summary(tmp_path, {names.SYNC_STEP_MS: 0.0818}, {names.TAG_STEP_CLOCK: "device"})
    assert (
        "synchronized step: 0.0818 ms wall, launch to completion (the device's busy share needs the profiler)"
        in unprofiled
    )
    host = summary(tmp_path, {}, {names.TAG_STEP_CLOCK: "host"})
    assert "steady state: median 1.0000 ms/step" in host and "synchronized step" not in host


def test_the_trace_line_names_the_last_cycle_and_the_folder_hta_reads(tmp_path: Path) -> None:
    """Holistic Trace Analysis finds no trace in trace/ itself: its trace_dir is a cycle's folder."""
    for step in (3, 7, 11):  # schedule=repeat's cycles: iteration_11 sorts before iteration_3 as text
        (tmp_path / names.TRACE_ITER_FOLDER.format(step=step)).mkdir()
        (tmp_path / names.TRACE_ITER_FOLDER.format(step=step) / names.TRACE_FILE).write_text("{}")
    (line,) = [line for line in summary(tmp_path, {}, {}).splitlines() if line.startswith("trace: ")]
    assert line == (
        f"trace: {tmp_path / 'iteration_11' / names.TRACE_FILE}  (open in https://ui.perfetto.dev or chrome://tracing; "
        "the last of 3 cycles, a folder each; Holistic Trace Analysis reads its folder, not trace/)"
    )


def test_a_noisy_host_is_a_note_not_a_warning(tmp_path: Path) -> None:
    """A wide interval is news for comparisons that do not pair, not a fault of the run: NOTE, not WARNING."""
    noted = summary(tmp_path, {}, {}, timing_note="this host is noisy: ...")
    assert "NOTE: this host is noisy: ..." in noted and "WARNING" not in noted
    assert "NOTE" not in summary(tmp_path, {}, {})
