"""Reading neuron-monitor's reports, /proc and NVML's figures into system series; choosing the sampler."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import OmegaConf

from runner import names
from runner.backends.base import Backend
from runner.backends.cuda import CudaBackend
from runner.backends.neuron import NeuronBackend
from runner.backends.neuron_monitor import config, figures, neuron_values
from runner.backends.nvml import gpu_values
from runner.config import ConfigError, MonitorConfig
from runner.execute.monitor import memory_used_bytes, plan_monitor
from runner.job import config_hash
from tests.helpers import compose_cfg

JOB, OTHER = 4242, 777


def runtime(pid: int, cores: list[str]) -> dict[str, Any]:
    """A Neuron application's entry as the neuron-monitor user guide shows it."""
    return {
        "pid": pid, "address": "", "neuron_runtime_tag": str(pid), "error": "",
        "report": {
            "neuroncore_counters": {
                "period": 1.0,
                "neuroncores_in_use": {
                    core: {"neuroncore_utilization": 40.0 + i, "flops": 1} for i, core in enumerate(cores)
                },
                "error": "",
            },
            "execution_stats": {
                "period": 1.0,
                "error_summary": {"generic": 0, "numerical": 2, "transient": 0, "model": 0, "runtime": 0,
                                  "hardware": 0},
                "execution_summary": {"completed": 123, "completed_with_err": 0, "completed_with_num_err": 2,
                                      "timed_out": 0, "incorrect_input": 0, "failed_to_queue": 0},
                "latency_stats": {
                    "total_latency": {"p0": 0.011, "p50": 0.012, "p100": 0.013},
                    "device_latency": {"p0": 0.010, "p50": 0.0105, "p100": 0.011},
                },
                "error": "",
            },
            "memory_used": {
                "period": 1.0,
                "neuron_runtime_used_bytes": {
                    "host": 6997643264, "neuron_device": 12519788544,
                    "usage_breakdown": {
                        "host": {"application_memory": 6996594688, "constants": 0, "dma_buffers": 1048576,
                                 "tensors": 0},
                        "neuroncore_memory_usage": {
                            core: {"constants": 193986816, "model_code": 176285056, "model_shared_scratchpad": 0,
                                   "runtime_memory": 0, "tensors": 20971520}
                            for core in cores
                        },
                    },
                },
                "loaded_models": [],
                "error": "",
            },
        },
    }  # fmt: skip


REPORT: dict[str, Any] = {
    "neuron_runtime_data": [runtime(JOB, ["0", "1"]), runtime(OTHER, ["2"])],
    "system_data": {
        "vcpu_usage": {
            "period": 1.0,
            "average_usage": {"user": 32.77, "nice": 0, "system": 22.87, "idle": 39.36, "io_wait": 5.0,
                              "irq": 0, "soft_irq": 0},
            "usage_data": {}, "context_switch_count": 123456, "error": "",
        },
        "memory_info": {"period": 5.3, "memory_total_bytes": 49345835008, "memory_used_bytes": 16042344448,
                        "swap_total_bytes": 0, "swap_used_bytes": 0, "error": ""},
    },
    "instance_info": {"instance_type": "trn2.48xlarge", "error": ""},
    "neuron_hardware_info": {"neuron_device_count": 16, "error": ""},
}  # fmt: skip


def test_a_report_gives_the_jobs_own_cores_memory_by_category_latency_errors_and_the_host() -> None:
    values, errors = neuron_values(REPORT, JOB)
    assert errors == []
    cores = {key: value for key, value in values.items() if key.endswith("utilization_pct")}
    assert cores == {"system/neuron/core0/utilization_pct": 40.0, "system/neuron/core1/utilization_pct": 41.0}
    assert values[names.SYSTEM_NEURON_DEVICE_BYTES] == 12519788544
    assert values[names.SYSTEM_NEURON_HOST_BYTES] == 6997643264
    assert values["system/neuron/memory/device_tensors_bytes"] == 2 * 20971520  # over the job's two cores
    assert values["system/neuron/memory/device_model_code_bytes"] == 2 * 176285056
    assert values["system/neuron/latency/device_p50_ms"] == pytest.approx(10.5)
    assert values["system/neuron/latency/total_p100_ms"] == pytest.approx(13.0)
    assert values["system/neuron/errors/numerical"] == 2
    assert values["system/neuron/executions/completed"] == 123
    assert values[names.SYSTEM_HOST_CPU_PCT] == pytest.approx(32.77 + 22.87)  # io_wait and idle are not busy
    assert values[names.SYSTEM_HOST_MEMORY_USED_BYTES] == 16042344448


def test_a_period_without_executions_has_no_latency_and_a_group_in_error_is_left_out() -> None:
    report = copy.deepcopy(REPORT)
    groups = report["neuron_runtime_data"][0]["report"]
    groups["execution_stats"]["latency_stats"] = {"total_latency": None, "device_latency": None}
    groups["memory_used"]["error"] = "failed to read memory usage"
    values, errors = neuron_values(report, JOB)
    assert not any("/latency/" in key or "/memory/" in key for key in values)
    assert values["system/neuron/errors/generic"] == 0
    assert errors == ["memory_used: failed to read memory usage"]


