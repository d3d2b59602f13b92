"""Runs land in a real (temporary) SQLite MLflow store with what they should carry."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow.entities import Run
from omegaconf import OmegaConf

from runner import compare, history, names
from runner.config import ConfigError, TrackingConfig
from runner.config_loading import load_run_spec
from runner.experiment import run_experiment
from runner.measure.stats import t_quantile
from runner.report.reader import op_table
from runner.tracking.run import flatten
from runner.tracking.store import store_lock
from tests.helpers import REPO, RunnerInProcess, all_runs, compose_cfg, job_for


def only_run() -> Run:
    runs = all_runs()
    assert len(runs) == 1
    return runs[0]


def run_job(tmp_path: Path, *overrides: str) -> dict[str, float]:
    cfg = compose_cfg("backend=cpu", *overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    return run_experiment(load_run_spec(cfg), job_for(tmp_path, "rmsnorm_naive"), resolved)


def test_run_lands_with_params_tags_metrics_and_artifacts(tmp_path: Path) -> None:
    metrics = run_job(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16")
    run = only_run()
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "rmsnorm_naive"
    assert run.data.params["workload.hidden"] == "16"
    assert run.data.params["schedule.wait"] == "2"
    assert run.data.tags[names.TAG_BACKEND] == "cpu"
    assert run.data.tags[names.TAG_WORKLOAD] == "rmsnorm_naive"
    assert run.data.tags[names.TAG_KIND] == names.KIND_JOB
    assert run.data.tags["runner.version.torch"]
    assert run.data.tags[names.TAG_TOP_OP].startswith("aten::")
    assert run.data.metrics[names.PROFILED_STEP_MS] == pytest.approx(metrics[names.PROFILED_STEP_MS])
    assert run.data.metrics[names.PROFILER_COST_MS] == pytest.approx(metrics[names.PROFILER_COST_MS])
    assert run.data.tags[names.TAG_WINDOW_REPRESENTATIVE] in ("true", "false")
    assert names.DEVICE_SELF_TOTAL_MS not in run.data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {names.OP_TABLE_FILE, names.OP_TABLE_TEXT_FILE, names.TRACE_FOLDER, names.CONFIG_FILE} <= artifacts
    # beside the SQLite database, not in ./mlruns of the folder the job ran in
    assert run.info.artifact_uri.startswith(
        (Path(mlflow.get_tracking_uri().removeprefix("sqlite:///")).parent / "mlruns").as_uri()
    )
    local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path / "dl")))
    table = json.loads((local / names.OP_TABLE_FILE).read_text())
    assert names.OP_NAME in table["columns"] and any(row[0] == "aten::rsqrt" for row in table["data"])
    assert run.data.tags[names.TAG_OP_TABLE_VERSION] == str(names.OP_TABLE_VERSION)
    assert op_table(mlflow.MlflowClient(), run) == table  # the reader takes the layout the job wrote
    assert json.loads(next((local / names.TRACE_FOLDER).rglob(names.TRACE_FILE)).read_text())["traceEvents"]


def test_job_that_raises_leaves_its_run_failed(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="on purpose"):
        failing = "workload._target_=tests.helpers.counting.FailingModule"
        run_job(tmp_path, "+workload=custom", failing, "workload.inputs=[[2]]")
    assert only_run().info.status == "FAILED"


def test_a_late_failure_keeps_what_was_measured(tmp_path: Path) -> None:
    # the float64 reference runs out of memory after every timed phase: the run is FAILED, names the phase, and
    # keeps the steady state, the op table and the traces
    with pytest.raises(Exception, match="out of memory"):
        oom = "workload._target_=tests.helpers.faulty.ReferenceOutOfMemory"
        run_job(tmp_path, "+workload=custom", oom, "workload.inputs=[[2,8]]", "measure=quick")
    run = only_run()
    assert run.info.status == "FAILED"
    assert run.data.tags[names.TAG_ERROR] == "PhaseError: accuracy: MemoryError: float64 reference: out of memory"
    assert {names.STEP_MEDIAN_MS, names.FIRST_CALL_S, names.PROFILER_STEP_MS} <= set(run.data.metrics)
    assert names.ACCURACY_MAX_REL_ERR not in run.data.metrics
    assert run.data.tags[names.TAG_TIMING_STABLE] in ("true", "false")
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {names.OP_TABLE_FILE, names.TRACE_FOLDER} <= artifacts
    traces = mlflow.MlflowClient().list_artifacts(run.info.run_id, names.TRACE_FOLDER)
    assert traces


def test_from_its_third_run_a_configuration_states_its_interval_from_what_its_runs_moved(tmp_path: Path) -> None:
    """Only earlier runs show the host's drift: the third run's interval is the three medians' spread, t with 2 df."""
    quick = ("+workload=rmsnorm_naive", "workload.hidden=16", "measure=quick")
    medians = [run_job(tmp_path / f"run{k}", *quick)[names.STEP_MEDIAN_MS] for k in range(3)]
    _, second, third = sorted(all_runs(), key=lambda run: run.info.start_time)
    spread = float(np.log(medians).std(ddof=1))
    stated = float(np.expm1(t_quantile(0.975, 2) * np.sqrt(2) * spread)) * 100
    assert third.data.metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT] == pytest.approx(stated)
    # one earlier run shows no spread: the second states what it saw itself
    assert second.data.metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT] != pytest.approx(
        float(np.expm1(t_quantile(0.975, 1) * np.sqrt(2) * np.log(medians[:2]).std(ddof=1))) * 100
    )


