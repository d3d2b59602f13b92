"""Every script under benchmarks/ runs at a tiny size, so a figure in the docs can always be made again.

Each runs as its docstring says (`python benchmarks/NAME.py ...` from the repository's root, a
fresh interpreter) with the smallest arguments it takes: a tiny shape, one try, a round or two.
The test checks that it exits 0 and prints its result line; the figures mean nothing at these
sizes. Its temporary folders go under the test's own (TMPDIR).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.measure.turns import GO, MORE, referee
from tests.helpers import REPO

pytestmark = pytest.mark.slow
BENCHMARKS = REPO / "benchmarks"
TINY = ["workload.batch=1", "workload.seq_len=8", "workload.hidden=16"]
SET_TINY = [arg for key in [*TINY, "measure=quick"] for arg in ("--set", key)]
GATE_TINY = ["1", "--rounds", "3", "--batch", "1", "--seq-len", "8", "--hidden", "16", "--set", "measure=quick"]

# script: (its smallest arguments, "{tmp}" for the test's folder; a line of its result it prints)
RUNS: dict[str, tuple[list[str], str]] = {
    "change_points.py": (["--series", "2", "--length", "20"], "false change points per 100 points"),
    "compile_cache.py": (["1"], "warm first call / cold: median"),
    "cpu_placement.py": (["1", *SET_TINY], "stalled: over 10x the fastest variant's median"),
    "gate_detection.py": (GATE_TINY, "detected in tries: "),
    "gate_false_alarms.py": (GATE_TINY, "false alarms in gates: "),
    "history_cost.py": (["1", "--large", "6"], "6 runs, 3 configurations: median"),
    "memory_layouts.py": (["2", *SET_TINY], "per-worker sd: what one worker's own process"),
    "monitor_cost.py": (["1", "--block-s", "0.2", "--settle-s", "0.1", "--models", "10"], "ratio to none [95%]"),
    "processes_cost.py": (["0", "--starts", "1", "--variant", "rmsnorm_naive"], "medians over 1 interleaved round(s)"),
    "profiler_overhead.py": (["--variant", "rmsnorm_naive", *SET_TINY], "rmsnorm_naive "),
    "runner_overhead.py": (["1", "--shape", "1", "8", "16"], "ratio runner/hand-written: "),
    "sweep_overhead.py": (["--set", "workload=rmsnorm_naive,rmsnorm_builtin", *SET_TINY], "for 2 jobs"),
    "settle_calls.py": (
        ["--shape", "1x8x16", "--moves", "2", "--calls", "40", "--warmup-s", "0.1"],
        "step stretch after N untimed calls",
    ),
    "speedup_fidelity.py": (
        ["1", "--shape", "1x8x16", "--turns", "2", "--save", "{tmp}/speedup.json"],
        "all pairs: runner speedup",
    ),
    "timing_factors.py": (["1", "--shape", "1x8x16", "--arm", "default"], "reference: the median of 1 Timer"),
    "timing_fidelity.py": (
        ["1", "--shape", "1x8x16", "--variant", "rmsnorm_naive", "--save", "{tmp}/fidelity.json"],
        "all cells: ",
    ),
    "turns_pays.py": (["3", *SET_TINY], "sd in turns / sd one after the other: "),
}
# what another script runs or imports, so that script's run runs it too
RUN_BY = {
    "minimal_profile.py": "runner_overhead.py",  # the hand-written baseline it times the runner against
    "extra_work.py": "gate_detection.py",  # the module its slower commit changes
    "gating.py": "gate_false_alarms.py",
    "git_copy.py": "gate_false_alarms.py",
}
# not run here, and why
NOT_RUN = {
    "gpu_check.py": "tests/system/test_gpu_check.py runs it on the CPU",
    # a run of each mutant's tests takes ~20 s, the table ~10 min; test_every_mutant_still_applies checks its table
    "mutants.py": "it runs pytest itself, mutant by mutant",
}


def run_script(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, f"benchmarks/{script}", *(arg.format(tmp=tmp_path) for arg in args)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize(("script", "args", "result"), [(name, *run) for name, run in RUNS.items()], ids=list(RUNS))
def test_a_benchmark_runs_at_a_tiny_size(script: str, args: list[str], result: str, tmp_path: Path) -> None:
    done = run_script(script, args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert result in done.stdout, done.stdout[-3000:]
    if script == "timing_fidelity.py":  # what it saved, read back as its calibration
        calibrated = run_script(script, ["--calibrate", "{tmp}/fidelity.json"], tmp_path)
        assert calibrated.returncode == 0, calibrated.stderr[-3000:]
        assert "bound on time/step_median_uncertainty_pct" in calibrated.stdout
    if script == "speedup_fidelity.py":  # the runner's workers and the Timer's in the same rounds, no sweep
        together = run_script(script, ["1", "--shape", "1x8x16", "--together"], tmp_path)
        assert together.returncode == 0, together.stderr[-3000:]
        assert result in together.stdout, together.stdout[-3000:]


def test_every_mutant_still_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # mutants.py imports git_copy.py, beside it
    from mutants import MUTANTS, stale_reason

    stale = {mutant.id: stale_reason(REPO, mutant) for mutant in MUTANTS}
    assert {name: reason for name, reason in stale.items() if reason} == {}


def test_every_benchmark_script_is_run_here_or_says_why() -> None:
    scripts = {path.name for path in BENCHMARKS.glob("*.py")} - {"__init__.py"}
    listed = [*RUNS, *RUN_BY, *NOT_RUN]
    assert sorted(listed) == sorted(scripts)  # each once
    assert set(RUN_BY.values()) <= set(RUNS)


def test_a_timer_process_in_the_rounds_takes_as_many_turns_as_a_runners_worker(tmp_path: Path) -> None:
    """One turn fewer, and its exit (torch torn down on the round's core) fell on the workers' last stretches."""
    stretches = 3
    with referee() as (path, listener):
        cmd = [sys.executable, "benchmarks/speedup_fidelity.py", "--in-turns", path, "timer", str(stretches)]
        timer = subprocess.Popen([*cmd, "--child", "1", "+workload=rmsnorm_naive", *TINY], cwd=REPO)
        try:
            listener.settimeout(120)
            connection, _ = listener.accept()
            with connection:
                assert connection.makefile("rb").readline().strip() == b"timer"
                turns = 0
                while True:  # as the referee hands turns: GO, until it answers something other than MORE
                    connection.sendall(GO)
                    if connection.recv(1) != MORE:
                        break
                    turns += 1
        finally:
            assert timer.wait(timeout=60) == 0
    # a worker's (runner.execute.workers._worker, runner.measure.loop.steady_state): its build and first call,
    # its warm-up, then one turn a stretch
    assert turns == 1 + 1 + stretches
