"""Phases, statistics, accuracy, memory and roofline on known inputs and on real CPU runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from runner.accuracy import check_accuracy
from runner.backends import CpuBackend
from runner.build import build_workload
from runner.config import ConfigError, load_run_spec
from runner.experiment import derived_metrics
from runner.measure import Measurement, measure
from runner.roofline import Peak, cpu_peak, datasheet_peak, resolve_peak, roofline_metrics
from runner.stats import coefficient_of_variation, describe_steps, percentile
from tests.conftest import compose_cfg
from workloads.rmsnorm import NaiveRMSNorm


def test_step_statistics_on_known_samples() -> None:
    samples = [float(v) for v in range(1, 11)]  # 1..10 ms
    stats = describe_steps(samples)
    assert stats["time/step_median_ms"] == 5.5
    assert stats["time/step_mean_ms"] == 5.5
    assert stats["time/step_min_ms"] == 1.0
    assert stats["time/step_p10_ms"] == pytest.approx(1.9)
    assert stats["time/step_p90_ms"] == pytest.approx(9.1)
    assert stats["time/step_iqr_ms"] == pytest.approx(7.75 - 3.25)
    assert stats["time/step_cv"] == pytest.approx(statistics.stdev(samples) / 5.5)
    assert percentile([3.0], 90) == 3.0 and coefficient_of_variation([2.0]) == 0.0


def test_roofline_arithmetic() -> None:
    peak = Peak(bandwidth_gbps=100.0, gflops=1000.0, source="test")
    metrics = roofline_metrics(bytes_moved=2_000_000, flops=4_000_000, step_ms=0.1, peak=peak)
    assert metrics["roofline/achieved_gbps"] == pytest.approx(20.0)
    assert metrics["roofline/achieved_gflops"] == pytest.approx(40.0)
    assert metrics["roofline/intensity"] == pytest.approx(2.0)
    assert metrics["roofline/bandwidth_fraction"] == pytest.approx(0.2)
    assert metrics["roofline/compute_fraction"] == pytest.approx(0.04)


def test_rmsnorm_cost_model_by_hand() -> None:
    module = NaiveRMSNorm(hidden=8, batch=2, seq_len=3)
    x = torch.zeros(2, 3, 8)
    assert module.bytes_moved(x) == 2 * 48 * 4 + 8 * 4  # read x, write out (fp32), read the weight
    assert module.flop_count(x) == 4 * 48 + 3 * 6


def test_datasheet_peaks_scale_with_cores_and_name_the_source() -> None:
    peak = datasheet_peak("trn2_core", 2, "bfloat16")
    assert peak.bandwidth_gbps == 1450 and peak.gflops == pytest.approx(333_500)
    assert peak.source == "datasheet: trn2_core x 2 (conf/peaks.yaml)"
    assert resolve_peak("h200_sxm", None, on_cpu=True, dtype="float32").gflops == 67_000
    with pytest.raises(ConfigError, match=r"measure\.peak='tpu' is not in conf/peaks\.yaml; choose one of: auto, trn1"):
        resolve_peak("tpu", None, on_cpu=True, dtype="float32")
    assert resolve_peak("auto", None, on_cpu=False, dtype="float32") is None


def test_cpu_calibration_is_measured_once_and_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cpu_peak("float32")
    assert first.bandwidth_gbps > 0 and first.gflops > 0 and first.source.startswith("measured:")
    assert (tmp_path / "runner" / "cpu_peaks.json").is_file()
    monkeypatch.setattr("runner.roofline.calibrate_cpu", lambda dtype: pytest.fail("calibrated twice"))
    assert cpu_peak("float32") == first


class WrongRMSNorm(NaiveRMSNorm):
    """Forgets the weight: the accuracy check must catch it and not raise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)


def test_accuracy_passes_and_fails_without_raising() -> None:
    x = torch.randn(2, 4, 16)
    good, wrong = NaiveRMSNorm(hidden=16), WrongRMSNorm(hidden=16)
    metrics, tags = check_accuracy(good, (x,), good(x), "float32")
    assert tags["accuracy.check"] == "pass" and metrics["accuracy/max_rel_err"] < 1e-6
    metrics, tags = check_accuracy(wrong, (x,), wrong(x), "float32")
    assert tags["accuracy.check"] == "fail" and metrics["accuracy/max_abs_err"] > 0.1
    assert check_accuracy(torch.nn.Identity(), (x,), x, "float32") == (
        {},
        {"accuracy.check": "skipped", "accuracy.detail": "the workload has no reference()"},
    )


