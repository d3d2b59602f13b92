"""Task 0 of a Slurm job of several ranks: how it gathers the others' results and names a failed rank.

The whole path runs on a live Slurm cluster in test_slurm.py; here the other ranks' word is
written as they would leave it, so a rank that died (which submitit cannot see on that
cluster, which has no accounting) is checked too.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from runner.config import ConfigError, RunSpec
from runner.config_loading import load_run_spec
from runner.execute import slurm_ranks
from runner.execute.processes import Answer, ChildFailed
from runner.execute.slurm_ranks import RESULT_FILE, SlurmTask, check_world, lead
from tests.helpers import compose_cfg

TASK_0 = SlurmTask(rank=0, world=3, local_rank=0, tasks_per_node=2, node=0, job_id="42")


def leave(folder: Path, rank: int, answer: Answer) -> None:
    (folder / f"rank{rank}").mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}" / RESULT_FILE).write_bytes(pickle.dumps(answer))


@pytest.fixture
def spec() -> RunSpec:
    return load_run_spec(compose_cfg("+workload=rmsnorm_naive", "distributed.ranks=3", "distributed.timeout_s=1"))


@pytest.fixture
def rank_0_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_ranks, "_measure_task", lambda spec, output_dir, task: "result 0")


@pytest.fixture
def rank_0_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_collective(spec: RunSpec, output_dir: Path, task: SlurmTask) -> None:
        raise RuntimeError("gloo: Connection reset by peer")

    monkeypatch.setattr(slurm_ranks, "_measure_task", broken_collective)
    monkeypatch.setattr(slurm_ranks, "LAST_WORDS_S", 0.5)


@pytest.mark.usefixtures("rank_0_measures")
def test_results_come_back_in_rank_order(tmp_path: Path, spec: RunSpec) -> None:
    leave(tmp_path, 2, Answer(value="result 2"))
    leave(tmp_path, 1, Answer(value="result 1"))
    assert lead(spec, tmp_path, TASK_0) == ["result 0", "result 1", "result 2"]


@pytest.mark.usefixtures("rank_0_measures")
def test_a_rank_silent_past_the_timeout_is_named(tmp_path: Path, spec: RunSpec) -> None:
    leave(tmp_path, 1, Answer(value="result 1"))
    with pytest.raises(ChildFailed, match=r"rank 2 left no result within distributed.timeout_s"):
        lead(spec, tmp_path, TASK_0)


@pytest.mark.usefixtures("rank_0_breaks")
def test_the_rank_that_raised_is_named_before_rank_0s_broken_collective(tmp_path: Path, spec: RunSpec) -> None:
    tb = "Traceback ...\nRuntimeError: injected failure"
    leave(tmp_path, 2, Answer(error="RuntimeError: injected failure", traceback=tb))
    with pytest.raises(ChildFailed, match=r"^rank 2 raised: RuntimeError: injected failure\nTraceback") as raised:
        lead(spec, tmp_path, TASK_0)
    assert "injected failure" in str(raised.value)


@pytest.mark.usefixtures("rank_0_breaks")
def test_a_rank_that_died_is_named_beside_rank_0s_error(tmp_path: Path, spec: RunSpec) -> None:
    leave(tmp_path, 1, Answer(value="result 1"))  # rank 2 was killed: it left nothing
    with pytest.raises(ChildFailed, match=r"rank 0 raised \(rank 2 left no result: it died or hung\)") as raised:
        lead(spec, tmp_path, TASK_0)
    assert "Connection reset by peer" in str(raised.value)


def test_a_slurm_job_must_have_one_task_per_rank() -> None:
    check_world(TASK_0, 3)
    with pytest.raises(ConfigError, match=r"distributed.ranks=2, but the Slurm job has 3 tasks"):
        check_world(TASK_0, 2)


def test_a_slurm_task_gets_torchruns_variables_from_its_place_in_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    slurm = {
        "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4711", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "trn[1-2]", "SLURM_NODEID": "1", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
    }  # fmt: skip
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    task = slurm_ranks.slurm_task()
    assert task == SlurmTask(rank=3, world=4, local_rank=1, tasks_per_node=2, node=1, job_id="4711")
    env = slurm_ranks.task_env(task)
    expected = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    assert expected.items() <= env.items()
    assert env["MASTER_ADDR"] == "trn1" and env["TORCHELASTIC_RUN_ID"] == "4711"
    assert 20000 <= int(env["MASTER_PORT"]) <= 60000  # submitit's port, chosen from the job id
