"""The window's memory: reading a snapshot's peak by site, the CPU's snapshot from profiler events, the sources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.cuda._memory_viz as memory_viz

from runner.backends.cpu import CpuBackend
from runner.backends.cuda import CudaBackend
from runner.config import BackendConfig, ConfigError, ProfilerConfig
from runner.measure.memory import (
    NO_SITE,
    PROFILER_SOURCE,
    allocation_site,
    memory_source,
    peak_by_site,
    snapshot_from_traces,
)
from runner.report.memory_diff import change_rows, readable_bytes, site_changes

TORCH_FRAME = {"filename": str(Path(torch.__file__).parent / "nn" / "functional.py"), "line": 2, "name": "linear"}


def at(line: int) -> list[dict[str, Any]]:
    """A Python stack as torch.cuda.memory records it, innermost first: torch's frame, then the caller's."""
    return [TORCH_FRAME, {"filename": "/src/workloads/model.py", "line": line, "name": "forward"}]


def event(action: str, addr: int, size: int, line: int = 1) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": at(line)}


def freed(addr: int, size: int) -> list[dict[str, Any]]:
    return [event("free_requested", addr, size), event("free_completed", addr, size)]


def test_a_cuda_snapshots_peak_is_the_most_its_allocations_held_at_once_by_the_callers_line() -> None:
    snapshot = {
        "segments": [],
        "device_traces": [
            [event("alloc", 1, 4096, 10)],  # a quieter device
            [
                *freed(99, 10**9),  # memory allocated before the history started: not counted
                event("alloc", 1, 8192, 10),
                event("alloc", 2, 2048, 11),
                event("free_requested", 1, 8192),  # still held until its free completes
                event("alloc", 3, 1024, 10),  # the peak: 8192 + 2048 + 1024
                *freed(1, 8192)[1:],
                event("alloc", 4, 4096, 12),  # 7168 live: under the peak
            ],
        ],
    }
    peak, sites = peak_by_site(snapshot)
    assert peak == 11264
    assert sites == {"workloads/model.py:10 forward": 9216, "workloads/model.py:11 forward": 2048}
    assert list(sites.values()) == sorted(sites.values(), reverse=True)


def test_a_site_is_the_innermost_line_outside_torch_or_the_ops_it_ran_in() -> None:
    assert allocation_site(at(7)) == "workloads/model.py:7 forward"
    assert allocation_site([TORCH_FRAME]) == "nn/functional.py:2 linear"  # no caller outside torch
    ops = [{"filename": name, "line": 0, "name": name} for name in ("aten::addmm", "aten::linear")]
    assert allocation_site(ops) == "aten::linear > aten::addmm"
    assert allocation_site([]) == NO_SITE


def op(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def memory(ts: float, addr: int, size: int) -> dict[str, Any]:
    args = {"Total Reserved": 0, "Total Allocated": 0, "Bytes": size, "Device Id": -1, "Device Type": 0, "Addr": addr}
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}


def write_trace(folder: Path, events: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    (folder / "trace.json").write_text(json.dumps({"traceEvents": events}))


def test_the_profilers_memory_events_become_a_snapshot_memory_viz_reads(tmp_path: Path) -> None:
    write_trace(tmp_path / "iteration_4", [memory(1.0, 5, 64)])  # an earlier cycle: not the one read
    write_trace(
        tmp_path / "iteration_8",
        [
            op("aten::linear", 100, 50),
            op("aten::addmm", 110, 20),
            memory(115, 1, 4096),
            op("aten::relu", 160, 10),
            memory(165, 2, 4096),
            memory(168, 1, -4096),
            memory(180, 3, 512),  # outside any op
            memory(181, 77, -1024),  # allocated before the window
        ],
    )
    snapshot = snapshot_from_traces(tmp_path)
    (trace,) = snapshot["device_traces"]
    assert [e["action"] for e in trace] == ["alloc", "alloc", "free_requested", "free_completed", "alloc"] + [
        "free_requested",
        "free_completed",
    ]
    assert peak_by_site(snapshot) == (8192, {"aten::linear > aten::addmm": 4096, "aten::relu": 4096})
    assert "TOTAL MEM" in memory_viz.trace(snapshot)  # PyTorch's own reader walks every entry
    assert "Active Memory Timeline" in memory_viz.trace_plot(snapshot)


def test_no_memory_events_is_no_peak(tmp_path: Path) -> None:
    write_trace(tmp_path / "iteration_4", [op("aten::add", 1, 2)])
    assert peak_by_site(snapshot_from_traces(tmp_path)) == (0, {})


def test_the_cpu_reads_profiler_events_and_cuda_its_allocation_history() -> None:
    cpu = CpuBackend(BackendConfig(name="cpu"))
    assert memory_source(cpu, ProfilerConfig()) == PROFILER_SOURCE
    assert memory_source(CudaBackend(BackendConfig(name="cuda")), ProfilerConfig(enabled=False)) == (
        "torch.cuda.memory snapshot"
    )


@pytest.mark.parametrize(
    "profiler",
    [
        pytest.param(ProfilerConfig(enabled=False), id="profiler_off"),
        pytest.param(ProfilerConfig(profile_memory=False), id="no_memory_events"),
    ],
)
def test_a_backend_with_neither_source_is_refused_naming_the_key(profiler: ProfilerConfig) -> None:
    with pytest.raises(
        ConfigError, match=r"^measure\.memory_snapshot=true: backend=cpu .*profiler\.profile_memory=true"
    ):
        memory_source(CpuBackend(BackendConfig(name="cpu")), profiler)


def test_the_sites_changes_sum_to_the_change_in_peak_largest_first() -> None:
    before = {"aten::mul": 4096, "aten::mean": 64, "aten::pow": 1024}
    after = {"aten::mul": 16384, "aten::mean": 256, "aten::rms_norm": 2048}
    changes = site_changes(before, after)
    assert [c.site for c in changes] == ["aten::mul", "aten::rms_norm", "aten::pow", "aten::mean"]
    assert sum(c.change for c in changes) == sum(after.values()) - sum(before.values())
    rows = change_rows(changes)
    assert rows[0] == {
        "site": "aten::mul",
        "before": "4.00 KiB",
        "after": "16.00 KiB",
        "change": "+12.00 KiB",
        "share of change": f"{12288 / 13504:.1%}",
    }
    assert rows[2]["change"] == "-1.00 KiB" and rows[2]["after"] == "0 B"
    assert readable_bytes(3 * 2**30) == "3.00 GiB"
