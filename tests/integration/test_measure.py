"""Phases, statistics, accuracy, memory and roofline on known inputs and on real CPU runs."""

from __future__ import annotations

import ctypes
import itertools
import json
import logging
import math
import os
import re
import signal
import statistics
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from runner import names
from runner.backends.base import Backend, CaptureReport
from runner.backends.cpu import CpuBackend
from runner.backends.neuron import NeuronBackend
from runner.backends.peaks import Peak, cpu_peak, datasheet_peak, keep_best_calibration
from runner.config import BackendConfig, ConfigError, RunSpec, ScheduleConfig
from runner.config_loading import load_run_spec
from runner.doctor.host import host_rows
from runner.execute import workers
from runner.execute.in_process import steady_state_source
from runner.execute.processes import Child, ChildFailed, StartMethod
from runner.execute.workers import WORKER_START_ENV, start_steady_state, steady_state_in_processes, steps
from runner.measure import loop
from runner.measure.accuracy import check_accuracy
from runner.measure.build import build_workload
from runner.measure.collect import collect_result
from runner.measure.host_memory import KEEP_FREED_MEMORY_ENV, is_glibc
from runner.measure.loop import (
    FEWEST_STEPS_A_STRETCH,
    FEWEST_TIMED_STEPS,
    LAYOUTS_ENV,
    MOST_SETTLE_CALLS,
    SETTLE_CALLS,
    WARM_CALLS,
    layouts_count,
    steady_state,
)
from runner.measure.measurement import Measurement
from runner.measure.optable import OpTable
from runner.measure.phases import measure
from runner.measure.profiling import CycleRecorder, build_profiler
from runner.measure.result import JobResult, judge_timing, rounds_table, wall_breakdown
from runner.measure.roofline import resolve_peak, roofline_metrics
from runner.measure.stability import Spread, between_runs
from runner.measure.stats import coefficient_of_variation, describe_steps
from runner.measure.turns import RefereedTurns, TurnsAddress, give_turns, referee
from runner.measure.window import judge_window
from tests.helpers import compose_cfg
from tests.helpers.counting import RecordingModule
from workloads.rmsnorm import NaiveRMSNorm


def test_step_statistics_on_known_samples() -> None:
    samples = [float(v) for v in range(1, 11)]  # 1..10 ms
    stats = describe_steps(samples)
    assert stats[names.STEP_MEDIAN_MS] == 5.5
    assert stats[names.STEP_MEAN_MS] == 5.5
    assert stats[names.STEP_MIN_MS] == 1.0
    assert stats[names.STEP_P10_MS] == pytest.approx(1.9)
    assert stats[names.STEP_P90_MS] == pytest.approx(9.1)
    assert stats[names.STEP_IQR_MS] == pytest.approx(7.75 - 3.25)
    assert stats[names.STEP_CV] == pytest.approx(statistics.stdev(samples) / 5.5)
    single = describe_steps([3.0])
    assert single[names.STEP_P90_MS] == 3.0 and single[names.STEP_IQR_MS] == 0.0
    assert coefficient_of_variation([2.0]) == 0.0


def test_roofline_arithmetic() -> None:
    peak = Peak(bandwidth_gbps=100.0, gflops=1000.0, source="test")
    metrics = roofline_metrics(bytes_moved=2_000_000, flops=4_000_000, step_ms=0.1, peak=peak)
    assert metrics[names.ROOFLINE_ACHIEVED_GBPS] == pytest.approx(20.0)
    assert metrics[names.ROOFLINE_ACHIEVED_GFLOPS] == pytest.approx(40.0)
    assert metrics[names.ROOFLINE_INTENSITY] == pytest.approx(2.0)
    assert metrics[names.ROOFLINE_BANDWIDTH_FRACTION] == pytest.approx(0.2)
    assert metrics[names.ROOFLINE_COMPUTE_FRACTION] == pytest.approx(0.04)


def test_rmsnorm_cost_model_by_hand() -> None:
    module = NaiveRMSNorm(hidden=8, batch=2, seq_len=3)
    x = torch.zeros(2, 3, 8)
    assert module.bytes_moved(x) == 2 * 48 * 4 + 8 * 4  # read x, write out (fp32), read the weight
    assert module.flop_count(x) == 4 * 48 + 3 * 6


