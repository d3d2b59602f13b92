"""benchmarks/gpu_check.py on the CPU at a tiny shape: the check a GPU machine runs, kept runnable where none is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO

pytestmark = pytest.mark.slow
CHECK = [sys.executable, "benchmarks/gpu_check.py"]


def test_the_gpu_check_sweeps_and_sets_the_runner_beside_timer_on_the_cpu(tmp_path: Path) -> None:
    cmd = [*CHECK, "--device", "cpu", "--shape", "2x8x16", "--launchers", "inprocess", "--processes", "0"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    # 1: a ratio off its target, on a busy host; the lines under the verdict name it
    assert done.returncode in (0, 1), done.stderr
    assert "sweep, launcher inprocess, measure.processes=0: ok" in done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("rmsnorm_")]
    assert [row.split(" | ")[0] for row in rows] == ["rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled"]
    assert all(" (host) | " in row for row in rows)  # the CPU's steady state is timed by the host's clock
    assert "speedup naive/built-in: Timer " in done.stdout and "not FINISHED" not in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: the check would run")
def test_the_gpu_check_without_a_gpu_says_so_in_one_line() -> None:
    done = subprocess.run([*CHECK], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stdout == "benchmarks/gpu_check.py: no CUDA device is visible here (--device cpu checks the CPU)\n"
