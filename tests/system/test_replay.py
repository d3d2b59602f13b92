"""Op replay through the CLI: a run's top op replays alone."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from runner import names
from tests.helpers import REPO, all_runs


@pytest.mark.slow
def test_a_runs_top_op_replays_alone(tmp_path: Path, tracking_uri: str) -> None:
    small = ["backend=cpu", "measure=quick", "workload.hidden=64", "workload.seq_len=8"]
    job = [sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *small, f"hydra.run.dir={tmp_path / 'job'}"]
    assert subprocess.run(job, cwd=REPO, capture_output=True, text=True).returncode == 0
    (run,) = all_runs(tracking_uri)
    compare = [sys.executable, "-m", "runner.compare", "--replay", run.info.run_id[:8], "--top", "3"]
    done = subprocess.run(compare, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("python -m runner")]
    comments = [line for line in done.stdout.splitlines() if line.startswith("# aten::")]
    assert len(comments) == 3 and commands, done.stdout
    replay = shlex.split(commands[0])[3:]
    op = next(arg.split("=", 1)[1] for arg in replay if arg.startswith("workload.op="))
    again = [sys.executable, "-m", "runner", *replay, "backend=cpu", "measure=quick", f"hydra.run.dir={tmp_path / 'r'}"]
    ran = subprocess.run(again, cwd=REPO, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    replayed = next(r for r in all_runs(tracking_uri) if r.info.run_id != run.info.run_id)
    assert replayed.info.status == "FINISHED"
    assert replayed.data.tags[names.TAG_TOP_OP] == op  # the op alone is its own top op
    assert replayed.data.tags[names.TAG_ACCURACY] == "pass"