def run_phases(tmp_path: Path, *overrides: str) -> tuple[Measurement, dict[str, float], dict[str, object]]:
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", *overrides))
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    result = measure(workload, backend, spec, tmp_path / "trace")
    peak = resolve_peak(spec.measure.peak, None, on_cpu=True, dtype=spec.workload.dtype)
    metrics, tags = derived_metrics(spec, workload, backend, result, peak)
    return result, metrics, tags


def test_every_phase_metric_is_logged_for_rmsnorm(tmp_path: Path) -> None:
    result, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=64")
    for key in (
        "time/first_call_s", "time/step_median_ms", "time/step_mean_ms", "time/step_min_ms", "time/step_p10_ms",
        "time/step_p90_ms", "time/step_iqr_ms", "time/step_cv", "profiler/overhead_pct", "compile/graphs",
        "memory/peak_host_rss_mb", "accuracy/max_abs_err", "accuracy/max_rel_err", "roofline/achieved_gbps",
        "roofline/achieved_gflops", "roofline/intensity", "roofline/bandwidth_fraction", "roofline/compute_fraction",
    ):  # fmt: skip
        assert key in metrics, key
    assert len(result.step_ms) == 1 and len(result.step_ms[0]) == 20
    assert metrics["time/step_min_ms"] <= metrics["time/step_median_ms"] <= metrics["time/step_p90_ms"]
    assert metrics["compile/graphs"] == 0
    assert "memory/peak_device_mb" not in metrics  # the CPU has no allocator statistic
    assert "time/repeat_cv" not in metrics
    assert tags["accuracy.check"] == "pass"
    assert 0 < metrics["roofline/bandwidth_fraction"] <= 1
    assert str(tags["roofline.peak"]).startswith("measured:")


def test_repeats_log_the_spread_of_medians(tmp_path: Path) -> None:
    result, metrics, _ = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.repeats=3")
    assert len(result.step_ms) == 3
    medians = [statistics.median(r) for r in result.step_ms]
    assert metrics["time/repeat_cv"] == pytest.approx(coefficient_of_variation(medians))


def test_repeat_cycles_give_per_op_samples(tmp_path: Path) -> None:
    result, _, _ = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "schedule=repeat")
    rsqrt = next(row for row in result.table.rows if row["name"] == "aten::rsqrt")
    samples = json.loads(rsqrt["cycle_self_ms"])
    assert len(samples) == 5 and all(s > 0 for s in samples)
    assert rsqrt["cycle_self_ms_mean"] == pytest.approx(statistics.fmean(samples), rel=1e-3)
    assert rsqrt["cycle_self_ms_std"] == pytest.approx(statistics.stdev(samples), rel=1e-2, abs=1e-5)
    # per-step samples over 5 cycles of 2 steps add back up to the row's total self time
    assert sum(samples) * 2 == pytest.approx(rsqrt["self_cpu_ms"], rel=1e-3)


def test_a_workload_without_cost_model_has_no_roofline(tmp_path: Path) -> None:
    _, metrics, tags = run_phases(
        tmp_path, "+workload=custom", "workload._target_=torch.nn.Identity", "workload.inputs=[[4,4]]"
    )
    assert not any(key.startswith("roofline/") for key in metrics)
    assert tags["roofline.peak"] == "none: the workload declares no bytes/FLOPs model"
    assert tags["accuracy.check"] == "skipped"


@pytest.mark.slow
def test_compiled_run_counts_its_graphs_and_passes_accuracy(tmp_path: Path) -> None:
    _, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_compiled", "workload.hidden=24", "workload.seq_len=3")
    assert metrics["compile/graphs"] >= 1
    assert tags["accuracy.check"] == "pass"


def test_train_step_profiles_backward_and_counts_its_flops(tmp_path: Path) -> None:
    overrides = ("+workload=decoder_layer", "workload.hidden=16", "workload.heads=2", "workload.intermediate=24",
                 "workload.seq_len=6")  # fmt: skip
    result, forward, _ = run_phases(tmp_path, *overrides)
    result_train, train, tags = run_phases(tmp_path / "train", *overrides, "workload.mode=train_step")
    names = {row["name"] for row in result_train.table.rows}
    assert any("backward" in name.lower() for name in names), sorted(names)
    assert not any("backward" in name.lower() for name in {row["name"] for row in result.table.rows})
    assert any(name.startswith("Optimizer.step") for name in names)
    assert train["roofline/flops"] == 3 * forward["roofline/flops"]  # the backward counts twice the forward
    assert tags["accuracy.check"] == "pass"