def test_datasheet_peaks_scale_with_cores_and_name_the_source() -> None:
    peak = datasheet_peak("trn2_core", 2, "bfloat16")
    assert peak.bandwidth_gbps == 1450 and peak.gflops == pytest.approx(333_500)
    lnc = "4 logical cores per chip at LNC 2, the documented trn2 default"  # with NEURON_LOGICAL_NC_CONFIG unset
    assert peak.source == f"datasheet: trn2_core x 2 (conf/peaks.yaml; {lnc})"
    # the chip's NeuronLink, whatever share of its cores a job holds; no core-to-core figure is documented
    assert peak.links_gbps == {"chip_to_chip": 1280} and peak.cores_per_chip == 4
    assert datasheet_peak("trn1_core", 1, "bfloat16").links_gbps == {}  # no figure in the docs
    cpu = CpuBackend(BackendConfig(name="cpu"))
    assert resolve_peak("h200_sxm", cpu, dtype="float32").gflops == 67_000
    with pytest.raises(ConfigError, match=r"measure\.peak='tpu' is not in conf/peaks\.yaml; choose one of: auto, trn1"):
        resolve_peak("tpu", cpu, dtype="float32")
    assert resolve_peak("auto", cpu, dtype="float32").source.startswith("measured:")


def test_cpu_calibration_is_measured_once_and_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cpu_peak("float32")
    assert first.bandwidth_gbps > 0 and first.gflops > 0 and first.source.startswith("measured:")
    assert (tmp_path / "runner" / "cpu_peaks.json").is_file()
    monkeypatch.setattr("runner.backends.peaks.calibrate_cpu", lambda dtype: pytest.fail("calibrated twice"))
    assert cpu_peak("float32") == first
    # a later, better measurement (the first was taken on a busy host) raises the cache; a worse one does not
    keep_best_calibration("float32", first.bandwidth_gbps * 2, first.gflops / 2)
    assert (cpu_peak("float32").bandwidth_gbps, cpu_peak("float32").gflops) == (first.bandwidth_gbps * 2, first.gflops)


def test_a_half_written_calibration_cache_is_measured_again_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # what a rank read while another rank was writing the cache, before writes went through a rename
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "runner" / "cpu_peaks.json"
    cache.parent.mkdir(parents=True)
    cache.write_text('{"half')
    monkeypatch.setattr("runner.backends.peaks.calibrate_cpu", lambda dtype: (10.0, 20.0))
    peak = cpu_peak("float32")
    assert (peak.bandwidth_gbps, peak.gflops) == (10.0, 20.0)
    assert list(json.loads(cache.read_text()).values()) == [[10.0, 20.0]]
    assert [p.name for p in cache.parent.iterdir()] == ["cpu_peaks.json"]  # no draft left beside it


def test_the_doctor_measures_again_every_thread_count_the_cache_holds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "runner" / "cpu_peaks.json"
    torch.set_num_threads(1)  # a job's one-thread workers read the one-thread entries: taken on a busy host, low
    for dtype in ("float32", "bfloat16"):
        keep_best_calibration(dtype, 1.0, 1.0)
    low = cpu_peak("float32")
    assert low.source == f"measured: best copy bandwidth and float32 matmul on this machine, 1 thread ({cache})"
    torch.set_num_threads(3)  # a parallel launcher's slot of 3 cores
    keep_best_calibration("float32", 1.0, 1.0)
    elsewhere = {"10|x86_64|threads=1|float32": [1.0, 1.0]}  # host 10, in a shared home: not this host's to measure
    cache.write_text(json.dumps({**json.loads(cache.read_text()), **elsewhere}))

    # what the host measures now, by the thread count it is measured at
    def calibrate(dtype: str) -> tuple[float, float]:
        return 10.0 * torch.get_num_threads(), 50.0

    for module in ("runner.backends.peaks", "runner.doctor.host"):
        monkeypatch.setattr(f"{module}.calibrate_cpu", calibrate)
    torch.set_num_threads(2)  # the doctor's process: torch's default on a 2-core host
    rows = dict(host_rows("cpu", "sqlite:///mlflow.db"))
    assert torch.get_num_threads() == 2  # the doctor's own, back after it measured each entry at its own
    calibrations = {item: line for item, line in rows.items() if item.startswith("cpu calibration")}
    assert list(calibrations) == [
        "cpu calibration, 1 thread, bfloat16",
        "cpu calibration, 1 thread, float32",
        "cpu calibration, 2 threads, float32",
        "cpu calibration, 3 threads, float32",
    ]
    assert calibrations["cpu calibration, 1 thread, float32"] == (
        "cached 1.0 GB/s copy, 1.0 GFLOP/s float32 matmul; now 10.0 GB/s, 50.0 GFLOP/s; "
        "the cache read low (measured on a busy host?) and now keeps the better figures"
    )
    # the doctor's own thread count had no entry: measured once, not called "cached"
    assert calibrations["cpu calibration, 2 threads, float32"] == (
        "measured now 20.0 GB/s copy, 50.0 GFLOP/s float32 matmul (none was cached)"
    )
    figures = json.loads(cache.read_text())
    assert sorted(figures.values()) == [[1.0, 1.0], [10.0, 50.0], [10.0, 50.0], [20.0, 50.0], [30.0, 50.0]]
    assert figures["10|x86_64|threads=1|float32"] == [1.0, 1.0]


