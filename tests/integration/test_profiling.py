"""The measurement loop and the op table on CPU, with the real torch.profiler."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from runner import names
from runner.backends.cpu import CpuBackend
from runner.config import RunSpec
from runner.config_loading import load_run_spec
from runner.execute.in_process import steady_state_source
from runner.measure.build import build_workload
from runner.measure.loop import LAYOUTS_ENV, WARM_CALLS
from runner.measure.measurement import Measurement
from runner.measure.optable import summary_metrics
from runner.measure.phases import measure
from runner.measure.traces import steps_under
from runner.measure.window import COST_SESSIONS, SETTLE_STEPS
from tests.helpers import compose_cfg
from tests.helpers.counting import CountingModule


def run_measure(tmp_path: Path, *overrides: str) -> tuple[RunSpec, Measurement]:
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", *overrides))
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    return spec, measure(
        workload, backend, spec, tmp_path / "trace", steady_state_source(spec, backend, workload), tmp_path / "memory"
    )


def unprofiled_calls(spec: RunSpec) -> int:
    """The steady state's calls in one stretch of memory (no settling calls): per repeat, its warm-up, the warm
    calls it ends with and its steps."""
    return (spec.measure.warmup + WARM_CALLS + spec.measure.steps) * spec.measure.repeats


def calls_per_step(result: Measurement) -> Counter[str]:
    counts: Counter[str] = Counter()
    for row in result.table.rows:
        counts[row["name"]] += row["calls_per_step"]
    return counts


def test_naive_rmsnorm_shows_its_separate_ops(tmp_path: Path) -> None:
    _, result = run_measure(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "workload.seq_len=4")
    calls = calls_per_step(result)
    assert calls["aten::mul"] == 3
    assert calls["aten::mean"] == 1
    assert calls["aten::add"] == 1
    assert calls["aten::rsqrt"] == 1
    assert "aten::rms_norm" not in calls


def test_builtin_rmsnorm_goes_through_rms_norm(tmp_path: Path) -> None:
    _, result = run_measure(tmp_path, "+workload=rmsnorm_builtin", "workload.hidden=16")
    assert calls_per_step(result)["aten::rms_norm"] == 1


def test_table_columns_and_summary_metrics(tmp_path: Path) -> None:
    _, result = run_measure(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16")
    columns = result.table.columns()
    for name in ("name", "input_shapes", "calls", "self_cpu_ms", "cpu_total_ms", "cpu_memory_bytes", "flops"):
        assert name in columns
    # CPU reports no device time: no device columns and no device metric, never a zero
    assert "self_device_ms" not in columns
    metrics = summary_metrics(result.table)
    assert names.DEVICE_SELF_TOTAL_MS not in metrics
    assert metrics[names.OPS_ATEN] >= 4
    assert 0 < metrics[names.OPS_TOP_SHARE] <= 1
    assert metrics[names.PROFILED_STEP_MS] > 0
    assert metrics[names.CPU_SELF_TOTAL_MS] > 0
    assert "aten::rsqrt" in result.printed_table


def test_the_profiled_step_is_the_mean_of_every_recorded_step_and_ops_run_longest_first(tmp_path: Path) -> None:
    _, result = run_measure(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "schedule.active=2",
                            "schedule.repeat=2")  # fmt: skip
    # the traces' ProfilerStep spans, two per cycle: the same steps as key_averages() times them
    recorded = [step.dur_us / 1000 for step in steps_under(tmp_path / "trace")]
    assert len(recorded) == 4
    assert summary_metrics(result.table)[names.PROFILED_STEP_MS] == pytest.approx(statistics.fmean(recorded), rel=1e-3)
    self_ms = [row[names.OP_SELF_CPU_MS] for row in result.table.rows]
    assert self_ms == sorted(self_ms, reverse=True) and self_ms[0] > self_ms[-1]


def test_schedule_runs_exactly_its_steps_and_writes_one_trace_per_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LAYOUTS_ENV, "1")  # the settling calls a stretch needs vary; one stretch needs none
    CountingModule.calls = 0
    spec, result = run_measure(
        tmp_path,
        "+workload=custom",
        "workload._target_=tests.helpers.counting.CountingModule",
        "workload.inputs=[[2,2]]",
        "schedule.wait=1",
        "schedule.warmup=1",
        "schedule.active=2",
        "schedule.repeat=2",
    )
    unprofiled = unprofiled_calls(spec)
    # each session of the profiler's cost: settling steps, the reference, a warm-up and two recorded steps
    cost = COST_SESSIONS * (SETTLE_STEPS + 4)
    # first call, steady state, the profiler's cost, schedule
    assert CountingModule.calls == 1 + unprofiled + cost + spec.schedule.total_steps
    assert result.table.active_steps == 4
    assert calls_per_step(result)["aten::mul"] == 1  # accumulated over both cycles, per active step
    traces = sorted((tmp_path / "trace").rglob("*.pt.trace.json"))  # all TensorBoard's profiler plugin lists
    # each cycle's folder is named by the last ProfilerStep#N it holds (0 wait, 1 warm-up, 2-3 recorded)
    assert [t.parent.name for t in traces] == ["iteration_3", "iteration_7"]
    held = [
        sorted(
            e["name"] for e in json.loads(t.read_text())["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
        )
        for t in traces
    ]
    assert held == [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]]
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mul" for e in events)


def test_profiler_off_runs_the_steps_without_recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAYOUTS_ENV, "1")
    CountingModule.calls = 0
    spec, result = run_measure(
        tmp_path,
        "+workload=custom",
        "workload._target_=tests.helpers.counting.CountingModule",
        "workload.inputs=[[2]]",
        "profiler=none",
    )
    assert CountingModule.calls == 1 + unprofiled_calls(spec) + 4  # first call, steady state, the schedule
    assert result.table.rows == [] and summary_metrics(result.table) == {}
    assert result.profiler_cost is None  # no profiler, no cost to measure
    assert not (tmp_path / "trace").exists()


@pytest.mark.slow
def test_compiled_rmsnorm_replaces_the_separate_ops(tmp_path: Path) -> None:
    _, result = run_measure(tmp_path, "+workload=rmsnorm_compiled", "workload.hidden=16", "workload.seq_len=2")
    calls = calls_per_step(result)
    assert any(name.startswith("Torch-Compiled Region") for name in calls)
    assert "aten::rsqrt" not in calls and "aten::mean" not in calls
    assert result.first_call_s > 0
