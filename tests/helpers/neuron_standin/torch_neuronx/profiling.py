"""torch_neuronx.profiling of the stand-in: ProfileMode, NeuronConfig, NeuronProfiler."""

from __future__ import annotations

import enum
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from torch_neuronx import neuron
from torch_neuronx._record import deviates, faults, record

INSTANCE_ID = "i-0standin00000000"
# system-trace events one capture produces; a smaller max_events_per_nc drops the rest
EVENTS_PER_CAPTURE = 1000
# device time the stand-in reports per aten op with NEURON_STANDIN_DEVICE_TIME=1, in us
DEVICE_US_PER_OP = 5.0

_MODES = {"DEVICE": "device_profile", "RUNTIME": "system_profile", "CPU_UTIL": "cpu_util", "HOST_MEMORY": "host_memory"}
if deviates("profile_modes"):  # a build that renamed a member
    _MODES["HOST_MEM"] = _MODES.pop("HOST_MEMORY")
ProfileMode = enum.Enum("ProfileMode", _MODES)  # type: ignore[misc]


def _captured(spec: str | None, owned: list[int]) -> list[int]:
    """capture_enabled_for_nc as NTFF indices: relative to the owned cores (0 = first visible core).

    Unset captures every owned core (NRT's default: all NCs); indices past the owned cores are
    ignored. With the deviation "absolute_nc" indices name cores absolutely, as do the NTFFs.
    """
    if deviates("absolute_nc"):
        indices = owned if not spec else [c for c in _listed(spec) if c in owned]
        return sorted(indices)
    if not spec:
        return list(range(len(owned)))
    return sorted(c for c in _listed(spec) if c < len(owned))


def _listed(spec: str) -> set[int]:
    cores: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def _leaf_ops(prof: torch.profiler.profile) -> list[FunctionEvent]:
    """The aten ops that launch no other op: what the device executes, one NEFF each in eager mode."""
    events = prof.profiler.function_events if prof.profiler else None
    return [e for e in events or [] if e.name.startswith("aten::") and not e.cpu_children]


def _add_device_time(prof: torch.profiler.profile, how: str) -> list[FunctionEvent]:
    """NEURON_STANDIN_DEVICE_TIME: a driver event of 5 us per leaf aten op, fed back into the profile.

    "1": as a build that fed device events back would (none is known): the op gets the event's
    time (append_kernel) and the event is a device event of its own. "cpu": as Kineto defines driver
    events, host-side launch events (pytorch issue 166205): the event is a CPU child of the op, so
    the device columns stay empty. Returns the events.
    """
    events = prof.profiler.function_events if prof.profiler else None
    if events is None:
        return []
    added = []
    for op in _leaf_ops(prof):
        name = f"neff_{op.name[6:]}"
        start = op.time_range.start
        if how == "cpu":  # a host-side event inside the op, so no longer than the op
            end = start + min(DEVICE_US_PER_OP, op.time_range.elapsed_us())
            event = FunctionEvent(
                id=-op.id, name=name, thread=op.thread, start_us=start, end_us=end,
                use_device="neuron", device_type=DeviceType.CPU, stack=[], input_shapes=[],
            )  # fmt: skip
            op.append_cpu_child(event)
        else:
            op.append_kernel(name, 0, DEVICE_US_PER_OP)
            event = FunctionEvent(
                id=-op.id, name=name, thread=0, start_us=start, end_us=start + DEVICE_US_PER_OP,
                use_device="neuron", device_type=DeviceType.PrivateUse1, stack=[], input_shapes=[],
            )  # fmt: skip
        events.append(event)
        added.append(event)
    return added


def _write_driver_events(trace: Path, events: list[FunctionEvent]) -> None:
    """The driver events in the framework trace (category privateuse1_driver, whichever device type torch gave
    them), each at the start of the op that launched it, on its thread."""
    document = json.loads(trace.read_text())
    ops: dict[str, list[dict[str, Any]]] = {}
    for event in sorted(document.get("traceEvents", []), key=lambda e: e.get("ts", 0)):
        if event.get("ph") == "X" and event.get("cat") == "cpu_op":
            ops.setdefault(event["name"], []).append(event)
    for event in sorted(events, key=lambda e: e.time_range.start):
        launched = ops.get(f"aten::{event.name.removeprefix('neff_')}", [])
        if launched:
            op = launched.pop(0)
            document["traceEvents"].append(
                {"ph": "X", "cat": "privateuse1_driver", "name": event.name, "pid": op["pid"], "tid": op["tid"],
                 "ts": op["ts"], "dur": min(DEVICE_US_PER_OP, op["dur"])}
            )  # fmt: skip
    trace.write_text(json.dumps(document))


def _new_session(process_dir: Path) -> Path:
    """A `<timestamp>` folder (YYYYMMDD_HHMMSS_mmm, as SRC's mapping dump names them) per capture."""
    while True:
        now = time.time()
        session = process_dir / f"{time.strftime('%Y%m%d_%H%M%S', time.localtime(now))}_{int(now * 1000) % 1000:03d}"
        try:
            session.mkdir(parents=True)
            return session
        except FileExistsError:
            time.sleep(0.001)