class WrongRMSNorm(NaiveRMSNorm):
    """Forgets the weight: the accuracy check must catch it and not raise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)


def test_accuracy_passes_and_fails_without_raising() -> None:
    x = torch.randn(2, 4, 16)
    good, wrong = NaiveRMSNorm(hidden=16), WrongRMSNorm(hidden=16)
    metrics, tags = check_accuracy(good, (x,), good(x), "float32")
    assert tags[names.TAG_ACCURACY] == "pass" and metrics[names.ACCURACY_MAX_REL_ERR] < 1e-6
    metrics, tags = check_accuracy(wrong, (x,), wrong(x), "float32")
    assert tags[names.TAG_ACCURACY] == "fail" and metrics[names.ACCURACY_MAX_ABS_ERR] > 0.1
    assert check_accuracy(torch.nn.Identity(), (x,), x, "float32") == (
        {},
        {names.TAG_ACCURACY: "skipped", names.TAG_ACCURACY_DETAIL: "the workload has no reference()"},
    )


def run_phases(
    tmp_path: Path, *overrides: str, backend_class: type[Backend] = CpuBackend
) -> tuple[Measurement, dict[str, float], dict[str, object]]:
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", *overrides))
    backend = backend_class(spec.backend)
    workload = build_workload(spec.workload, backend)
    result = measure(
        workload, backend, spec, tmp_path / "trace", steady_state_source(spec, backend, workload), tmp_path / "memory"
    )
    peak = resolve_peak(spec.measure.peak, backend, dtype=spec.workload.dtype)
    collected = collect_result(spec, workload, backend, result, peak, CaptureReport(), tmp_path / "trace")
    return result, collected.metrics, collected.tags


def test_every_phase_metric_is_logged_for_rmsnorm(tmp_path: Path) -> None:
    result, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=64")
    for key in (
        names.FIRST_CALL_S, names.STEP_MEDIAN_MS, names.STEP_MEAN_MS, names.STEP_MIN_MS, names.STEP_P10_MS,
        names.STEP_P90_MS, names.STEP_IQR_MS, names.STEP_CV, names.PROFILER_OVERHEAD_PCT, names.COMPILE_GRAPHS,
        names.PEAK_HOST_RSS_MB, names.ACCURACY_MAX_ABS_ERR, names.ACCURACY_MAX_REL_ERR, names.ROOFLINE_ACHIEVED_GBPS,
        names.ROOFLINE_ACHIEVED_GFLOPS, names.ROOFLINE_INTENSITY, names.ROOFLINE_BANDWIDTH_FRACTION,
        names.ROOFLINE_COMPUTE_FRACTION,
    ):  # fmt: skip
        assert key in metrics, key
    (process,) = result.steady.step_ms
    assert len(process) == 1 and len(process[0]) == 20
    assert metrics[names.STEP_MIN_MS] <= metrics[names.STEP_MEDIAN_MS] <= metrics[names.STEP_P90_MS]
    assert metrics[names.COMPILE_GRAPHS] == 0
    assert names.PEAK_DEVICE_MB not in metrics  # the CPU has no allocator statistic
    assert names.REPEAT_CV not in metrics
    assert tags[names.TAG_ACCURACY] == "pass"
    # a cache-resident tiny shape can beat a DRAM calibration (and a busy host lowers it): no upper bound
    achieved, peak = metrics[names.ROOFLINE_ACHIEVED_GBPS], metrics[names.ROOFLINE_PEAK_GBPS]
    assert metrics[names.ROOFLINE_BANDWIDTH_FRACTION] == pytest.approx(achieved / peak) and achieved > 0
    assert str(tags[names.TAG_ROOFLINE_PEAK]).startswith("measured:")


def test_a_run_carries_the_profilers_cost_in_ms_and_whether_its_window_read_the_steady_state(tmp_path: Path) -> None:
    result, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "workload.seq_len=4")
    cost = result.profiler_cost
    assert cost is not None and cost.first_ms > 0  # the profiler's start lands on the first recorded step
    assert metrics[names.PROFILER_COST_MS] == cost.first_ms  # the default schedule records one step
    median = metrics[names.STEP_MEDIAN_MS]
    quick_steps = 20  # measure=quick
    reason = judge_window(result.profiled_ms, cost, ScheduleConfig(), result.samples(), median, quick_steps)
    assert tags[names.TAG_WINDOW_REPRESENTATIVE] == ("false" if reason else "true")
    assert tags[names.TAG_WINDOW_REASON] == reason


def test_repeats_log_the_spread_of_medians(tmp_path: Path) -> None:
    result, metrics, _ = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.repeats=3")
    (repeats,) = result.steady.step_ms
    assert len(repeats) == 3
    medians = [statistics.median(r) for r in repeats]
    assert metrics[names.REPEAT_CV] == pytest.approx(coefficient_of_variation(medians))


def test_worker_processes_each_time_the_steady_state(tmp_path: Path) -> None:
    result, metrics, tags = run_phases(
        tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.processes=2", "measure.repeats=2"
    )
    assert len(result.steady.step_ms) == 2 and all(len(p) == 2 and len(p[0]) == 20 for p in result.steady.step_ms)
    medians = result.process_medians()
    assert metrics[names.STEP_MEDIAN_MS] == pytest.approx(statistics.median(medians))
    assert metrics[names.PROCESS_CV] == pytest.approx(coefficient_of_variation(medians))
    assert tags[names.TAG_TIMING_STABLE] in ("true", "false")
    # a single run is a sweep of one: each worker is a round of its own, under an id no other run has
    assert [(p.round, p.position, p.workers) for p in result.steady.places] == [(1, 1, 1), (2, 1, 1)]
    assert result.steady.rounds_id and len(result.steady.rounds_id) == 32
    assert rounds_table(result) == {"round": [1, 2], "position": [1, 1], "workers": [1, 1], "median_ms": medians}


def recording_spec(*overrides: str) -> RunSpec:
    """A job of `RecordingModule` on the CPU, timed in its own process."""
    return load_run_spec(
        compose_cfg(
            "backend=cpu", "tracking=off", "measure=quick", "+workload=custom", "workload.inputs=[[4,4]]",
            "workload._target_=tests.helpers.counting.RecordingModule", *overrides,
        )
    )  # fmt: skip


def recorded_steady_state(*overrides: str) -> tuple[RunSpec, list[list[float]]]:
    """The steady state of `RecordingModule` in this process, its calls recorded from the warm-up on."""
    spec = recording_spec(*overrides)
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    RecordingModule.seen = []
    return spec, steady_state(workload, backend, spec)


def test_the_inputs_move_to_new_memory_between_stretches_and_keep_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAYOUTS_ENV, "4")
    spec, samples = recorded_steady_state("measure.warmup=0", "measure.steps=12")
    assert [len(repeat) for repeat in samples] == [12]
    settling = len(RecordingModule.seen) - WARM_CALLS - 12  # the warm calls and the settling calls go untimed
    assert SETTLE_CALLS * 3 <= settling <= MOST_SETTLE_CALLS * 3
    addresses = [address for address, _ in RecordingModule.seen]
    stretches = [address for i, address in enumerate(addresses) if i == 0 or address != addresses[i - 1]]
    assert len(stretches) == 4  # each stretch reads its inputs from new memory
    assert len({total for _, total in RecordingModule.seen}) == 1  # and the same values
    # by default every CPU process moves it, alone or taking turns: the fork server's layout is no one's
    monkeypatch.delenv(LAYOUTS_ENV)
    recorded_steady_state("measure.warmup=0", "measure.steps=16")
    addresses = [address for address, _ in RecordingModule.seen]
    moves = sum(address != before for before, address in zip(addresses, addresses[1:], strict=False))
    assert moves + 1 == CpuBackend.traits.default_layouts == 8


@pytest.mark.parametrize("knob", ["0", "-1", "two", ""])
def test_a_layouts_knob_that_is_no_count_is_refused_in_one_line(knob: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert layouts_count(8) == 8
    monkeypatch.setenv(LAYOUTS_ENV, "3")
    assert layouts_count(8) == 3
    monkeypatch.setenv(LAYOUTS_ENV, knob)
    with pytest.raises(ConfigError, match=rf"^RUNNER_LAYOUTS='{knob}' is not allowed; give a whole number >= 1, or "):
        layouts_count(8)


def test_workers_taking_turns_run_their_warm_ups_and_stretches_one_at_a_time() -> None:
    spec = recording_spec("measure.warmup=1", "measure.steps=16")  # the CPU's default layouts: 8
    backend = CpuBackend(spec.backend)
    shapes = {"a": "[[4,4]]", "b": "[[2,2]]"}  # the inputs' sums tell the workers apart
    workloads = {
        name: build_workload(recording_spec(f"workload.inputs={shape}").workload, backend)
        for name, shape in shapes.items()
    }
    RecordingModule.seen = []

    def worker(name: str, path: str) -> None:
        turns = RefereedTurns(TurnsAddress(path, name))
        steady_state(workloads[name], backend, spec, turns)
        turns.finish()

    with referee() as (path, listener):
        threads = [threading.Thread(target=worker, args=(name, path)) for name in shapes]
        for thread in threads:
            thread.start()
        give_turns(listener, ["a", "b"])
        for thread in threads:
            thread.join(timeout=30)
    owners = {float(workloads[name].inputs[0].sum()): name for name in shapes}
    calls = [owners[total] for _, total in RecordingModule.seen]
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls)]
    assert [name for name, _ in runs] == ["a", "b"] * 9  # a turn each: the warm-up, then 8 stretches
    # the warm-up's call and its warm calls, then 8 stretches of 2 steps, each after another's turn: settled first
    assert [count for _, count in runs[:2]] == [1 + WARM_CALLS] * 2
    assert all(SETTLE_CALLS + 2 <= count <= MOST_SETTLE_CALLS + 2 for _, count in runs[2:])


def test_long_steps_are_timed_for_measure_steps_s_and_no_fewer_than_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    warm_up, calls_s = loop.warm_up, list[float]()

    def timed_warm_up(*args: Any) -> float:
        """The warm-up's seconds a call, which the budget is filled with: a busy host's are longer, and so fewer."""
        calls_s.append(warm_up(*args))
        return calls_s[-1]

    monkeypatch.setattr(loop, "warm_up", timed_warm_up)
    monkeypatch.setenv(LAYOUTS_ENV, "1")
    pause = ["measure.warmup=2", "+workload.pause_s=0.004"]
    _, floor = recorded_steady_state(*pause, "measure.steps=200", "measure.steps_s=0.01")
    assert [len(repeat) for repeat in floor] == [FEWEST_TIMED_STEPS]  # 0.01 s fits 2 steps of 4 ms, or fewer
    monkeypatch.setenv(LAYOUTS_ENV, "8")  # and no fewer a stretch of memory than its own floor
    _, stretches = recorded_steady_state(*pause, "measure.steps=200", "measure.steps_s=0.01")
    assert [len(repeat) for repeat in stretches] == [FEWEST_STEPS_A_STRETCH * 8] and FEWEST_STEPS_A_STRETCH * 8 > 30
    monkeypatch.setenv(LAYOUTS_ENV, "1")
    # 0.4 s of the calls the warm-up timed (4 ms or more each: 100 at most), and never under the floor
    _, budget = recorded_steady_state(*pause, "measure.steps=200", "measure.steps_s=0.4")
    assert calls_s[-1] >= 0.004 and len(budget[0]) == max(FEWEST_TIMED_STEPS, math.ceil(0.4 / calls_s[-1])) <= 100
    _, every = recorded_steady_state(*pause, "measure.steps=40", "measure.steps_s=null")
    assert [len(repeat) for repeat in every] == [40]


def test_a_capped_steady_state_and_a_long_warm_up_say_so_on_the_console(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "PROGRESS_EVERY_S", 3600.0)  # only a phase's last step is reported
    caplog.set_level(logging.INFO)
    monkeypatch.setenv(LAYOUTS_ENV, "1")
    run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.warmup=3",
               "measure.steps=5000", "measure.steps_s=0.001")  # fmt: skip
    assert "warm-up: step 3/3" in caplog.text
    capped = r"measure.steps=5000 asked, (\d+) timed per process: measure.steps_s=0.001 caps"
    assert len(re.findall(capped, caplog.text)) == 1
    caplog.clear()
    monkeypatch.delenv(LAYOUTS_ENV)
    run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.steps=40", "measure.steps_s=null")
    assert "asked" not in caplog.text


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("raise", r"worker 1 raised: RuntimeError: injected failure\n(.|\n)*RuntimeError: injected failure"),
        ("kill", r"worker 1 died \(exit code -9\)"),
    ],
)
def test_a_failing_worker_fails_the_job_with_its_reason(fault: str, message: str) -> None:
    spec = load_run_spec(compose_cfg(
        "backend=cpu", "tracking=off", "measure=quick",
        "+workload=custom", "workload._target_=tests.helpers.faulty.Faulty",
        f"+workload.fault={fault}", "workload.inputs=[[4]]",
    ))  # fmt: skip
    with pytest.raises(ChildFailed, match=message):
        steady_state_in_processes(spec, 1)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_ctrl_c_while_a_worker_starts_leaves_it_running(method: StartMethod, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_START_ENV, "spawn" if method == "spawn" else "auto")
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", "+workload=rmsnorm_naive"))
    worker = start_steady_state(spec, "steady-state worker 1", 1)
    os.kill(worker.pid, signal.SIGINT)  # what a Ctrl-C to the process group does while it starts
    samples = steps(worker)
    assert len(samples) == 1 and len(samples[0]) == spec.measure.steps


class MallocInfo(ctypes.Structure):
    """glibc's struct mallinfo2."""

    _fields_ = [(field, ctypes.c_size_t) for field in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


def threads_and_mapped_blocks(spec: RunSpec, set_first: bool) -> tuple[int, int]:
    """torch's thread count, and how many mmapped blocks a 24 MiB allocation adds (0: from the heap)."""
    if set_first:
        workers._set_what_start_reads(spec)
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallocInfo
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblks
    block = libc.malloc(24 * 2**20)
    mapped = libc.mallinfo2().hblks - before
    libc.free(block)
    return torch.get_num_threads(), mapped


@pytest.mark.skipif(not is_glibc(), reason="the allocator's mode is glibc's")
def test_a_forked_worker_runs_on_its_own_threads_and_allocator_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", "+workload=rmsnorm_naive"))
    threads = (os.cpu_count() or 1) + 1  # not what the fork server read when it started
    env = {"OMP_NUM_THREADS": str(threads)}
    seen = {}
    for set_first in (False, True):
        with Child("worker", threads_and_mapped_blocks, spec, set_first, env=env, start_method="forkserver") as child:
            seen[set_first] = child.result()
    assert seen[False][0] != threads and seen[False][1] == 1  # the server's: as it started, without the job's
    assert seen[True] == (threads, 0)  # the worker's own, once it sets them
    glibc_modes = {**env, KEEP_FREED_MEMORY_ENV: "0"}  # the benchmarks' knob: glibc's own modes
    with Child("worker", threads_and_mapped_blocks, spec, True, env=glibc_modes, start_method="forkserver") as child:
        assert child.result() == (threads, 1)


def neuron_backend() -> NeuronBackend:
    """A NeuronBackend without a device: the rule on worker processes needs none."""
    return NeuronBackend.__new__(NeuronBackend)


@pytest.mark.parametrize(
    ("backend", "overrides", "advised"),
    [
        pytest.param(CpuBackend(BackendConfig(name="cpu")), [], "measure.processes=5", id="cpu"),
        pytest.param(CpuBackend(BackendConfig(name="cpu")), ["measure.processes=5"], "measure.processes=10", id="more"),
        pytest.param(CpuBackend(BackendConfig(name="cpu")), ["distributed.ranks=2"], "measure.repeats=5", id="ranks"),
        pytest.param(CpuBackend(BackendConfig(name="cpu")), ["measure.copies=2"], "measure.repeats=5", id="copies"),
        pytest.param(neuron_backend(), [], "measure.repeats=5", id="neuron"),
        pytest.param(neuron_backend(), ["measure.repeats=4"], "measure.repeats=8", id="neuron-more"),
        pytest.param(neuron_backend(), ["distributed.ranks=2"], "measure.repeats=5", id="neuron-ranks"),
    ],
)
def test_instability_advice_is_what_the_runner_accepts(backend: Backend, overrides: list[str], advised: str) -> None:
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", *overrides))
    advice = backend.steadier_measurement(spec)
    (override,) = re.findall(r"\((measure\.\w+=\d+)\)", advice)
    assert override == advised
    assert "backend.cpu_placement" not in advice  # the default places each CPU worker on one thread already
    rerun = load_run_spec(compose_cfg("+workload=rmsnorm_naive", *overrides, override))
    key, count = override.split("=")
    # the rule that refuses (it raises) takes the rerun, with the worker processes advised or as many as before
    before = backend.worker_processes(spec.measure.processes, spec.distributed.ranks)
    after = backend.worker_processes(rerun.measure.processes, rerun.distributed.ranks)
    assert after == (int(count) if key == "measure.processes" else before)


def test_unpinned_cpu_workers_are_advised_one_core() -> None:
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu", "backend.cpu_placement=unpinned"))
    assert "backend.cpu_placement=one_core" in CpuBackend(spec.backend).steadier_measurement(spec)


@pytest.mark.parametrize(
    ("own_sd", "earlier_ms", "source"),
    [
        pytest.param(0.001, [1.2, 0.8, 1.1], "4 runs of this configuration on this host", id="a-drifting-host"),
        pytest.param(0.1, [], "its 3 worker processes", id="a-first-run-whose-processes-disagree"),
        pytest.param(0.001, [1.0, 1.001, 0.999], None, id="a-steady-host"),
    ],
)
def test_a_run_alone_is_not_flagged_and_a_noisy_host_gets_a_note_on_what_still_holds(
    tmp_path: Path, own_sd: float, earlier_ms: list[float], source: str | None
) -> None:
    """The interval takes in the host's drift where earlier runs show it; over 5% it is a note saying by how much,
    from what, that comparisons paired by round still hold and what narrows the run's own part. No flag: on a noisy
    host every run's interval is wide (issue 52: 22 of 22 default runs), and a sweep flags what it cannot resolve."""
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu"))
    own = Spread(own_sd, 2, "its 3 worker processes")
    result = JobResult({names.STEP_MEDIAN_MS: 1.0}, {}, OpTable([], 1, False), "", tmp_path, spread=own)
    judge_timing(result, spec, CpuBackend(spec.backend), earlier_ms)
    stated = between_runs(earlier_ms, 1.0) or own
    assert result.metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT] == pytest.approx(stated.next_run * 100)
    assert result.tags[names.TAG_TIMING_STABLE] == "true"
    if source is None:
        assert result.timing_note is None
    else:
        assert f"the next identical run may land +-{stated.next_run:.1%} from this one (from {source}" in str(
            result.timing_note
        )
        assert "paired by round" in str(result.timing_note) and "(measure.processes=5)" in str(result.timing_note)


