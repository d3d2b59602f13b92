"""Explorer's system-profile tables read into a Neuron run's metrics, against the stand-in's Explorer."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import names
from tests.system.test_neuron_backend import run_neuron, the_run

pytestmark = pytest.mark.slow


def system(name: str, source: str) -> str:
    return name.format(source=source)


def test_a_runtime_capture_logs_each_sources_events_and_time_and_the_hbm_peak(
    tmp_path: Path, tracking_uri: str
) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler=neuron_device")  # modes DEVICE and RUNTIME
    assert done.returncode == 0, done.stderr
    metrics = the_run(tracking_uri).data.metrics
    profiles, device_ms = metrics[names.NEURON_PROFILES], metrics[names.NEURON_TOTAL_TIME_SUM] * 1e3
    # the stand-in's Explorer: per profile one runtime execute 2 us longer than the device's execution
    assert metrics[system(names.NEURON_SYSTEM_EVENTS, "neuron_hw")] == profiles > 0
    assert metrics[system(names.NEURON_SYSTEM_EVENTS, "neuron_rt")] == profiles
    assert metrics[system(names.NEURON_SYSTEM_MS, "neuron_hw")] == pytest.approx(device_ms, rel=1e-6)
    assert metrics[system(names.NEURON_SYSTEM_MS, "neuron_rt")] == pytest.approx(device_ms + 0.002 * profiles, rel=1e-6)
    assert metrics[names.NEURON_SYSTEM_HBM_PEAK_BYTES] == 3 << 20  # the highest of its three samples, not the last
    assert system(names.NEURON_SYSTEM_EVENTS, "framework") not in metrics  # it wrote none


def test_a_capture_without_runtime_has_no_system_metrics(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler=neuron_device", "profiler.modes=[DEVICE]")
    assert done.returncode == 0, done.stderr
    metrics = the_run(tracking_uri).data.metrics
    assert metrics[names.NEURON_PROFILES] > 0 and not [m for m in metrics if m.startswith("neuron/system_")]
