"""monitor.period_s in process: a CPU job's host series in the run, nothing when off, the samplers on their own."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import mlflow
import pytest
from omegaconf import OmegaConf

from runner import names
from runner.config import TrackingConfig, load_run_spec
from runner.execute import monitor
from runner.execute.monitor import NeuronMonitorSampler, PollingSampler, gpu_values
from runner.experiment import run_experiment
from runner.tracking.run import MlflowRun, ensure_experiment
from tests.helpers import STANDIN, all_runs, compose_cfg, job_for

TINY = ("+workload=rmsnorm_naive", "workload.hidden=16", "measure=quick", "backend=cpu")


def run_job(tmp_path: Path, *overrides: str) -> mlflow.entities.Run:
    cfg = compose_cfg(*TINY, *overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    run_experiment(load_run_spec(cfg), job_for(tmp_path), resolved)
    (run,) = all_runs()
    return run


def test_a_cpu_job_logs_the_hosts_cpu_and_memory_each_second_it_measures(tmp_path: Path, tracking_uri: str) -> None:
    run = run_job(tmp_path, "monitor=every_second", "measure.warmup_s=2.5")
    system = {key for key in run.data.metrics if key.startswith(names.SYSTEM_PREFIX)}
    assert system == {names.SYSTEM_HOST_CPU_PCT, names.SYSTEM_HOST_MEMORY_USED_BYTES}
    client = mlflow.MlflowClient(tracking_uri)
    cpu = sorted(client.get_metric_history(run.info.run_id, names.SYSTEM_HOST_CPU_PCT), key=lambda m: m.step)
    assert len(cpu) >= 3 and [m.step for m in cpu] == list(range(len(cpu)))  # each second, and one at the end
    assert all(0 <= m.value <= 100 for m in cpu)
    assert 800 <= cpu[1].timestamp - cpu[0].timestamp <= 3000  # stamped when read, a period apart
    manifest = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")
    assert manifest[names.MANIFEST_MONITOR] == {"source": "host", "period_s": 1, "version": None, "missing": ""}
    assert not [thread for thread in threading.enumerate() if thread.name == "system-monitor"]


def test_off_starts_nothing_and_logs_no_system_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a sampler was made with monitor.period_s off")

    monkeypatch.setattr(monitor, "make_sampler", refuse)
    run = run_job(tmp_path)
    assert not [key for key in run.data.metrics if key.startswith(names.SYSTEM_PREFIX)]
    manifest = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")
    assert manifest[names.MANIFEST_MONITOR]["period_s"] is None


def test_gpu_readings_are_sampled_and_logged_as_histories_a_rank_under_its_folder(tracking_uri: str) -> None:
    sampler = PollingSampler(1, [lambda: gpu_values(50, 1e9, 200_000)])
    sampler.start()
    time.sleep(1.3)
    samples = sampler.stop()
    assert len(samples) == 2  # one after the period, one when stopped
    tracking = TrackingConfig(uri=tracking_uri)
    with mlflow.start_run(experiment_id=ensure_experiment(tracking)) as active:
        run = MlflowRun(active.info.run_id, active.info.experiment_id, tracking)
        run.log_samples(samples)
        run.log_samples(samples, "rank1/")
    client = mlflow.MlflowClient(tracking_uri)
    for key in (names.SYSTEM_GPU_POWER_W, f"rank1/{names.SYSTEM_GPU_POWER_W}"):
        power = sorted(client.get_metric_history(active.info.run_id, key), key=lambda m: m.step)
        assert [(m.step, m.value, m.timestamp) for m in power] == [
            (step, 200.0, int(sample.time_s * 1000)) for step, sample in enumerate(samples)
        ]
    assert client.get_run(active.info.run_id).data.metrics[names.SYSTEM_GPU_UTILIZATION_PCT] == 50


def test_a_reader_that_fails_ends_the_sampling_with_one_warning_not_the_job(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> dict[str, float]:
        raise OSError("GPU is lost")

    sampler = PollingSampler(1, [broken])
    sampler.start()
    time.sleep(1.2)
    assert sampler.stop() == []
    assert [r.getMessage() for r in caplog.records] == ["system metrics: sampling stopped: OSError: GPU is lost"]


def test_the_standins_neuron_monitor_is_read_for_this_process_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NEURON_STANDIN_STATE", str(tmp_path / "nrt"))
    monkeypatch.setenv("NEURON_STANDIN_LOG", str(tmp_path / "calls.jsonl"))
    (tmp_path / "nrt").mkdir()
    (tmp_path / "nrt" / "nc_3.owner").write_text(f"{os.getpid()}\n")  # this process holds NeuronCore 3
    sampler = NeuronMonitorSampler(1, tmp_path / names.NEURON_MONITOR_CONFIG_FILE)
    sampler.start()
    time.sleep(2.5)
    samples = sampler.stop()
    assert len(samples) >= 1 and samples[0].values[names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=3)] == 42.0
    started, stopped = (json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines())
    assert (started["event"], stopped["event"], stopped["pid"]) == ("monitor_start", "monitor_stop", started["pid"])
    assert started["parent"] == os.getpid()
