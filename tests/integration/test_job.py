"""A job's folder is its own (a claim another live process holds is refused, a dead one's taken over),
a job that died is counted by its sweep as what it was, a stopped job (also one whose stop a library's
cleanup replaced with its own error) says whether it had a run to close, and a sweep stopped early
counts the jobs it never started."""

from __future__ import annotations

import json
import logging
import platform
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from runner import CONF_DIR, names
from runner.backends.base import Slot
from runner.backends.cores import LNC_ENV
from runner.backends.neuron import NeuronBackend
from runner.config import BackendConfig, ConfigError, TrackingConfig
from runner.config_loading import register_schemas
from runner.job import (
    OWNER_FILE,
    STATUS_FILE,
    SWEEP_ID_ENV,
    JobLife,
    claim_folder,
    close_dead_job,
    read_status,
    release_folder,
    write_status,
)
from runner.signals import Interrupted
from runner.sweep.rounds import before_launch
from runner.sweep.summary import summarise_sweep
from runner.tracking.run import PARENT_RUN_ENV
from tests.helpers import all_runs, job_for


def plant_owner(folder: Path, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER_FILE).write_text(json.dumps({"pid": pid, "host": platform.node()}))


def test_a_folder_another_live_job_works_in_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    job = job_for(tmp_path)
    with subprocess.Popen(["sleep", "30"]) as other:
        plant_owner(job.output_dir, other.pid)
        with (
            pytest.raises(ConfigError, match=rf"hydra.run.dir=.* is in use by process {other.pid}"),
            JobLife(job).running(),
        ):
            pass
        other.kill()
    assert not (job.output_dir / STATUS_FILE).exists()  # the other job's status is not touched
    assert json.loads((job.output_dir / OWNER_FILE).read_text())["pid"] == other.pid


def test_a_dead_owners_folder_is_taken_over_and_released_at_the_end(tmp_path: Path) -> None:
    job = job_for(tmp_path)
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout
    plant_owner(job.output_dir, int(gone))
    with JobLife(job, sweeping=True).running():
        assert json.loads((job.output_dir / OWNER_FILE).read_text())["pid"] != int(gone)
    assert not (job.output_dir / OWNER_FILE).exists()
    assert json.loads((job.output_dir / STATUS_FILE).read_text())["status"] == "FINISHED"


def test_a_claim_from_another_host_is_held_though_its_pid_is_free_here(tmp_path: Path) -> None:
    # this host cannot see the other's processes: the pid, gone here, says nothing about the job there
    gone = int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout)
    claim = {"pid": gone, "host": f"not-{platform.node()}"}
    (tmp_path / OWNER_FILE).write_text(json.dumps(claim))
    with pytest.raises(ConfigError, match=rf"^hydra.sweep.dir={tmp_path} is in use by process {gone} on not-"):
        claim_folder(tmp_path, "hydra.sweep.dir")
    assert json.loads((tmp_path / OWNER_FILE).read_text()) == claim


def test_release_leaves_another_process_claim_alone(tmp_path: Path) -> None:
    with subprocess.Popen(["sleep", "30"]) as other:
        plant_owner(tmp_path, other.pid)
        release_folder(tmp_path)
        assert (tmp_path / OWNER_FILE).exists()
        with pytest.raises(ConfigError, match="hydra.sweep.dir"):
            claim_folder(tmp_path, "hydra.sweep.dir")
        other.kill()


def test_a_status_file_that_cannot_be_written_leaves_no_temporary_behind(tmp_path: Path) -> None:
    (tmp_path / STATUS_FILE).mkdir()  # replacing a folder by the written file fails, as a full disk would
    with pytest.raises(OSError):
        write_status(tmp_path, status="RUNNING")
    assert not list(tmp_path.glob("*.tmp"))


