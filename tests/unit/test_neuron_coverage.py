"""Device-time coverage: key_averages()'s device time against Explorer's, and what a low one says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from runner import names
from runner.backends import neuron
from runner.backends.neuron import NeuronBackend
from runner.backends.neuron_coverage import device_time_coverage, driver_events
from runner.config import NeuronBackendConfig, ProfilerConfig
from runner.measure.optable import footer_device_us
from tests.helpers import STANDIN_PATH

TAG = names.TAG_NEURON_DEVICE_TIME_COVERAGE


def test_full_coverage_is_ok_and_logged_as_a_fraction() -> None:
    coverage = device_time_coverage(2.94, 0.003, drivers=10, explorer="neuron-explorer: ok")
    assert coverage.metrics == pytest.approx(
        {names.NEURON_FRAMEWORK_DEVICE_MS: 2.94, names.NEURON_DEVICE_TIME_COVERAGE: 0.98}
    )
    assert coverage.tags[TAG] == (
        "ok: key_averages() has 2.940 ms of the 3.000 ms of device time in neuron-explorer's total_time, "
        "idle gaps included (98%)"
    )
    assert coverage.warnings == []


@pytest.mark.parametrize(
    ("framework_ms", "drivers", "missing"),
    [
        pytest.param(1.5, 10, "missing 1.500 ms, device work that no op of the profile accounts for", id="partial"),
        pytest.param(0.0, 7, "missing 3.000 ms, all of it: the profiler got 7 privateuse1_driver events, which "
                     "Kineto defines as host-side launch events (pytorch issue 166205), so their time is in the CPU "
                     "columns and no device event came back", id="host-side-driver-events"),
        pytest.param(0.0, 0, "missing 3.000 ms, all of it: torch-neuronx fed no device activity back to the profiler",
                     id="nothing-fed-back"),
    ],
)  # fmt: skip
def test_low_coverage_warns_naming_what_is_missing(framework_ms: float, drivers: int, missing: str) -> None:
    coverage = device_time_coverage(framework_ms, 0.003, drivers, "neuron-explorer: ok")
    (warning,) = coverage.warnings
    assert warning.startswith("device time below 95% covered: key_averages() has ") and missing in warning
    assert coverage.tags[TAG].startswith("warning: ") and missing in coverage.tags[TAG]
    assert coverage.metrics[names.NEURON_DEVICE_TIME_COVERAGE] == pytest.approx(framework_ms / 3.0)


def test_without_explorers_total_coverage_is_unknown_not_zero() -> None:
    coverage = device_time_coverage(0.5, None, 0, "not on PATH (install aws-neuronx-tools)")
    assert names.NEURON_DEVICE_TIME_COVERAGE not in coverage.metrics and coverage.warnings == []
    assert coverage.tags[TAG] == (
        "unknown: neuron-explorer gave no on-device total_time (not on PATH (install aws-neuronx-tools))"
    )


def test_driver_events_are_counted_in_every_framework_trace(tmp_path: Path) -> None:
    session = tmp_path / "i-0_pid_1" / "20261202_000000_000"
    session.mkdir(parents=True)
    events = [{"ph": "X", "cat": "privateuse1_driver", "name": "neff_mul"}, {"ph": "X", "cat": "cpu_op", "name": "x"}]
    (session / "trace.json").write_text(json.dumps({"traceEvents": events * 2}))
    (session / "other.json").write_text("{}")  # JSON that is no Chrome trace
    assert driver_events(tmp_path) == 2 and driver_events(tmp_path / "absent") == 0


def event(name: str, device_type: DeviceType, start: float, end: float) -> FunctionEvent:
    return FunctionEvent(
        id=0, name=name, thread=0, start_us=start, end_us=end, use_device="neuron", device_type=device_type, stack=[]
    )


def test_device_time_is_summed_as_the_profilers_footer_sums_it() -> None:
    # an op and the device event it launched both carry the event's 5 us: summing every row says 10
    op = event("aten::mul", DeviceType.CPU, 0, 20)
    op.append_kernel("neff_mul", 0, 5.0)
    events = EventList([op, event("neff_mul", DeviceType.PrivateUse1, 1, 6)], use_device="neuron")
    events._build_tree()  # the profiler builds it before handing the list out
    averages = events.key_averages()
    assert sum(e.self_device_time_total for e in averages) == 10
    assert footer_device_us(averages) == 5


def test_coverage_is_of_every_profiles_device_time_not_the_largest_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eager mode makes a profile per NEFF: the stand-in's Explorer gives 2 ms and 1 ms; the op table has all 3 ms."""
    session = tmp_path / "cap" / "i-0abc_pid_42" / "20261129_120000_000"
    session.mkdir(parents=True)
    for name in ("ntrace.pb", "trace_info.pb", "neff_1_vnc_0.neff", "neff_2_vnc_0.neff", "profile_nc_0_session_0.ntff"):
        (session / name).write_bytes(b"x")
    (session / "trace.json").write_text("{}")
    monkeypatch.setenv("PATH", f"{STANDIN_PATH}:/usr/bin:/bin")  # the stand-in's neuron-explorer
    monkeypatch.setattr(neuron, "note_cpu_fallbacks", lambda report: None)  # it asks torch-neuronx, not here
    backend = NeuronBackend.__new__(NeuronBackend)  # no torch-neuronx in this process: skip __init__
    backend.config, backend.cores, backend.correlate_status = NeuronBackendConfig(cores="0"), [0], "unset"
    report = backend.inspect_capture(tmp_path / "cap", ProfilerConfig(), "", framework_device_ms=3.0)
    assert report.metrics[f"{names.NEURON_SUMMARY_PREFIX}total_time"] == pytest.approx(0.002)  # the larger profile
    assert report.metrics[names.NEURON_DEVICE_TIME_COVERAGE] == pytest.approx(1.0)
    assert report.tags[TAG].startswith("ok: key_averages() has 3.000 ms of the 3.000 ms of device time")


def test_busy_time_is_the_denominator_where_explorer_gives_it() -> None:
    # 3 ms of ops on a device busy 3 ms of a 6 ms total_time: all of its busy time is covered
    coverage = device_time_coverage(3.0, 0.006, 0, "neuron-explorer: ok", busy_s=0.003)
    assert coverage.metrics[names.NEURON_DEVICE_TIME_COVERAGE] == pytest.approx(1.0) and coverage.warnings == []
    assert coverage.tags[TAG] == (
        "ok: key_averages() has 3.000 ms of the 3.000 ms of device time busy in neuron-explorer's "
        "total_active_time (100%)"
    )