def test_repeat_cycles_give_per_op_samples(tmp_path: Path) -> None:
    result, _, _ = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "schedule=repeat")
    rsqrt = next(row for row in result.table.rows if row["name"] == "aten::rsqrt")
    samples = json.loads(rsqrt["cycle_self_ms"])
    assert len(samples) == 5 and all(s > 0 for s in samples)
    assert rsqrt["cycle_self_ms_mean"] == pytest.approx(statistics.fmean(samples), rel=1e-3)
    assert rsqrt["cycle_self_ms_std"] == pytest.approx(statistics.stdev(samples), rel=1e-2, abs=1e-5)
    # per-step samples over 5 cycles of 2 steps add back up to the row's total self time
    assert sum(samples) * 2 == pytest.approx(rsqrt["self_cpu_ms"], rel=1e-3)


def test_a_one_cycle_window_keeps_every_cycles_events(tmp_path: Path) -> None:
    """torch 2.11 warns on a one-cycle schedule that it clears events at each cycle's end: a test's error there."""
    spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu"))
    profiler = build_profiler(CpuBackend(spec.backend), spec.profiler, spec.schedule, tmp_path, CycleRecorder(False))
    assert spec.schedule.repeat == 1 and isinstance(profiler, torch.profiler.profile) and profiler.acc_events


