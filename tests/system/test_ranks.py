"""A job as torch.distributed ranks (`distributed.ranks=N`), on CPU with gloo at two ranks.

Each test runs `python -m runner` in a subprocess: the ranks are spawned processes, and a
rank killed mid-step must fail the job without leaving any rank behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from runner import names
from runner.measure.traces import load_profile
from runner.report.reader import trace_files
from tests.helpers import REPO, RunnerInProcess, all_runs

pytestmark = pytest.mark.slow
TINY_DECODER = [
    "+workload=decoder_layer", "workload.batch=1", "workload.seq_len=8", "workload.hidden=32", "workload.heads=2",
    "workload.intermediate=64",
]  # fmt: skip
FAULTY = ["+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[64]]"]


def ranks_args(tmp_path: Path, *args: str) -> list[str]:
    return [
        "backend=cpu", "measure=quick", "workload.mode=train_step", "distributed.ranks=2", "distributed.timeout_s=60",
        f"hydra.run.dir={tmp_path / 'run'}", *args,
    ]  # fmt: skip


def run_ranks(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "runner", *ranks_args(tmp_path, *args)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def rank_pids(done: subprocess.CompletedProcess[str]) -> list[int]:
    return [int(pid) for pid in re.findall(r"rank \d of 2: pid (\d+)", done.stdout + done.stderr)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_data_parallel_train_step_runs_as_two_ranks(tmp_path: Path, tracking_uri: str) -> None:
    done = run_ranks(tmp_path, *TINY_DECODER)
    assert done.returncode == 0, done.stderr
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FINISHED" and run.data.params["distributed.ranks"] == "2"
    metrics = run.data.metrics
    assert metrics[names.RANKS] == 2
    for rank in (0, 1):
        assert 0 < metrics[f"rank{rank}/{names.RANK_COLLECTIVE_SHARE}"] < 1  # the gradients' all-reduce
        assert 0 <= metrics[f"rank{rank}/{names.RANK_COLLECTIVE_OVERLAP}"] <= 1
    # a gradient's all-reduce starts while the backward still computes the layers before, on some rank at least:
    # on a busy 2-core host one rank's gloo thread may get a core only once its backward is done (read 0.0 once)
    assert 0 < metrics[names.RANKS_COLLECTIVE_OVERLAP] <= 1
    assert metrics[f"rank1/{names.STEP_MEDIAN_MS}"] > 0 and metrics[names.STEP_MEDIAN_MS] > 0
    assert metrics[names.RANKS_STRAGGLER_RATIO] >= 1 and metrics[names.RANKS_COMPUTE_SPREAD] >= 1
    assert run.data.tags[names.TAG_SLOWEST_RANK] in ("0", "1")
    assert run.data.tags[names.TAG_ACCURACY] == "pass"  # the ranks' averaged steps keep the weights equal
    client = mlflow.MlflowClient(tracking_uri)
    top = {info.path for info in client.list_artifacts(run.info.run_id)}
    assert {names.OP_TABLE_FILE, names.TRACE_FOLDER, "rank1", names.PLOTS_FOLDER} <= top
    assert [info.path for info in client.list_artifacts(run.info.run_id, names.PLOTS_FOLDER)] == [
        f"{names.PLOTS_FOLDER}/{names.RANK_STEPS_PLOT_FILE}"
    ]
    rank1 = {info.path for info in client.list_artifacts(run.info.run_id, "rank1")}
    assert rank1 == {f"rank1/{names.OP_TABLE_FILE}", f"rank1/{names.OP_TABLE_TEXT_FILE}", f"rank1/{names.TRACE_FOLDER}"}
    ops = client.download_artifacts(run.info.run_id, f"rank1/{names.OP_TABLE_FILE}")
    assert "c10d::allreduce_" in Path(ops).read_text()
    # the run's own trace is rank 0's; the other ranks' stay out of a trace diff
    profile = load_profile(trace_files(client, run, tmp_path / "download"))
    assert profile.cycles == 1 and len(profile.steps) == 1
    assert "ranks: 2, slowest median" in done.stdout and "of their run time overlapped compute" in done.stdout
    assert not any(alive(pid) for pid in rank_pids(done))


def test_a_slowed_rank_is_the_one_the_others_wait_for(tmp_path: Path, tracking_uri: str) -> None:
    done = run_ranks(tmp_path, *FAULTY, "+workload.fault=slow", "+workload.rank=1", "+workload.slow_ms=50")
    assert done.returncode == 0, done.stderr
    (run,) = all_runs(tracking_uri)
    metrics = run.data.metrics
    assert run.data.tags[names.TAG_SLOWEST_RANK] == "1"
    assert metrics[f"rank1/{names.RANK_COMPUTE_MS}"] > 40 > metrics[f"rank0/{names.RANK_COMPUTE_MS}"]
    # in lock step both ranks take as long; rank 0 spends the difference waiting in the all-reduce
    assert metrics[names.RANKS_STRAGGLER_RATIO] < 1.5
    assert metrics[f"rank0/{names.RANK_COLLECTIVE_SHARE}"] > metrics[f"rank1/{names.RANK_COLLECTIVE_SHARE}"]
    # rank 0's compute is tiny, but its profiled step's own overhead (several ms on a busy host)
    # counts as compute: a sleep of 50 ms keeps the spread clear of it
    assert metrics[names.RANKS_COMPUTE_SPREAD] > 3


def test_the_all_reduce_benchmark_reports_nccl_tests_bandwidths(tmp_path: Path, tracking_uri: str) -> None:
    # a datasheet entry with a link figure stands in for a device's (gloo on CPU has none)
    args = ["+workload=allreduce", "workload.megabytes=0.1", "workload.mode=forward", "measure.peak=trn2_core"]
    done = run_ranks(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    (run,) = all_runs(tracking_uri)
    metrics = run.data.metrics
    algbw, busbw = metrics[names.COLLECTIVE_ALGBW_GBPS], metrics[names.COLLECTIVE_BUSBW_GBPS]
    assert algbw == pytest.approx(0.1e6 / (metrics[names.STEP_MEDIAN_MS] / 1000) / 1e9)
    assert busbw == pytest.approx(algbw)  # 2(n-1)/n = 1 at two ranks
    assert metrics[names.COLLECTIVE_LINK_GBPS] == 1280
    assert metrics[names.COLLECTIVE_BUSBW_LINK_FRACTION] == pytest.approx(busbw / 1280)
    # a share of the recorded steps (its size moves with the host's load: 0.49 under CI's; test_collectives pins
    # how it is computed)
    assert 0 < metrics[names.RANKS_COLLECTIVE_SHARE] <= 1
    assert run.data.tags[names.TAG_COLLECTIVE_LINK].startswith("chip-to-chip: 1280 GB/s")  # one device per rank
    assert "collective: algbw" in done.stdout and "[chip-to-chip: 1280 GB/s" in done.stdout


def test_without_a_profiler_the_ranks_compare_their_step_times_only(tmp_path: Path, tracking_uri: str) -> None:
    done = run_ranks(tmp_path, *TINY_DECODER, "profiler=none")
    assert done.returncode == 0, done.stderr
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FINISHED"
    assert run.data.metrics[names.RANKS_STRAGGLER_RATIO] >= 1
    assert names.RANKS_COLLECTIVE_SHARE not in run.data.metrics and names.TAG_SLOWEST_RANK not in run.data.tags
    assert "no trace, so no collective share or slowest rank (profiler=none)" in done.stdout


@pytest.mark.parametrize(
    ("fault", "message"),
    [("raise", "rank 1 raised"), ("kill", "rank 1 died (exit code -9)")],
)
def test_a_failing_rank_fails_the_job_by_name_and_leaves_no_rank_behind(
    tmp_path: Path, tracking_uri: str, fault: str, message: str
) -> None:
    done = run_ranks(tmp_path, *FAULTY, f"+workload.fault={fault}", "+workload.rank=1")
    assert done.returncode != 0
    assert message in done.stderr, done.stderr[-2000:]
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FAILED" and message in run.data.tags[names.TAG_ERROR]
    pids = rank_pids(done)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["measure.processes=2"], "measure.processes=2: with distributed.ranks=2 each rank times its steps"),
        (["measure.copies=2"], "measure.copies=2 and distributed.ranks=2: choose one"),
        (["distributed.timeout_s=0"], "distributed.timeout_s must be a number of seconds > 0, got 0"),
    ],
)
def test_ranks_refuse_what_they_cannot_do_in_one_line(
    tmp_path: Path, tracking_uri: str, args: list[str], message: str, runner_in_process: RunnerInProcess
) -> None:
    done = runner_in_process(*ranks_args(tmp_path, *TINY_DECODER, *args))
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr
    assert all_runs(tracking_uri) == []
