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
    # the device's: its two HBM stacks summed (3 + 1 MiB at the second sample), not one stack's 3 MiB
    assert metrics[names.NEURON_SYSTEM_HBM_PEAK_BYTES] == 4 << 20
    assert system(names.NEURON_SYSTEM_EVENTS, "framework") not in metrics  # it wrote none


def test_a_capture_without_runtime_has_no_system_metrics(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler=neuron_device", "profiler.modes=[DEVICE]")
    assert done.returncode == 0, done.stderr
    metrics = the_run(tracking_uri).data.metrics
    assert metrics[names.NEURON_PROFILES] > 0 and not [m for m in metrics if m.startswith("neuron/system_")]


def test_coverage_is_of_explorers_busy_time_and_the_lnc_is_cross_checked(tmp_path: Path, tracking_uri: str) -> None:
    # the ops' device time is all the device's busy time, half of its total_time (idle gaps)
    env = {"NEURON_STANDIN_DEVICE_TIME": "1", "NEURON_STANDIN_EXPLORER_ACTIVE": "0.5"}
    done = run_neuron(tmp_path, "backend=neuron", NEURON_RT_VIRTUAL_CORE_SIZE="1", **env)
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    metrics, tags = run.data.metrics, run.data.tags
    assert metrics[names.NEURON_TOTAL_ACTIVE_TIME_SUM] == pytest.approx(metrics[names.NEURON_TOTAL_TIME_SUM] / 2)
    assert metrics[names.NEURON_DEVICE_TIME_COVERAGE] == pytest.approx(1.0)
    assert tags[names.TAG_NEURON_DEVICE_TIME_COVERAGE].startswith("ok: ")
    # the stand-in's Trn2 runs at LNC 2 (its default), as Explorer's Metadata says; the variable says 1
    (line,) = [line for line in done.stdout.splitlines() if "LNC mismatch" in line]
    assert "NEURON_RT_VIRTUAL_CORE_SIZE=1 disagrees with the runner's LNC 2" in line
    assert (
        tags[names.TAG_NEURON_LNC_CHECK] == "warning: NEURON_RT_VIRTUAL_CORE_SIZE=1 disagrees with the runner's LNC 2"
    )


def test_explorers_physical_cores_disagreeing_with_the_lnc_warn(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", NEURON_STANDIN_EXPLORER_PHYSICAL_CORES="1")
    assert done.returncode == 0, done.stderr
    tag = the_run(tracking_uri).data.tags[names.TAG_NEURON_LNC_CHECK]
    assert tag == "warning: Explorer's Metadata.num_physical_cores=1 disagrees with the runner's LNC 2"
    assert any("LNC mismatch: Explorer's Metadata.num_physical_cores=1" in line for line in done.stdout.splitlines())