def test_a_roofline_above_its_peak_warns_that_the_peak_reads_low(tmp_path: Path) -> None:
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "measure=quick", "+workload=rmsnorm_naive"))
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    measurement = measure(
        workload, backend, spec, tmp_path / "trace", steady_state_source(spec, backend, workload), tmp_path / "memory"
    )
    low = Peak(bandwidth_gbps=1e-6, gflops=1e6, source="measured: a calibration taken on a busy host")
    result = collect_result(spec, workload, backend, measurement, low, CaptureReport(), tmp_path / "trace")
    assert result.metrics[names.ROOFLINE_BANDWIDTH_FRACTION] > 1
    share = result.metrics[names.ROOFLINE_BANDWIDTH_FRACTION]
    over = f"roofline above 100% (bandwidth {share:.0%} of 0.0 GB/s): the peak (measured: a calibration"
    assert any(w.startswith(over) for w in result.warnings), result.warnings  # the fraction that is over, only
    fair = Peak(bandwidth_gbps=1e6, gflops=1e6, source="datasheet")
    result = collect_result(spec, workload, backend, measurement, fair, CaptureReport(), tmp_path / "trace")
    assert not any(w.startswith("roofline") for w in result.warnings)


def test_a_workload_without_cost_model_has_no_roofline(tmp_path: Path) -> None:
    _, metrics, tags = run_phases(
        tmp_path, "+workload=custom", "workload._target_=torch.nn.Identity", "workload.inputs=[[4,4]]"
    )
    assert not any(key.startswith("roofline/") for key in metrics)
    assert tags[names.TAG_ROOFLINE_PEAK] == "none: the workload declares no bytes/FLOPs model"
    assert tags[names.TAG_ACCURACY] == "skipped"


