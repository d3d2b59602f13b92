"""A job's folder is its own (a claim another live process holds is refused, a dead one's taken over),
a job that died is counted by its sweep as what it was, a stopped job says whether it had a run to
close, and a sweep stopped early counts the jobs it never started."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from runner import CONF_DIR
from runner.config import ConfigError, TrackingConfig, register_schemas
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
from runner.sweep.jobs import sweep_jobs, sweep_overrides
from runner.sweep.summary import summarise_sweep
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


@pytest.mark.parametrize("opened", [False, True], ids=["before-its-run", "with-its-run"])
def test_a_stopped_job_says_whether_it_had_a_run_to_close(
    opened: bool, tmp_path: Path, tracking_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    life = JobLife(job_for(tmp_path))
    with pytest.raises(Interrupted), life.running():
        if opened:
            with life.run(TrackingConfig(uri=tracking_uri)):
                raise Interrupted(signal.SIGTERM)
        raise Interrupted(signal.SIGTERM)
    said = "interrupted by SIGTERM: test_job stopped; "
    if opened:
        (run,) = all_runs(tracking_uri)
        assert run.info.status == "KILLED" and f"{said}its run {run.info.run_id} is closed KILLED" in caplog.text
    else:
        assert not all_runs(tracking_uri) and f"{said}it had no run to close" in caplog.text


def test_a_sweep_stopped_early_counts_the_jobs_it_never_started(tmp_path: Path) -> None:
    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        config = compose("config", overrides=["+workload=rmsnorm_naive"], return_hydra_config=True)
        with open_dict(config):
            config.hydra.overrides.task = ["+workload=rmsnorm_naive,rmsnorm_builtin", "workload.seed=0,1"]
        jobs = sweep_jobs(config)
    assert jobs is not None and len(jobs) == 4
    write_status(tmp_path / "0_a", status="FINISHED", sweep_id="this-sweep", overrides=" ".join(jobs[0]))
    write_status(tmp_path / "1_b", status="KILLED", sweep_id="this-sweep", overrides=" ".join(jobs[1]))
    summary = summarise_sweep(tmp_path, "this-sweep", None, len(jobs))
    assert (
        summary.lines()[0] == "sweep: 4 job(s): 1 finished, 0 skipped (already FINISHED), 0 failed, 1 killed, 2 not run"
    )


@pytest.mark.parametrize(
    ("params", "task"),
    [
        pytest.param({}, ["+workload=rmsnorm_naive,rmsnorm_builtin", "workload.seed=0,1,2"], id="grid"),
        pytest.param({"workload.seed": "0,1"}, ["+workload=rmsnorm_naive,rmsnorm_builtin"], id="params-first"),
        pytest.param({"workload.seed": "0,1"}, ["workload.seed=5", "+workload=rmsnorm_naive"], id="overridden-param"),
        pytest.param({}, ["+workload=rmsnorm_naive", "workload.seed=range(0,3)"], id="range"),
    ],
)
def test_the_sweep_jobs_are_the_basic_sweepers_grid_in_its_order(params: dict[str, str], task: list[str]) -> None:
    """Read through Hydra's public override API (runner/ imports none of its internals), checked against its own."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    register_schemas()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        config = compose("config", overrides=["+workload=rmsnorm_naive"], return_hydra_config=True)
        with open_dict(config):
            config.hydra.sweeper.params = params
            config.hydra.overrides.task = task
        jobs = sweep_jobs(config)
        overrides = OverridesParser.create().parse_overrides(sweep_overrides(config))
    assert jobs == [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    assert jobs
