"""A three-job sweep through hydra/launcher=slurm on a real one-node Slurm cluster."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from runner import names
from tests.helpers import REPO, all_runs
from tests.helpers.slurm_cluster import SlurmUnavailable, local_slurm


@pytest.fixture
def slurm_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    try:
        with local_slurm(tmp_path / "slurm") as env:
            yield env
    except SlurmUnavailable as why:
        pytest.skip(f"Slurm cannot start here: {why}")


@pytest.mark.slow
def test_three_job_sweep_on_slurm(tmp_path: Path, tracking_uri: str, slurm_env: dict[str, str]) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive", "++workload.hidden=16",
        "workload.seed=0,1,2", "measure=quick", "measure.processes=2", "hydra/launcher=slurm",
        "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    env = {**slurm_env, "MLFLOW_TRACKING_URI": tracking_uri}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    runs = all_runs(tracking_uri)
    children = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert sorted(r.data.params["workload.seed"] for r in children) == ["0", "1", "2"]
    assert all(r.info.status == "FINISHED" for r in runs)
    # each job ran inside its own Slurm job, on the debug partition
    assert len({r.data.tags["env.SLURM_JOB_ID"] for r in children}) == 3
    assert {r.data.tags["env.SLURM_JOB_PARTITION"] for r in children} == {"debug"}
    # each timed its steady state in two worker processes of its own
    client = mlflow.MlflowClient(tracking_uri)
    assert all(len(client.get_metric_history(r.info.run_id, names.PROCESS_MEDIAN_MS)) == 2 for r in children)


def test_a_dead_slurm_job_yields_nan_instead_of_stopping_the_sweep(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The live cluster above has no accounting (sacct), which submitit needs to notice a dead
    # job, so the launcher's handling of one is checked here against submitit's own error.
    import submitit
    from hydra.core.utils import JobStatus
    from submitit.core import plugins
    from submitit.core.utils import UncompletedJobError

    from hydra_plugins.runner_launcher._slurm_executor import TolerantSlurmExecutor, TolerantSlurmJob
    from hydra_plugins.runner_launcher.slurm_launcher import TolerantSlurmLauncher

    def results_of_a_dead_job(job: object) -> list[object]:
        raise UncompletedJobError("Job 7 (task: 0) has not produced any output (state: OUT_OF_MEMORY)")

    monkeypatch.setattr(submitit.SlurmJob, "results", results_of_a_dead_job)
    (ret,) = TolerantSlurmJob(folder=tmp_path, job_id="7").results()
    assert ret.status == JobStatus.COMPLETED and math.isnan(ret.return_value)
    # the launcher reaches that job class through submitit's executor plugins, by name
    assert plugins.get_executors()[TolerantSlurmLauncher._EXECUTOR] is TolerantSlurmExecutor
    assert TolerantSlurmExecutor.job_class is TolerantSlurmJob


def slurm_ranks(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`distributed.ranks=2` as the two tasks of one Slurm job (one node here; the same path across nodes)."""
    cmd = [
        sys.executable, "-m", "runner", "-m", "backend=cpu", "measure=quick", "workload.mode=train_step",
        "distributed.ranks=2", "distributed.timeout_s=60", "hydra/launcher=slurm", "hydra.launcher.partition=debug",
        "hydra.launcher.tasks_per_node=2", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *args,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_two_ranks_run_as_the_two_tasks_of_a_slurm_job(
    tmp_path: Path, tracking_uri: str, slurm_env: dict[str, str]
) -> None:
    tiny_decoder = ["+workload=decoder_layer", "workload.seq_len=8", "workload.hidden=32", "workload.heads=2",
                    "workload.intermediate=64", "workload.batch=1"]  # fmt: skip
    done = slurm_ranks(tmp_path, {**slurm_env, "MLFLOW_TRACKING_URI": tracking_uri}, *tiny_decoder)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run,) = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert run.info.status == "FINISHED" and run.data.metrics[names.RANKS] == 2
    assert run.data.tags["env.SLURM_NTASKS"] == "2"  # one Slurm job, two tasks: one rank each
    log = next((tmp_path / "sweep").glob("0_*/__main__.log")).read_text()
    assert "rank 0 of 2 on " in log and "rank 1 of 2 on " in log
    for rank in (0, 1):
        assert 0 < run.data.metrics[f"rank{rank}/{names.RANK_COLLECTIVE_SHARE}"] < 1  # the gradients' all-reduce
    client = mlflow.MlflowClient(tracking_uri)
    rank1 = {info.path for info in client.list_artifacts(run.info.run_id, "rank1")}
    assert rank1 == {f"rank1/{names.OP_TABLE_FILE}", f"rank1/{names.OP_TABLE_TEXT_FILE}", f"rank1/{names.TRACE_FOLDER}"}
    assert (
        "c10d::allreduce_"
        in Path(client.download_artifacts(run.info.run_id, f"rank1/{names.OP_TABLE_FILE}")).read_text()
    )


@pytest.mark.slow
def test_a_slurm_task_that_raises_fails_the_job_by_rank(
    tmp_path: Path, tracking_uri: str, slurm_env: dict[str, str]
) -> None:
    # a task that dies is tested without Slurm (test_slurm_ranks.py): submitit waits for a dead
    # task's result until sacct says it is gone, and this cluster has no accounting
    faulty = ["+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[64]]",
              "+workload.fault=raise", "+workload.rank=1"]  # fmt: skip
    done = slurm_ranks(tmp_path, {**slurm_env, "MLFLOW_TRACKING_URI": tracking_uri}, *faulty)
    assert done.returncode != 0
    (run,) = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert run.info.status == "FAILED" and "rank 1 raised" in run.data.tags[names.TAG_ERROR]