@pytest.mark.slow
def test_compiled_run_counts_its_graphs_and_passes_accuracy(tmp_path: Path) -> None:
    _, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_compiled", "workload.hidden=24", "workload.seq_len=3")
    assert metrics[names.COMPILE_GRAPHS] >= 1
    assert tags[names.TAG_ACCURACY] == "pass"


def test_train_step_profiles_backward_and_counts_its_flops(tmp_path: Path) -> None:
    overrides = ("+workload=decoder_layer", "workload.hidden=16", "workload.heads=2", "workload.intermediate=24",
                 "workload.seq_len=6")  # fmt: skip
    result, forward, _ = run_phases(tmp_path, *overrides)
    result_train, train, tags = run_phases(tmp_path / "train", *overrides, "workload.mode=train_step")
    op_names = {row["name"] for row in result_train.table.rows}
    assert any("backward" in name.lower() for name in op_names), sorted(op_names)
    assert not any("backward" in name.lower() for name in {row["name"] for row in result.table.rows})
    assert any(name.startswith("Optimizer.step") for name in op_names)
    assert train[names.ROOFLINE_FLOPS] == 3 * forward[names.ROOFLINE_FLOPS]  # the backward counts twice the forward
    assert tags[names.TAG_ACCURACY] == "pass"


def test_non_finite_output_is_tagged_for_any_workload(tmp_path: Path) -> None:
    # no reference(): accuracy is skipped, but a NaN output is still a finding
    custom = ["+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[2,4]]"]
    custom.append("+workload.fault=nonfinite")
    _, _, tags = run_phases(tmp_path, *custom)
    assert tags[names.TAG_ACCURACY] == "skipped"
    assert tags[names.TAG_OUTPUT_FINITE] == "false: 8 of 8 elements are NaN or infinite"
    _, _, tags = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=8")
    assert tags[names.TAG_OUTPUT_FINITE] == "true"


