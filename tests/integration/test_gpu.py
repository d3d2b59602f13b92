"""backend=cuda on a real GPU; skipped with a reason where CUDA is absent."""

from __future__ import annotations

import pickle
from pathlib import Path

import mlflow
import pytest
import torch
from omegaconf import OmegaConf

from runner import names
from runner.config_loading import load_run_spec
from runner.experiment import run_experiment
from tests.helpers import all_runs, compose_cfg, job_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; none is visible"),
]


def run_cuda(tmp_path: Path, *overrides: str) -> dict[str, float]:
    cfg = compose_cfg(*overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    return run_experiment(load_run_spec(cfg), job_for(tmp_path, "cuda_job"), resolved)


@pytest.mark.parametrize("workload", ["rmsnorm_naive", "rmsnorm_builtin"])
def test_cuda_run_reports_device_time(tmp_path: Path, workload: str) -> None:
    metrics = run_cuda(tmp_path, f"+workload={workload}", "backend=cuda")
    assert metrics[names.DEVICE_SELF_TOTAL_MS] > 0
    assert metrics[names.PEAK_DEVICE_MB] > 0
    assert 0 < metrics[names.ROOFLINE_BANDWIDTH_FRACTION] <= 1
    run = all_runs()[0]
    assert run.data.tags[names.TAG_BACKEND] == "cuda" and run.data.tags[names.TAG_DEVICE_TIME] == "reported"
    table = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.OP_TABLE_FILE}")
    assert "self_device_ms" in table["columns"]
    # the steady state by CUDA events; the synchronized step apart, as the device's busy time and the host's rest
    assert run.data.tags[names.TAG_STEP_CLOCK] == "device"
    busy, rest = metrics[names.DEVICE_BUSY_MS], metrics[names.HOST_AND_IDLE_MS]
    assert busy > 0 and busy + rest == pytest.approx(metrics[names.SYNC_STEP_MS])
    assert metrics[names.STEP_MEDIAN_MS] < metrics[names.SYNC_STEP_MS]  # no synchronize, no launch wait between steps


def test_a_flushed_cache_reads_the_data_from_memory_each_step(tmp_path: Path) -> None:
    """An input that fits in the H200's 60 MB L2: warm, repeated steps find it there; flushed, they read HBM."""
    shape = ("+workload=rmsnorm_builtin", "backend=cuda", "workload.batch=4", "workload.seq_len=512", "profiler=none")
    warm = run_cuda(tmp_path / "warm", *shape)
    flushed = run_cuda(tmp_path / "flushed", *shape, "measure.flush_cache=true")
    assert flushed[names.STEP_MEDIAN_MS] > warm[names.STEP_MEDIAN_MS]
    tags = {run.data.tags[names.TAG_STEP_CLOCK] for run in all_runs()}
    assert tags == {"device", "device, cache flushed before each step"}


def test_auto_picks_cuda_when_no_neuron(tmp_path: Path) -> None:
    run_cuda(tmp_path, "+workload=rmsnorm_naive", "backend=auto")
    run = all_runs()[0]
    assert run.data.tags[names.TAG_BACKEND] == "cuda" and "NVIDIA" in run.data.tags[names.TAG_DEVICE]


def test_compiled_on_cuda_shows_triton_kernels(tmp_path: Path) -> None:
    run_cuda(tmp_path, "+workload=rmsnorm_compiled", "backend=cuda")
    run = all_runs()[0]
    table = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.OP_TABLE_FILE}")
    assert any("triton" in row[0] for row in table["data"])


def test_the_doctor_passes_every_cuda_probe(tmp_path: Path) -> None:
    from runner.doctor.cuda_probes import CUDA_PROBE_NAMES, cuda_verdicts

    verdicts = cuda_verdicts(str(tmp_path), 600)
    assert [v.probe for v in verdicts] == list(CUDA_PROBE_NAMES)
    assert all(v.status == "PASS" for v in verdicts), "\n".join(f"{v.probe}: {v.evidence}" for v in verdicts)


def test_cuda_memory_snapshot_peaks_at_the_workloads_own_lines(tmp_path: Path) -> None:
    metrics = run_cuda(
        tmp_path, "+workload=rmsnorm_naive", "backend=cuda", "measure=quick", "measure.memory_snapshot=true"
    )
    assert metrics[names.MEMORY_WINDOW_PEAK_MB] > 0
    run = all_runs()[0]
    assert run.data.tags[names.TAG_MEMORY_SOURCE] == "torch.cuda.memory snapshot"
    table = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.MEMORY_SITES_FILE}")
    # the naive forward's lines (workloads/rmsnorm.py), not torch's own files, hold the peak
    assert table["data"] and all(site.startswith("workloads/rmsnorm.py:") for site, _ in table["data"])
    assert sum(size for _, size in table["data"]) / 2**20 == pytest.approx(metrics[names.MEMORY_WINDOW_PEAK_MB])
    snapshot = tmp_path / "out" / names.MEMORY_FOLDER / names.MEMORY_SNAPSHOT_FILE
    with snapshot.open("rb") as f:
        dumped = pickle.load(f)
    assert any(entry["action"] == "alloc" for trace in dumped["device_traces"] for entry in trace)


def test_a_cuda_job_logs_nvml_series_of_its_gpu_beside_the_hosts(tmp_path: Path) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    run_cuda(tmp_path, "+workload=rmsnorm_naive", "backend=cuda", "monitor=every_second", "measure.warmup_s=2.5")
    run = all_runs()[0]
    gpu = (names.SYSTEM_GPU_UTILIZATION_PCT, names.SYSTEM_GPU_MEMORY_USED_BYTES, names.SYSTEM_GPU_POWER_W)
    assert {*gpu, names.SYSTEM_HOST_CPU_PCT} <= set(run.data.metrics)
    power = mlflow.MlflowClient().get_metric_history(run.info.run_id, names.SYSTEM_GPU_POWER_W)
    assert len(power) >= 2 and all(m.value > 0 for m in power)
    assert run.data.metrics[names.SYSTEM_GPU_MEMORY_USED_BYTES] > 0  # the job's tensors and context at least
    facts = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")[names.MANIFEST_MONITOR]
    assert facts["source"] == "nvml" and facts["version"].startswith("nvidia-ml-py")
