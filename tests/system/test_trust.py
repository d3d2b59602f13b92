"""The regression gate against a sweep of real jobs, as CI runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner import gate, names
from tests.helpers import REPO, all_runs
from tests.system.test_sweeps import FAULTY


@pytest.mark.slow
def test_gate_fails_a_real_sweep_whose_jobs_failed(tmp_path: Path, tracking_uri: str) -> None:
    """The README's CI form against a sweep of real jobs, one of which raised: exit 3, one line why."""
    sweep = [sys.executable, "-m", "runner", "-m", *FAULTY, "+workload.fault=none,raise",
             f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    swept = subprocess.run(sweep, cwd=REPO, capture_output=True, text=True)
    assert "sweep: 2 job(s): 1 finished, 0 skipped (already FINISHED), 1 failed" in swept.stdout, swept.stderr[-3000:]
    commit = next(r for r in all_runs(tracking_uri) if r.info.status == "FINISHED").data.tags[names.TAG_GIT_COMMIT]
    ci = [sys.executable, "-m", "runner.gate", "--baseline", f"{names.TAG_GIT_COMMIT}={commit}", "--fail-above", "5"]
    gated = subprocess.run(ci, cwd=REPO, capture_output=True, text=True)
    assert gated.returncode == gate.INCOMPLETE_EXIT, gated.stdout + gated.stderr
    assert gated.stderr.strip() == "gate: not passed: 1 of 2 job(s) did not finish (1 FAILED)"
    assert gated.stdout.count("not tested: the job is FAILED") == 1