class DeviceClocked(CpuBackend):
    """The CPU with a device clock that reads every step as DEVICE_MS, as CUDA events would time it."""

    traits = replace(CpuBackend.traits, step_clock=names.STEP_CLOCK_DEVICE)
    DEVICE_MS = 0.005
    blocks: ClassVar[list[tuple[int, bool]]] = []

    def time_steps(self, step: Callable[[], object], count: int, flush_cache: bool) -> list[float]:
        self.blocks.append((count, flush_cache))
        for _ in range(count):
            step()
        return [self.DEVICE_MS] * count


def test_a_device_clock_times_the_steady_state_in_blocks_and_the_synchronized_step_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    DeviceClocked.blocks.clear()
    monkeypatch.setenv(LAYOUTS_ENV, "1")
    result, metrics, tags = run_phases(
        tmp_path,
        "+workload=rmsnorm_naive",
        "workload.hidden=16",
        "measure.inflight=8",
        backend_class=DeviceClocked,
    )
    # the warm calls the warm-up ends with, then measure=quick's 20 steps
    assert DeviceClocked.blocks == [(WARM_CALLS, False), (8, False), (8, False), (4, False)]
    assert (
        result.samples() == [DeviceClocked.DEVICE_MS] * 20 and metrics[names.STEP_MEDIAN_MS] == DeviceClocked.DEVICE_MS
    )
    assert tags[names.TAG_STEP_CLOCK] == "device"
    # the synchronized step is the host's clock around one step: what the profiled window's steps are judged against
    assert len(result.sync_ms) == 20 and metrics[names.SYNC_STEP_MS] == statistics.median(result.sync_ms)
    assert metrics[names.PROFILER_OVERHEAD_PCT] == pytest.approx(
        (metrics[names.PROFILER_STEP_MS] / metrics[names.SYNC_STEP_MS] - 1) * 100
    )
    DeviceClocked.blocks.clear()
    monkeypatch.delenv(LAYOUTS_ENV)
    _, _, tags = run_phases(
        tmp_path,
        "+workload=rmsnorm_naive",
        "workload.hidden=16",
        "measure.flush_cache=true",
        backend_class=DeviceClocked,
    )
    assert {flush for _, flush in DeviceClocked.blocks} == {True}
    assert tags[names.TAG_STEP_CLOCK] == "device, cache flushed before each step"


