"""torch_neuronx.profiling of the stand-in: ProfileMode, NeuronConfig, NeuronProfiler."""

from __future__ import annotations

import enum
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from torch_neuronx import neuron
from torch_neuronx._record import faults, record

INSTANCE_ID = "i-0standin00000000"


class ProfileMode(enum.Enum):
    DEVICE = "device_profile"
    RUNTIME = "system_profile"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


def _captured(spec: str | None, owned: int) -> list[int]:
    """capture_enabled_for_nc as indices relative to the owned cores (0 = first visible core).

    Unset captures every owned core (NRT's default: all NCs); indices past the owned cores are ignored.
    """
    if not spec:
        return list(range(owned))
    cores: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return sorted(c for c in cores if c < owned)


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
        record("NeuronProfiler")

    def export_trace(self, prof: torch.profiler.profile) -> None:
        record("export_trace", activities=sorted(str(a) for a in prof.activities), step_num=prof.step_num)
        if "no_output" in faults():
            return
        session = (
            Path(self.config.profile_output_dir)
            / f"{INSTANCE_ID}_pid_{os.getpid()}"
            / time.strftime("%Y%m%d_%H%M%S_000")
        )
        session.mkdir(parents=True, exist_ok=True)
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
            for nc in _captured(self.config.capture_enabled_for_nc, len(neuron.owned_cores())):
                busy = nc == 0 and "empty_ntff" not in faults()
                (session / f"profile_nc_{nc}_session_0.ntff").write_bytes(b"NTFF" * 256 if busy else b"")
            self._copy_neffs(session)
        if "dropped_events" in faults():
            os.write(2, b"Warning: 1234 trace events were dropped\n")
        prof.export_chrome_trace(str(session / "trace.json"))

    def _copy_neffs(self, session: Path) -> None:
        """Eager mode compiles one NEFF per op into the cache; copy them at stop."""
        if self.config.neff_cache_dir is None or "no_neff" in faults():
            return
        cache = Path(self.config.neff_cache_dir)
        cache.mkdir(parents=True, exist_ok=True)
        for digest in ("1438288577794338", "9911002233445566"):
            neff = cache / f"neff_{digest}.neff"
            if not neff.exists():
                neff.write_bytes(b"NEFF" * 128)
            shutil.copy(neff, session / f"neff_{digest}_vnc_0.neff")
