"""Trace diff through the CLI: runs the runner logged, diffed from the store, and a run without traces refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from tests.helpers import REPO, TRACES, all_runs
from tests.unit.test_trace_diff import log_traces, runner_experiment


def test_a_run_without_traces_is_refused_in_one_line(tracking_uri: str, tmp_path: Path) -> None:
    runner_experiment(tmp_path / "artifacts")
    naive = log_traces("naive", TRACES / "naive")
    untraced = log_traces("untraced", None)
    done = subprocess.run(
        [sys.executable, "-m", "runner.compare", "--diff", naive, untraced], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"error: --diff {untraced}: the run has no profiler trace among its artifacts "
        "(profiler.enabled=false, or the trace stayed local: see its artifacts_kept_local.json)"
    )
    assert all(not mlflow.MlflowClient().list_artifacts(r.info.run_id, "trace_diff") for r in all_runs(tracking_uri))
    unknown = subprocess.run(
        [sys.executable, "-m", "runner.compare", "--diff", naive, "ffff"], cwd=REPO, capture_output=True, text=True
    )
    assert unknown.stderr.strip().startswith("error: --diff 'ffff': no run in this experiment has an id starting so")


@pytest.mark.slow
def test_two_real_runs_diff_from_the_store(tmp_path: Path, tracking_uri: str) -> None:
    small = ["backend=cpu", "measure=quick", "workload.hidden=64", "workload.seq_len=8"]
    for workload in ("rmsnorm_naive", "rmsnorm_builtin"):
        job = [sys.executable, "-m", "runner", f"+workload={workload}", *small, f"hydra.run.dir={tmp_path / workload}"]
        assert subprocess.run(job, cwd=REPO, capture_output=True, text=True).returncode == 0
    first, second = sorted(all_runs(tracking_uri), key=lambda run: run.info.start_time)
    diff = [sys.executable, "-m", "runner.compare", "--diff", first.info.run_id, second.info.run_id]
    done = subprocess.run(diff, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "by [aten::rms_norm]" in done.stdout and "q: n/a, one recorded cycle" in done.stdout