def test_the_host_clock_times_each_synchronized_step_and_nothing_apart(tmp_path: Path) -> None:
    result, metrics, tags = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16")
    assert tags[names.TAG_STEP_CLOCK] == "host" and not result.sync_ms and names.SYNC_STEP_MS not in metrics
    assert len(set(result.samples())) > 1  # each step timed alone by the host's clock


def test_the_synchronized_step_is_explained_as_device_busy_time_and_the_rest() -> None:
    metrics = {names.SYNC_STEP_MS: 0.0818, names.DEVICE_SELF_TOTAL_MS: 0.0132, names.PROFILER_ACTIVE_STEPS: 2.0}
    assert wall_breakdown(metrics) == pytest.approx({names.DEVICE_BUSY_MS: 0.0066, names.HOST_AND_IDLE_MS: 0.0752})
    assert wall_breakdown({**metrics, names.SYNC_STEP_MS: 0.005})[names.HOST_AND_IDLE_MS] == 0.0  # never below zero
    assert wall_breakdown({names.SYNC_STEP_MS: 0.0818, names.PROFILER_ACTIVE_STEPS: 1.0}) == {}  # no device time
    assert wall_breakdown({names.DEVICE_SELF_TOTAL_MS: 0.0132, names.PROFILER_ACTIVE_STEPS: 2.0}) == {}  # host clock


def test_throughput_mode_queues_blocks_of_steps_beside_the_synchronized_latency(tmp_path: Path) -> None:
    result, metrics, _ = run_phases(
        tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16", "measure.mode=throughput", "measure.inflight=4"
    )
    assert len(result.block_s) == 5  # measure=quick's 20 steps in blocks of 4
    assert metrics[names.THROUGHPUT_INFLIGHT] == 4
    assert metrics[names.THROUGHPUT_STEPS_PER_S] == pytest.approx(4 / (metrics[names.THROUGHPUT_BLOCK_MS] / 1000))
    assert names.STEP_MEDIAN_MS in metrics  # the latency is still measured
    _, latency_only, _ = run_phases(tmp_path, "+workload=rmsnorm_naive", "workload.hidden=16")
    assert names.THROUGHPUT_STEPS_PER_S not in latency_only
