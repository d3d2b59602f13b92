"""Does the profiled window represent the steady state? The verdict on synthetic figures, and its console line."""

from __future__ import annotations

from pathlib import Path

from runner import names
from runner.config import ScheduleConfig
from runner.measure.optable import OpTable
from runner.measure.result import JobResult
from runner.measure.window import ProfilerCost, judge_window
from runner.report.console import job_summary

DEFAULT = ScheduleConfig()  # wait 2, warm-up 1, active 1: one recorded step
# a busy host's steady state: 0.21 ms steps, 11% of them stalled at 8.3 ms
STALLING = [0.21] * 89 + [8.3] * 11
COST = ProfilerCost(first_ms=0.3, later_ms=0.01)


def test_a_stalled_window_is_flagged_with_a_wider_window_that_would_have_absorbed_the_stall() -> None:
    reason = judge_window([24.2], COST, DEFAULT, STALLING, 0.21, max_steps=200)
    assert reason is not None
    assert "its 1 profiled step(s) averaged 24.2000 ms where the steady state predicts 0.5100 ms" in reason
    assert "(median 0.2100 + the profiler's measured cost 0.3000), 47.5x" in reason
    # (24.2 - 0.3 - 0.21) / 0.22 -> 108 steps; cycles of 5 miss an 11% stall rate half the time
    assert reason.endswith("widen it: schedule.active=5 schedule.repeat=22")
    wider = ScheduleConfig(active=5, repeat=22)
    steps = [24.2] + [0.21 + cost for cost in COST.per_recorded_step(wider)[1:]]
    assert judge_window(steps, COST, wider, STALLING, 0.21, max_steps=200) is None


def test_a_window_as_slow_as_the_steady_state_plus_the_profiler_is_not_flagged() -> None:
    assert judge_window([0.5], COST, DEFAULT, STALLING, 0.21, max_steps=200) is None
    assert judge_window([0.5, 0.3, 0.45, 0.22], COST, ScheduleConfig(active=2, repeat=2), STALLING, 0.21, 200) is None


def test_the_profilers_measured_cost_is_subtracted_before_the_step_is_judged() -> None:
    # a tiny step the profiler makes 9x slower: its cost explains it, so the window reads the steady state
    steady = [0.03] * 100
    assert judge_window([0.28], ProfilerCost(0.25, 0.002), DEFAULT, steady, 0.03, max_steps=20) is None
    # the same step with no profiler cost to explain it is a stall; a stall-free steady state: one cycle,
    # and the advice stops at measure.steps
    reason = judge_window([0.28], ProfilerCost(0.0, 0.0), DEFAULT, steady, 0.03, max_steps=20)
    assert reason is not None and reason.endswith("widen it: schedule.active=9 schedule.repeat=1")
    far = judge_window([2.8], ProfilerCost(0.0, 0.0), DEFAULT, steady, 0.03, max_steps=20)
    assert far is not None and far.endswith("schedule.active=20 schedule.repeat=1")


def test_a_window_faster_than_half_the_steady_median_is_flagged_whatever_the_cost() -> None:
    reason = judge_window([0.09], COST, DEFAULT, [0.21] * 100, 0.21, max_steps=200)
    assert reason is not None and "averaged 0.0900 ms" in reason


def test_each_cycles_first_recorded_step_pays_the_profilers_start() -> None:
    assert COST.per_recorded_step(ScheduleConfig(active=2, repeat=2)) == [0.3, 0.01, 0.3, 0.01]


def summary(tmp_path: Path, tags: dict[str, str]) -> str:
    metrics = {
        names.STEP_MEDIAN_MS: 0.21, names.STEP_P10_MS: 0.2, names.STEP_P90_MS: 8.3, names.STEP_CV: 3.0,
        names.STEPS_TIMED: 600.0, names.FIRST_CALL_S: 0.1, names.PROFILER_STEP_MS: 24.2,
        names.PROFILER_OVERHEAD_PCT: 11423.8,
        names.PROFILER_COST_MS: 0.3,
    }  # fmt: skip
    rows = [{names.OP_NAME: "aten::mul", names.OP_SELF_CPU_MS: 20.0}]
    result = JobResult(metrics, tags, OpTable(rows, 1, False), "", tmp_path)  # type: ignore[arg-type]
    return job_summary("job", "cpu", result, "MLflow run r")


def test_the_console_gives_the_profilers_cost_in_ms_and_flags_the_window_right_under_the_op_table(
    tmp_path: Path,
) -> None:
    reason = "its 1 profiled step(s) averaged 24.2000 ms ...; widen it: schedule.active=5 schedule.repeat=22"
    flagged = summary(tmp_path, {names.TAG_WINDOW_REPRESENTATIVE: "false", names.TAG_WINDOW_REASON: reason})
    lines = flagged.splitlines()
    assert (
        "profiled step: 24.2000 ms (+11423.8% against the steady median; the profiler's own cost 0.3000 ms/step)"
        in lines
    )
    op_row = next(i for i, line in enumerate(lines) if line.endswith("aten::mul"))
    assert lines[op_row + 1] == f"profiled window not representative of the steady state: {reason}"
    representative = summary(tmp_path, {names.TAG_WINDOW_REPRESENTATIVE: "true"})
    assert "not representative" not in representative and "aten::mul" in representative