def test_bad_input_leaves_no_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        run_job(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=-4")
    assert all_runs() == []


def test_tracking_off_logs_nothing(tmp_path: Path) -> None:
    run_job(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "tracking=off")
    assert all_runs() == []


def test_flatten_makes_dotted_params() -> None:
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": [{"e": 3}]}) == {"a.b": 1, "a.c": [1, 2], "d.0.e": 3}


def test_auto_records_what_it_chose(tmp_path: Path) -> None:
    cfg = compose_cfg("+workload=rmsnorm_naive", "workload.hidden=16", "backend=auto")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    run_experiment(load_run_spec(cfg), job_for(tmp_path), resolved)
    tags = only_run().data.tags
    assert tags[names.TAG_BACKEND_REQUESTED] == "auto"
    assert tags[names.TAG_BACKEND] == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("damage", ["truncated", "random-bytes"])
def test_a_damaged_store_is_refused_in_one_line_before_any_job(
    damage: str,
    tmp_path: Path,
    tracking_uri: str,
    runner_in_process: RunnerInProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = Path(tracking_uri.removeprefix("sqlite:///"))
    size = store.stat().st_size
    if damage == "truncated":  # a copy cut short: a full disk, a backup interrupted
        os.truncate(store, size // 2)
    else:
        store.write_bytes(os.urandom(size))
    refusal = f"tracking.uri={tracking_uri}: the store {store} is damaged ("
    for mode, folder in [([], "hydra.run.dir"), (["-m", "workload.seed=1,2"], "hydra.sweep.dir")]:
        done = runner_in_process(*mode, "+workload=rmsnorm_naive", "measure=quick", f"{folder}={tmp_path}/{folder}")
        assert done.returncode == 1
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: {refusal}") and "Traceback" not in done.stdout
    assert not list(tmp_path.rglob("job_status.json"))  # refused before any job started
    with pytest.raises(SystemExit) as stop:
        compare.main(["--uri", tracking_uri])
    assert history.main(["--uri", tracking_uri]) == history.NOT_FOUND_EXIT
    for message in (str(stop.value.code), capsys.readouterr().err.strip()):
        assert message.startswith(f"error: {refusal.replace('tracking.uri=', '--uri ')}") and "\n" not in message


def test_a_folder_given_as_the_store_is_refused_in_one_line_before_any_job(
    tmp_path: Path, runner_in_process: RunnerInProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sqlite:////tmp/x` where /tmp/x is a folder: SQLite failed each job after its retries with "disk I/O error"."""
    folder = tmp_path / "store"
    folder.mkdir()
    uri = f"sqlite:///{folder}"
    refusal = f"tracking.uri={uri}: {folder} is a folder, not a SQLite store: name a database file"
    for mode, key in [([], "hydra.run.dir"), (["-m", "workload.seed=1,2"], "hydra.sweep.dir")]:
        done = runner_in_process(*mode, "+workload=rmsnorm_naive", f"tracking.uri={uri}", f"{key}={tmp_path}/{key}")
        assert (done.returncode, done.stderr) == (1, f"error: {refusal}\n")
    assert not list(tmp_path.rglob("job_status.json"))  # refused before any job started
    assert compare.cli(["--uri", uri]) == history.main(["--uri", uri]) == history.NOT_FOUND_EXIT
    for message in capsys.readouterr().err.strip().splitlines():
        assert message == f"error: {refusal.replace('tracking.uri=', '--uri ')}"


def test_the_default_stores_lock_is_ignored_by_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # where the lock of the default store, sqlite:///mlflow.db, lands
    with store_lock(TrackingConfig.uri):
        (lock,) = (path.name for path in (tmp_path / "cwd").iterdir())
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", "-q", lock], check=False)
    assert ignored.returncode == 0, f"{lock} would be committed"


@pytest.mark.parametrize("scheduled", [True, False], ids=["a-job-scheduled", "none-scheduled"])
def test_a_sweep_an_error_ends_leaves_its_parent_failed_or_no_run_if_it_scheduled_none(
    tmp_path: Path, tracking_uri: str, scheduled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a job was scheduled the parent records the sweep, FAILED (not KILLED: no signal came); bad input refused
    before any job leaves no run and no summary, as a single run's refusal does: its one error line says it."""
    from runner import signals
    from runner.callbacks import RunnerCallback
    from runner.job import JobStatus, write_status

    monkeypatch.setattr(signals, "_too_late", [False])  # closing drops later stops; the handlers come back by conftest
    client = mlflow.MlflowClient(tracking_uri)
    sweep = RunnerCallback()
    sweep.sweep_id, sweep.sweep_dir = "s1", tmp_path / "sweep"
    sweep.tracking = TrackingConfig(uri=tracking_uri)
    experiment = client.create_experiment("runner", artifact_location=(tmp_path / "artifacts").as_uri())
    sweep.parent_run_id = client.create_run(experiment).info.run_id
    if scheduled:
        (tmp_path / "sweep" / "0_job").mkdir(parents=True)
        write_status(tmp_path / "sweep" / "0_job", sweep_id="s1", status=JobStatus.SCHEDULED, overrides="a=1")
    assert sweep._close(stopped=True, error="the disk is full")
    if scheduled:
        (parent,) = all_runs(tracking_uri)
        assert parent.info.status == "FAILED"
    else:
        assert all_runs(tracking_uri) == []