def test_a_report_without_the_jobs_runtime_has_the_host_only() -> None:
    values, _ = neuron_values(REPORT, 1)
    assert set(values) == {names.SYSTEM_HOST_CPU_PCT, names.SYSTEM_HOST_MEMORY_USED_BYTES}


def test_the_reader_keeps_a_reports_figures_skips_other_lines_and_says_when_a_report_is_not_documented() -> None:
    kept = figures(json.dumps(REPORT), JOB)
    assert kept is not None and (kept["values"], kept["errors"]) == neuron_values(REPORT, JOB)
    assert figures("neuron-monitor: warning: could not read the driver", JOB) is None
    by_pid = {**REPORT, "neuron_runtime_data": {str(JOB): REPORT["neuron_runtime_data"][0]}}  # not the array
    odd = figures(json.dumps(by_pid), JOB)
    assert odd is not None and odd["values"] == {}
    assert odd["errors"] == [
        "a report not in the documented format (AttributeError: 'str' object has no attribute 'get')"
    ]


def test_the_configuration_asks_for_the_groups_read_at_the_period() -> None:
    config_file = config(3)
    assert config_file["period"] == "3s"
    assert [m["type"] for m in config_file["neuron_runtimes"][0]["metrics"]] == [
        "neuroncore_counters", "memory_used", "execution_stats",
    ]  # fmt: skip
    assert [m["type"] for m in config_file["system_metrics"]] == ["vcpu_usage", "memory_info"]


def test_host_memory_in_use_is_total_less_available() -> None:
    meminfo = (
        "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\nHugePages_Total: 0\n"
    )
    assert memory_used_bytes(meminfo) == 10000000 * 1024


def test_nvml_figures_become_gpu_series_in_watts() -> None:
    assert gpu_values(87, 2.5e9, 312_500) == {
        names.SYSTEM_GPU_UTILIZATION_PCT: 87.0,
        names.SYSTEM_GPU_MEMORY_USED_BYTES: 2.5e9,
        names.SYSTEM_GPU_POWER_W: 312.5,
    }


def test_off_plans_nothing_and_a_period_under_a_second_is_refused() -> None:
    assert plan_monitor(MonitorConfig(), NeuronBackend) is None
    with pytest.raises(ConfigError, match=r"monitor\.period_s must be >= 1, got 0"):
        MonitorConfig(period_s=0)


def test_each_backend_plans_its_monitor_and_an_absent_one_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every_second = MonitorConfig(period_s=1)
    host = plan_monitor(every_second, Backend)
    assert host is not None and (host.source, host.missing) == ("host", "")
    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", str(tools))
    absent = plan_monitor(every_second, NeuronBackend)
    assert absent is not None and absent.source == "host"
    assert absent.missing == (
        "neuron-monitor is not installed (it comes with aws-neuronx-tools): only the host's CPU and memory are sampled"
    )
    (tools / "neuron-monitor").write_text("#!/bin/sh\n")
    (tools / "neuron-monitor").chmod(0o755)
    present = plan_monitor(every_second, NeuronBackend)
    assert present is not None and present.facts() == {
        "source": "neuron-monitor", "period_s": 1, "version": None, "missing": "",
    }  # fmt: skip


def test_without_nvidia_ml_py_a_gpu_job_samples_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    plan = plan_monitor(MonitorConfig(period_s=1), CudaBackend)
    assert plan is not None and plan.source == "host"
    assert "nvidia-ml-py is not installed: pip install nvidia-ml-py" in plan.missing
    assert "\n" not in plan.missing


def test_a_gpu_job_samples_its_gpu_through_nvml_where_nvml_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's sampler is NVML beside the host (no GPU here: a pynvml whose NVML starts stands in for the driver)."""
    started = SimpleNamespace(nvmlInit=lambda: None, nvmlSystemGetDriverVersion=lambda: "580.1", NVMLError=OSError)
    monkeypatch.setitem(sys.modules, "pynvml", started)
    plan = plan_monitor(MonitorConfig(period_s=1), CudaBackend)
    assert plan is not None and (plan.source, plan.missing) == ("nvml", "")
    assert plan.version is not None and plan.version.endswith("driver 580.1")


def test_the_monitor_leaves_the_config_hash_as_it_was_before_the_key_existed() -> None:
    resolved = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive"), resolve=True)
    monitored = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive", "monitor=every_second"), resolve=True)
    assert isinstance(resolved, dict) and isinstance(monitored, dict) and monitored["monitor"] == {"period_s": 1}
    older = {key: value for key, value in resolved.items() if key != "monitor"}
    assert config_hash(monitored) == config_hash(resolved) == config_hash(older)