class NeuronConfig(torch._C._profiler._ExperimentalConfig):
    """Keyword-only, as every documented example calls it; builds custom_profiler_config."""

    def __init__(
        self,
        *,
        modes: list[ProfileMode] | None = None,
        max_events_per_nc: int | None = None,
        capture_enabled_for_nc: str | None = None,
        profile_output_dir: str = "./output",
        neff_cache_dir: str | None = None,
        precache_node_info: bool = True,
        **extra: Any,
    ) -> None:
        unknown = set(extra) - ({"correlate_device_time"} if os.environ.get("NEURON_STANDIN_CORRELATE") else set())
        if deviates("config_keywords") and neff_cache_dir is not None:  # a build that renamed the keyword
            unknown.add("neff_cache_dir")
        if unknown:
            raise TypeError(f"NeuronConfig.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        self.modes = list(modes or [ProfileMode.DEVICE, ProfileMode.RUNTIME])
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.profile_output_dir = profile_output_dir
        self.neff_cache_dir = neff_cache_dir
        pairs = {
            "profile_output_dir": profile_output_dir,
            "capture_enabled_for_nc": capture_enabled_for_nc,
            "max_events_per_nc": max_events_per_nc,
        }
        super().__init__(custom_profiler_config=";".join(f"{k}:{v}" for k, v in pairs.items() if v is not None))
        record(
            "NeuronConfig",
            modes=[m.name for m in self.modes],
            max_events_per_nc=max_events_per_nc,
            capture_enabled_for_nc=capture_enabled_for_nc,
            profile_output_dir=profile_output_dir,
            neff_cache_dir=neff_cache_dir,
            precache_node_info=precache_node_info,
            **extra,
        )


class NeuronProfiler:
    """Writes the documented capture layout when the profiler's active window ends."""

    def __init__(self, config: NeuronConfig) -> None:
        self.config = config
        self.exports = 0
        record("NeuronProfiler")

    def export_trace(self, prof: torch.profiler.profile) -> None:
        record("export_trace", activities=sorted(str(a) for a in prof.activities), step_num=prof.step_num)
        if deviates("no_acc_events") and getattr(prof, "acc_events", False):
            raise RuntimeError("NeuronProfiler: acc_events is not supported with Neuron activities")
        # what the device executed, whether or not the profiler hears of it; the stand-in's
        # neuron-explorer reads it back from the NTFF as the profile's total_time
        executed_us = DEVICE_US_PER_OP * len(_leaf_ops(prof))
        if "unreported_device_time" in faults():  # device work no op launched: the profile misses half
            executed_us *= 2
        how = os.environ.get("NEURON_STANDIN_DEVICE_TIME")
        driver_events = _add_device_time(prof, how) if how else []
        self.exports += 1
        if "no_output" in faults() or (deviates("one_capture") and self.exports > 1):
            return
        session = _new_session(Path(self.config.profile_output_dir) / f"{INSTANCE_ID}_pid_{os.getpid()}")
        modes = set(self.config.modes)
        if ProfileMode.RUNTIME in modes:
            (session / "ntrace.pb").write_bytes(b"\x0a\x04fake" * 64)
            (session / "trace_info.pb").write_bytes(b"\x0a\x04info")
        if ProfileMode.CPU_UTIL in modes:
            (session / "cpu_util.pb").write_bytes(b"\x0a\x03cpu")
        if ProfileMode.HOST_MEMORY in modes:
            (session / "host_mem.pb").write_bytes(b"\x0a\x03mem")
        if ProfileMode.DEVICE in modes:
            # one NTFF per captured core the process owns; only the one the work ran on
            # ("neuron" = the first visible core, index 0) has content, idle cores give empty files
            neuron.start_runtime()
            owned = neuron.owned_cores()
            executing = owned[0] if deviates("absolute_nc") else 0
            for nc in _captured(self.config.capture_enabled_for_nc, owned):
                busy = nc == executing and "empty_ntff" not in faults()
                ntff = b"NTFF" + json.dumps({"device_us": executed_us}).encode()
                (session / f"profile_nc_{nc}_session_0.ntff").write_bytes(ntff if busy else b"")
            self._copy_neffs(session)
        dropped = 1234 if "dropped_events" in faults() else 0
        if self.config.max_events_per_nc is not None:
            dropped = max(dropped, EVENTS_PER_CAPTURE - self.config.max_events_per_nc)
        if dropped > 0:
            os.write(
                1 if deviates("dropped_to_stdout") else 2, f"Warning: {dropped} trace events were dropped\n".encode()
            )
        name = "neuron_framework_trace_rank_0.json" if deviates("trace_name") else "trace.json"
        prof.export_chrome_trace(str(session / name))
        if driver_events:
            _write_driver_events(session / name, driver_events)

    def _copy_neffs(self, session: Path) -> None:
        """Eager mode compiles one NEFF per op into the cache; copy them at stop."""
        if self.config.neff_cache_dir is None or "no_neff" in faults():
            return
        cache = Path(self.config.neff_cache_dir)
        if deviates("neff_cache_at_import"):  # the folder read at import: a later in-process setting is ignored
            cache = neuron.NEFF_CACHE_AT_IMPORT
        for digest in ("1438288577794338", "9911002233445566"):
            shutil.copy(neuron.compile_graph(digest, cache), session / f"neff_{digest}_vnc_0.neff")