def test_a_job_stopped_before_it_wrote_its_status_is_counted_killed_by_its_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SWEEP_ID_ENV, "this-sweep")
    write_status(tmp_path / "0_a", status="FINISHED", sweep_id="this-sweep", overrides="x=1")
    close_dead_job(tmp_path / "1_b", "stopped with the sweep", None, stopped=True, overrides="x=2")
    close_dead_job(tmp_path / "2_c", "died from signal SIGKILL", None, overrides="x=3")
    assert read_status(tmp_path / "1_b") == {**read_status(tmp_path / "1_b"), "status": "KILLED", "overrides": "x=2"}
    summary = summarise_sweep(tmp_path, "this-sweep", None)
    assert (len(summary.finished), len(summary.killed), len(summary.failed)) == (1, 1, 1)
    assert summary.lines()[0].endswith("1 failed, 1 killed")
    assert summary.killed == ["1_b [x=2]: stopped with the sweep"]


def test_a_job_that_closed_itself_is_left_as_it_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWEEP_ID_ENV, "this-sweep")
    write_status(tmp_path, status="KILLED", sweep_id="this-sweep", error="interrupted by SIGTERM")
    close_dead_job(tmp_path, "stopped with the sweep", None, stopped=True)
    assert read_status(tmp_path)["error"] == "interrupted by SIGTERM"  # type: ignore[index]


def raise_a_stop() -> None:
    raise Interrupted(signal.SIGTERM)


def raise_a_stop_a_cleanup_replaced() -> None:
    """A SIGTERM whose unwinding a library's cleanup failed on (OmegaConf's, over a list the stop left half-built)."""
    try:
        raise_a_stop()
    finally:
        raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")


