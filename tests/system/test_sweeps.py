"""Sweeps under failure: isolation, resume after a killed sweep, parallel jobs, a real MLflow server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import mlflow
import pytest

from runner import names
from runner.backends.base import WHOLE_MACHINE
from runner.backends.cpu import CpuBackend
from runner.backends.cuda import CudaBackend
from runner.backends.neuron import NeuronBackend
from runner.config import BackendConfig, ConfigError, NeuronBackendConfig
from runner.job import config_hash
from tests.helpers import REPO, all_runs

FAULTY = ["+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[4]]", "measure=quick"]


def sweep(tmp_path: Path, *args: str, uri: str, **popen: object) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "runner", "-m", *FAULTY, f"hydra.sweep.dir={tmp_path / 'sweep'}", *args]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, **popen)  # type: ignore[call-overload]


def job_runs(uri: str) -> list[mlflow.entities.Run]:
    return [r for r in all_runs(uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]


def test_config_hash_keeps_what_is_measured_and_leaves_out_where_results_go() -> None:
    base = {"workload": {"hidden": 8}, "tracking": {"uri": "a"}, "backend": {"name": "neuron", "cores": "0"}}
    # where results go and how a sweep treats finished work change nothing that is measured
    assert config_hash(base) == config_hash({**base, "tracking": {"uri": "b"}, "resume": False})
    assert config_hash(base) != config_hash({**base, "workload": {"hidden": 16}})
    # another NeuronCore or compile cache folder (cold or warm): another measurement
    assert config_hash(base) != config_hash({**base, "backend": {"name": "neuron", "cores": "1"}})
    warm_in = {folder: {**base, "measure": {"compile_cache": "warm", "compile_cache_dir": folder}} for folder in "ab"}
    assert config_hash(warm_in["a"]) != config_hash(warm_in["b"])


def test_parallel_slots_split_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    unpinned = BackendConfig(name="neuron")
    neuron = NeuronBackend.plan_slots(unpinned, 0, "0-7", 2)
    assert [dict(s.env) for s in neuron] == [{"NEURON_RT_VISIBLE_CORES": f"{i}-{i + 1}"} for i in (0, 2, 4, 6)]
    assert len(NeuronBackend.plan_slots(unpinned, 0, "0-31", 1)) == 32
    # groups never span a gap in the pool: the runtime takes contiguous ranges only
    gapped = NeuronBackend.plan_slots(unpinned, 0, "0-3,8-11", 3)
    assert [dict(s.env)["NEURON_RT_VISIBLE_CORES"] for s in gapped] == ["0-2", "8-10"]
    with pytest.raises(ConfigError, match="hydra.launcher.cores_per_job=4 but the pool 0-1 has no run"):
        NeuronBackend.plan_slots(unpinned, 0, "0-1", 4)
    with pytest.raises(ConfigError, match="backend.cores=0-1 pins a single job; .* hydra.launcher.cores"):
        NeuronBackend.plan_slots(NeuronBackendConfig(cores="0-1"), 2, None, 1)
    # one job at a time: the job sees the machine as a single run does, backend.cores untouched
    assert NeuronBackend.plan_slots(NeuronBackendConfig(cores="0-1"), 1, None, 1) == [WHOLE_MACHINE]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cuda = CudaBackend.plan_slots(BackendConfig(name="cuda"), 0, None, 1)
    assert [dict(s.env)["CUDA_VISIBLE_DEVICES"] for s in cuda] == ["0", "1"]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    cpu = CpuBackend.plan_slots(BackendConfig(name="cpu"), 4, None, 1)
    assert len(cpu) == 4 and all(dict(s.env)["OMP_NUM_THREADS"] == "4" for s in cpu)
    assert [dict(s.env)["RUNNER_CPU_CORES"] for s in cpu] == ["0-3", "4-7", "8-11", "12-15"]  # each its own


@pytest.mark.slow
def test_faults_fail_alone_under_the_isolated_launcher(tmp_path: Path, tracking_uri: str) -> None:
    # five jobs: two healthy ones, one that raises, one that aborts, one that is SIGKILLed
    done = sweep(tmp_path, "+workload.fault=none,fine,raise,abort,kill", "hydra/launcher=isolated", uri=tracking_uri)
    assert done.returncode != 0
    runs = job_runs(tracking_uri)
    status = {r.data.params["workload.fault"]: r.info.status for r in runs}
    assert status == {"none": "FINISHED", "fine": "FINISHED", "raise": "FAILED", "abort": "FAILED", "kill": "FAILED"}
    errors = {r.data.params["workload.fault"]: r.data.tags.get(names.TAG_ERROR) for r in runs}
    assert errors["raise"] == "PhaseError: steady state: RuntimeError: injected failure"  # the phase it failed in
    assert errors["abort"] == "died from signal SIGABRT" and errors["kill"] == "died from signal SIGKILL"
    failed = next(r for r in runs if r.data.params["workload.fault"] == "raise")
    artifacts = {a.path for a in mlflow.MlflowClient(tracking_uri).list_artifacts(failed.info.run_id)}
    assert "error.txt" in artifacts
    assert "sweep: 5 job(s): 2 finished, 0 skipped (already FINISHED), 3 failed" in done.stdout
    assert done.stdout.count("FAILED:") == 3 and "died from signal SIGKILL" in done.stdout
    (parent,) = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) == "true"]
    assert parent.info.status == "FAILED" and parent.data.tags[names.TAG_FAILED_JOBS] == "3"


def test_a_job_killed_by_its_timeout_before_it_opened_its_run_gets_a_failed_run(
    tmp_path: Path, tracking_uri: str
) -> None:
    """Killed while its workload builds (or torch imports on a loaded host): the comparison still has its row."""
    done = sweep(
        tmp_path, "+workload.build_s=600", "hydra/launcher=isolated", "hydra.launcher.timeout_s=20", uri=tracking_uri
    )
    assert done.returncode == 1, done.stderr[-3000:]
    (parent,) = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) == "true"]
    (run,) = job_runs(tracking_uri)
    assert run.info.status == "FAILED" and run.data.tags[names.TAG_ERROR] == "killed after the per-job timeout of 20 s"
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id and run.data.tags[names.TAG_KIND] == "job"
    assert run.info.run_name.startswith("custom ") and "workload.build_s=600" in run.info.run_name
    status = json.loads((Path(run.data.tags[names.TAG_OUTPUT_DIR]) / "job_status.json").read_text())
    assert status["run_id"] == run.info.run_id and status["status"] == "FAILED"
    assert "FAILED" in done.stdout.split("speedup (95% CI)")[1]  # its row in the sweep's comparison


@pytest.mark.parametrize("launcher", ["inprocess", "isolated", "parallel"])
def test_a_hung_workload_fails_alone_within_its_timeout_under_each_launcher(
    tmp_path: Path, tracking_uri: str, launcher: str
) -> None:
    # the rounds time both jobs first: the hanging one's round 1 worker never answers its warm-up
    timeout_s = 30
    jobs = ["hydra.launcher.jobs=2"] if launcher == "parallel" else []
    started = time.monotonic()
    done = sweep(
        tmp_path, "+workload.fault=none,hang", "measure.processes=2", f"hydra/launcher={launcher}",
        f"hydra.launcher.timeout_s={timeout_s}", *jobs, uri=tracking_uri, timeout=600,
    )  # fmt: skip
    assert time.monotonic() - started < 4 * timeout_s, "the sweep waited past its timeout"
    assert done.returncode == 1, done.stderr[-3000:]
    runs = {r.data.params["workload.fault"]: r for r in job_runs(tracking_uri)}
    assert {fault: run.info.status for fault, run in runs.items()} == {"none": "FINISHED", "hang": "FAILED"}
    hung = f"its workload hung: round 1 gave no answer within {timeout_s} s (hydra.launcher.timeout_s)"
    assert runs["hang"].data.tags[names.TAG_ERROR] == f"HungWorkload: {hung}"
    assert "sweep: 2 job(s): 1 finished, 0 skipped (already FINISHED), 1 failed" in done.stdout
    assert not [r for r in all_runs(tracking_uri) if r.info.status == "RUNNING"]


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_duplicates(tmp_path: Path, tracking_uri: str) -> None:
    labels = "+workload.label=a,b,c,d"
    cmd = [sys.executable, "-m", "runner", "-m", *FAULTY, labels, "hydra/launcher=isolated",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while sum(r.info.status == "FINISHED" for r in job_runs(tracking_uri)) < 2:
        assert time.monotonic() < deadline and first.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)  # the whole sweep, launcher and job alike
    first.wait()
    finished_before = {
        r.data.tags[names.TAG_CONFIG_HASH] for r in job_runs(tracking_uri) if r.info.status == "FINISHED"
    }

    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout[-3000:]
    runs = job_runs(tracking_uri)
    finished = Counter(r.data.tags[names.TAG_CONFIG_HASH] for r in runs if r.info.status == "FINISHED")
    assert len(finished) == 4 and set(finished.values()) == {1}  # every config once, none twice
    assert f"{len(finished_before)} skipped (already FINISHED)" in second.stdout
    assert not [r for r in runs if r.info.status == "RUNNING"]  # the killed job's run was closed


@pytest.mark.slow
def test_four_parallel_workers_lose_no_run(tmp_path: Path, tracking_uri: str) -> None:
    # twice as many jobs as workers: each worker takes a second job when its first ends
    labels = "+workload.label=" + ",".join("abcdefgh")
    done = sweep(
        tmp_path, labels, "hydra/launcher=parallel", "hydra.launcher.jobs=4", "profiler=none", uri=tracking_uri
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Launching 8 jobs, 4 at a time" in done.stderr + done.stdout
    runs = job_runs(tracking_uri)
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["workload.label"] for r in runs} == set("abcdefgh")
    assert {r.data.tags["env.OMP_NUM_THREADS"] for r in runs} == {str(max(1, (os.cpu_count() or 1) // 4))}


@pytest.mark.slow
def test_sweep_against_a_tracking_server(tmp_path: Path, mlflow_server: str) -> None:
    experiment = "sweep_against_a_server"  # the session's server is shared: this test's runs are in their own
    cmd = [sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive,rmsnorm_builtin", "++workload.hidden=16",
           "measure=quick", "tracking=server", f"tracking.uri={mlflow_server}", f"tracking.experiment={experiment}",
           f"hydra.sweep.dir={tmp_path / 's'}"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    client = mlflow.MlflowClient(mlflow_server)
    runs = all_runs(mlflow_server, experiment)
    children = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert len(runs) == 3 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    artifacts = {a.path for a in client.list_artifacts(children[0].info.run_id)}
    assert names.OP_TABLE_FILE in artifacts


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["inprocess", "isolated", "parallel"])
def test_each_launcher_times_the_jobs_in_interleaved_rounds(tmp_path: Path, tracking_uri: str, launcher: str) -> None:
    cmd = [
        sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive", "++workload.hidden=16", "workload.seed=0,1",
        "measure=quick", "measure.processes=2", f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *(["hydra.launcher.jobs=2"] if launcher == "parallel" else []),
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    client = mlflow.MlflowClient(tracking_uri)
    runs = job_runs(tracking_uri)
    assert len(runs) == 2
    positions: dict[int, list[int]] = {1: [], 2: []}
    for run in runs:
        history = client.get_metric_history(run.info.run_id, names.PROCESS_MEDIAN_MS)
        rounds = json.loads(Path(client.download_artifacts(run.info.run_id, names.ROUNDS_FILE)).read_text())
        table = [dict(zip(rounds["columns"], row, strict=True)) for row in rounds["data"]]
        assert [row["round"] for row in table] == [1, 2] and all(row["workers"] == 2 for row in table)
        medians = [metric.value for metric in sorted(history, key=lambda metric: metric.step)]
        assert [row["median_ms"] for row in table] == pytest.approx(medians)
        for row in table:
            positions[row["round"]].append(row["position"])
        assert run.data.tags[names.TAG_TIMING_STABLE] in ("true", "false")
    # one worker of each job in every round, in an order recorded per round; both runs pair by round
    assert all(sorted(order) == [1, 2] for order in positions.values())
    assert len({run.data.tags[names.TAG_ROUNDS_ID] for run in runs}) == 1
    assert "rounds: round 2/2" in done.stderr + done.stdout
    assert "speedup (95% CI)" in done.stdout


def test_the_swept_keys_are_what_the_sweep_varies() -> None:
    from omegaconf import OmegaConf

    from runner.sweep.jobs import swept_keys

    config = OmegaConf.create({
        "hydra": {
            "sweeper": {"params": {"measure.copies": "1,2,4,8", "workload.hidden": "16,32"}},
            "overrides": {"task": ["+experiment=core_scaling", "workload.hidden=64", "+workload=a,b", "x=glob(*)"]},
        }
    })  # fmt: skip
    assert swept_keys(config) == ["measure.copies", "workload", "x"]  # the command line's single hidden wins


def test_a_jobs_name_leads_with_what_its_sweep_varies() -> None:
    overrides = ["measure.copies=4", "+experiment=core_scaling", "measure=quick", "tracking.uri=sqlite:///x.db"]
    assert (
        names.job_name("rmsnorm_naive", overrides, {"measure.copies"}) == "measure.copies=4 rmsnorm_naive measure=quick"
    )
    assert names.job_name("rmsnorm_naive", overrides, set()) == "rmsnorm_naive measure.copies=4 measure=quick"
    both = ["workload.hidden=16", "+workload=rmsnorm_builtin", "measure=quick"]
    assert names.job_name("rmsnorm_builtin", both, {"workload", "workload.hidden"}) == (
        "rmsnorm_builtin workload.hidden=16 measure=quick"
    )


@pytest.mark.slow
def test_a_sweeps_names_and_runs_table_lead_with_its_swept_key(tmp_path: Path, tracking_uri: str) -> None:
    done = sweep(tmp_path, "measure.steps=5", "+workload.label=a,b", "profiler=none", f"tracking.uri={tracking_uri}",
                 uri=tracking_uri)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (parent,) = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) == "true"]
    assert parent.info.run_name.startswith("sweep +workload=custom") and "tracking" not in parent.info.run_name
    assert parent.data.tags[names.TAG_SWEPT_KEYS] == "workload.label"
    assert sorted(r.info.run_name.split()[0] for r in job_runs(tracking_uri)) == [
        "+workload.label=a",
        "+workload.label=b",
    ]
    client = mlflow.MlflowClient(tracking_uri)
    key = parent.data.tags[names.TAG_UI_RUNS_TABLE].rsplit("viewStateShareKey=", 1)[1]
    view = client.get_experiment(parent.info.experiment_id).tags[f"mlflow.sharedViewState.{key}"]
    assert json.loads(view)["columnOrder"][0] == "params.`workload.label`"
