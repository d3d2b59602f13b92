"""monitor.period_s in process: a CPU job's host series in the run, nothing when off, the samplers on their own."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
from omegaconf import OmegaConf

from runner import names
from runner.backends import neuron_monitor
from runner.backends.nvml import gpu_values
from runner.config import TrackingConfig
from runner.config_loading import load_run_spec
from runner.execute import monitor
from runner.execute.monitor import PollingSampler, ToolSampler
from runner.experiment import run_experiment
from runner.measure.result import SystemSample
from runner.tracking.run import MlflowRun, ensure_experiment
from tests.helpers import STANDIN, all_runs, compose_cfg, job_for

TINY = ("+workload=rmsnorm_naive", "workload.hidden=16", "measure=quick", "backend=cpu")
# seconds a wait for a sample may take: it bounds a hang only, so a busy host's late sample fails no test
HANG_S = 60.0
# long enough for /proc/stat's tick counters to move (ten 1/100 s ticks), whatever the host's load
TICKS_MOVE_S = 0.1


def wait_for(what: str, done: Callable[[], bool]) -> None:
    """Poll until `done()`: the test waits on the event (a sample taken), not on a clock a loaded host outruns."""
    deadline = time.monotonic() + HANG_S
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {HANG_S:g} s"
        time.sleep(0.05)


def run_job(tmp_path: Path, *overrides: str) -> mlflow.entities.Run:
    cfg = compose_cfg(*TINY, *overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    run_experiment(load_run_spec(cfg), job_for(tmp_path), resolved)
    (run,) = all_runs()
    return run


def test_a_cpu_job_logs_the_hosts_cpu_and_memory_each_second_it_measures(
    tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop, stopping = PollingSampler.stop, list[float]()

    def stop_after_two_periods(sampler: PollingSampler) -> list[SystemSample]:
        """The job's measurement ends once two periods are sampled, however late a busy host's samples come."""
        wait_for("two samples while the job measures", lambda: len(sampler.samples) >= 2)
        # the host's CPU ticks count in 1/100 s: a last reading in the second one's tick has no CPU share to log
        time.sleep(TICKS_MOVE_S)
        stopping.append(time.time())
        return stop(sampler)

    monkeypatch.setattr(PollingSampler, "stop", stop_after_two_periods)
    run = run_job(tmp_path, "monitor=every_second")
    system = {key for key in run.data.metrics if key.startswith(names.SYSTEM_PREFIX)}
    assert system == {names.SYSTEM_HOST_CPU_PCT, names.SYSTEM_HOST_MEMORY_USED_BYTES}
    client = mlflow.MlflowClient(tracking_uri)
    cpu = sorted(client.get_metric_history(run.info.run_id, names.SYSTEM_HOST_CPU_PCT), key=lambda m: m.step)
    assert len(cpu) >= 3 and [m.step for m in cpu] == list(range(len(cpu)))  # each second, and one at the end
    memory = client.get_metric_history(run.info.run_id, names.SYSTEM_HOST_MEMORY_USED_BYTES)
    assert max(m.timestamp for m in memory) >= int(stopping[0] * 1000)  # the last one read as the sampler stopped
    assert all(0 <= m.value <= 100 for m in cpu)
    # stamped when read, a period apart (in ms: a late sample on a busy host is later, not 1000x later)
    assert 800 <= cpu[1].timestamp - cpu[0].timestamp <= HANG_S * 1000
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
    started = time.time()
    sampler.start()
    wait_for("a sample after the period", lambda: len(sampler.samples) >= 1)
    samples = sampler.stop()
    assert len(samples) == 2 and samples[0].time_s - started >= 0.99  # one after the period, one when stopped
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


def on_standin_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    """The stand-in's neuron-monitor on PATH, its events logged, and this process holding NeuronCore 3."""
    monkeypatch.setenv("PATH", f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NEURON_STANDIN_STATE", str(tmp_path / "nrt"))
    monkeypatch.setenv("NEURON_STANDIN_LOG", str(tmp_path / "calls.jsonl"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "nrt").mkdir()
    (tmp_path / "nrt" / "nc_3.owner").write_text(f"{os.getpid()}\n")


def bytes_read_by_live_threads() -> int:
    """What this process's live threads have read, files and pipes alike (their /proc io's rchar).

    Per thread: the process's own count adds what its reaped children read (the reader's pipe).
    """
    return sum(int(io.read_text().split("rchar:")[1].split()[0]) for io in Path("/proc/self/task").glob("*/io"))


def kept_a_report(sampler: ToolSampler) -> bool:
    """Whether the reader has written one whole sample line (neuron-monitor reported once, the reader kept it)."""
    return sampler.samples_file.is_file() and "\n" in sampler.samples_file.read_text()


def test_the_standins_neuron_monitor_is_read_for_this_process_by_a_reader_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_standin_host(tmp_path, monkeypatch)
    sampler = ToolSampler(neuron_monitor, 1, tmp_path)
    sampler.start()
    wait_for("a report kept by the reader", lambda: kept_a_report(sampler))
    samples = sampler.stop()
    assert len(samples) >= 1 and samples[0].values[names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=3)] == 42.0
    started, stopped = (json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines())
    assert (started["event"], stopped["event"], stopped["pid"]) == ("monitor_start", "monitor_stop", started["pid"])
    reader = Path(f"/proc/{started['parent']}/cmdline")
    assert started["parent"] != os.getpid() and not reader.exists()  # its reader started it, and is gone


# the neuron-monitor user guide's entry for one loaded model (memory_used.loaded_models)
GUIDE_MODEL = {
    "name": "neff", "uuid": "91f2f66e83ea419dace1da07617ad39f", "model_id": 10005, "is_running": False,
    "subgraphs": {"sg_00": {
        "memory_used_bytes": {"host": 20480, "neuron_device": 21001024, "usage_breakdown": {
            "host": {"application_memory": 20480, "constants": 0, "dma_buffers": 0, "tensors": 0},
            "neuron_device": {"constants": 20971520, "model_code": 29504, "runtime_memory": 0, "tensors": 0}}},
        "neuroncore_index": 0, "neuron_device_index": 12,
    }},
}  # fmt: skip


def test_reports_that_grow_with_loaded_models_are_not_read_by_the_measuring_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = 3000
    on_standin_host(tmp_path, monkeypatch, NEURON_STANDIN_LOADED_MODELS=str(models))
    one_report = models * len(json.dumps(GUIDE_MODEL))  # at least: its loaded models alone
    sampler = ToolSampler(neuron_monitor, 1, tmp_path)
    before = bytes_read_by_live_threads()
    sampler.start()
    wait_for("a report kept by the reader", lambda: kept_a_report(sampler))
    measuring = bytes_read_by_live_threads()  # a thread reading the reports is live until stopped
    samples = sampler.stop()
    read = {"while measuring": measuring - before, "when stopped": bytes_read_by_live_threads() - measuring}
    assert len(samples) >= 1 and samples[0].values[names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=3)] == 42.0
    assert max(read.values()) < one_report / 10, f"this process read {read} (B); one report is over {one_report} B"