@pytest.mark.parametrize(
    "stopping", [raise_a_stop, raise_a_stop_a_cleanup_replaced], ids=["stop", "stop-a-cleanup-replaced"]
)
@pytest.mark.parametrize("opened", [False, True], ids=["before-its-run", "with-its-run"])
def test_a_stopped_job_says_whether_it_had_a_run_to_close(
    opened: bool, stopping: Callable[[], None], tmp_path: Path, tracking_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    life = JobLife(job_for(tmp_path))
    with pytest.raises(Interrupted), life.running():
        if opened:
            with life.run(TrackingConfig(uri=tracking_uri)):
                stopping()
        stopping()
    said = "interrupted by SIGTERM: test_job stopped; "
    if opened:
        (run,) = all_runs(tracking_uri)
        assert run.info.status == "KILLED" and f"{said}its run {run.info.run_id} is closed KILLED" in caplog.text
    else:
        assert not all_runs(tracking_uri) and f"{said}it had no run to close" in caplog.text


@pytest.mark.parametrize("lands", ["as-start-run-returns", "as-its-id-is-written"])
def test_a_stop_as_the_run_opens_closes_it_killed_with_its_reason(
    lands: str, tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop held through start_run is raised as it returns; one can land before the body's own handlers too."""
    import mlflow

    stop = Interrupted(signal.SIGINT)
    if lands == "as-start-run-returns":
        real_start = mlflow.start_run

        def start_then_stop(**kwargs: Any) -> Any:
            real_start(**kwargs)
            raise stop

        monkeypatch.setattr(mlflow, "start_run", start_then_stop)
    else:
        real_status = JobLife.status

        def stop_on_run_id(self: JobLife, **fields: Any) -> None:
            real_status(self, **fields)
            if "run_id" in fields and fields["run_id"]:
                raise stop

        monkeypatch.setattr(JobLife, "status", stop_on_run_id)
    life = JobLife(job_for(tmp_path))
    with pytest.raises(Interrupted), life.running(), life.run(TrackingConfig(uri=tracking_uri)):
        pytest.fail("the stop landed before the job's body")
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "KILLED" and run.data.tags[names.TAG_ERROR] == "interrupted by SIGINT"


def test_a_jobs_run_starts_when_the_job_did_so_its_duration_covers_the_job(
    tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run opens after the job's imports and planning; MLflow's Duration still reads from the job's start."""
    import getpass

    import mlflow

    parent = mlflow.MlflowClient(tracking_uri).create_run(mlflow.MlflowClient(tracking_uri).create_experiment("sweeps"))
    monkeypatch.setenv(PARENT_RUN_ENV, parent.info.run_id)
    life = JobLife(job_for(tmp_path))
    life.started_ms -= 16_000  # the job began 16 s before its run opens
    with life.running(), life.run(TrackingConfig(uri=tracking_uri)):
        pass
    (run,) = [r for r in all_runs(tracking_uri) if r.info.run_id != parent.info.run_id]
    assert run.info.start_time == life.started_ms and run.info.end_time - run.info.start_time >= 16_000
    # the tags mlflow.start_run gave a run it created itself
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id and run.data.tags[names.TAG_KIND] == "job"
    assert run.data.tags["mlflow.user"] == getpass.getuser() and run.info.run_name == life.job.run_name


def launch_seeds(tmp_path: Path, task: list[str], count: int, slots: list[Slot] | None = None) -> None:
    """What a launcher of the runner's sweep does before its jobs run, for `count` jobs of `task` (seeds 0, 1, ...)."""
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        config = compose("config", overrides=[*task, f"hydra.sweep.dir={tmp_path}"], return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        jobs = [loader.load_sweep_config(config, [*task, f"workload.seed={seed}"]) for seed in range(count)]
        for number, job in enumerate(jobs):
            with open_dict(job):
                job.hydra.job.num = number
        before_launch(config, jobs, slots)


def test_a_sweep_stopped_early_counts_the_jobs_it_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher marks its jobs scheduled before the first runs; a job whose process died is no "not run"."""
    monkeypatch.setenv(SWEEP_ID_ENV, "this-sweep")
    task = ["+workload=rmsnorm_naive", "measure.processes=0"]  # no rounds: each job would time its own
    launch_seeds(tmp_path, task, 4)
    folders = sorted(tmp_path.glob("*_rmsnorm_naive"))
    assert [read_status(folder)["status"] for folder in folders] == ["SCHEDULED"] * 4  # type: ignore[index]
    write_status(folders[0], status="FINISHED")
    write_status(folders[1], status="KILLED", error="interrupted by SIGINT")
    close_dead_job(folders[2], "died from signal SIGKILL", None)
    summary = summarise_sweep(tmp_path, "this-sweep", None)
    assert summary.lines() == [
        "sweep: 4 job(s): 1 finished, 0 skipped (already FINISHED), 1 failed, 1 killed, 1 not run",
        f"  FAILED:  2_rmsnorm_naive [{' '.join(task)} workload.seed=2]: died from signal SIGKILL",
        f"  KILLED:  1_rmsnorm_naive [{' '.join(task)} workload.seed=1]: interrupted by SIGINT",
        f"  not run: 3_rmsnorm_naive [{' '.join(task)} workload.seed=3]",
    ]


def test_jobs_timing_their_own_steady_state_are_said_once_with_their_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(SWEEP_ID_ENV, "this-sweep")
    caplog.set_level(logging.INFO)
    launch_seeds(tmp_path, ["+workload=rmsnorm_naive", "measure.processes=0"], 3)
    own = [message for message in caplog.messages if "time their own steady state" in message]
    assert own == ["rounds: 3 of 3 jobs time their own steady state: measure.processes=0 times it in its own process"]
    assert not [message for message in caplog.messages if "times its own steady state" in message]


def test_parallel_device_profiled_jobs_hear_the_hbm_their_captures_reserve_on_a_chip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ProfileMode.DEVICE reserves ~5 GB of HBM per process: four jobs side by side on one Trn2 chip lose 20 GB."""
    monkeypatch.setenv(SWEEP_ID_ENV, "this-sweep")
    monkeypatch.delenv(LNC_ENV, raising=False)  # Trn2's default, LNC 2: NeuronCores 0-3 are one chip's
    slots = NeuronBackend.plan_slots(BackendConfig(name="neuron"), 0, "0-3", 1)
    task = ["+workload=rmsnorm_naive", "backend=neuron", "profiler=neuron_device", "measure.processes=0"]
    launch_seeds(tmp_path, task, 4, slots)
    assert (
        "hydra.launcher.jobs=4 with profiler.modes DEVICE: 4 device-profiled process(es) on chip 0 reserve ~20 GB "
        "of its 103 GB HBM (5 GB each, neuron-explorer docs), leaving ~21 GB each for the workload"
    ) in caplog.messages
    caplog.clear()
    launch_seeds(tmp_path, [*task, "profiler.modes=[RUNTIME]"], 4, slots)
    assert not [message for message in caplog.messages if "device-profiled" in message]
