"""backend=cpu: the host CPU. Nothing to synchronise; peaks come from a calibration."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any, ClassVar

import torch

from runner.backends.base import Backend, Slot
from runner.backends.peaks import Peak, cpu_peak
from runner.config import BackendConfig, RunSpec

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class CpuBackend(Backend):
    """Host CPU: CPU activity only, a Chrome trace per profiler cycle."""

    name = "cpu"
    manifest_env_prefixes = ("OMP_NUM_THREADS",)
    # torch reads OMP_NUM_THREADS once, when it loads, but no config key sets it (a launcher's slot does)
    process_keys: ClassVar[dict[str, str]] = {}

    @classmethod
    def available(cls) -> bool:
        """There is always a CPU."""
        return True

    @classmethod
    def split_machine(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """`cpu_count / jobs` threads per job (one job per core when jobs=0)."""
        cpus = os.cpu_count() or 1
        count = jobs or cpus
        threads = str(max(1, cpus // count))
        env = tuple((variable, threads) for variable in THREAD_VARIABLES)
        return [Slot(f"CPU slot {i} ({threads} threads)", env) for i in range(count)]

    def copy_slots(self, copies: int) -> list[Slot]:
        """The machine split between the copies, saying so when there are more copies than cores."""
        cpus = os.cpu_count() or 1
        if copies > cpus:
            print(
                f"measure.copies={copies} on {cpus} CPU core(s): the copies oversubscribe the host's cores, so "
                "their rates show contention for cores, not how the workload scales",
                file=sys.stderr,
                flush=True,
            )
        return super().copy_slots(copies)

    def steadier_measurement(self, spec: RunSpec) -> str:
        """Also fewer threads: a job whose threads outnumber the idle cores waits for them."""
        return f"{super().steadier_measurement(spec)} or with fewer threads per job (OMP_NUM_THREADS)"

    def take_slot(self, slot: Slot) -> None:
        """The slot's thread count: torch read OMP_NUM_THREADS when it loaded, before this."""
        super().take_slot(slot)
        torch.set_num_threads(int(dict(slot.env)[THREAD_VARIABLES[0]]))

    @property
    def device(self) -> torch.device:
        """The host CPU."""
        return torch.device("cpu")

    def device_name(self) -> str:
        """The processor as the platform names it."""
        return platform.processor() or platform.machine()

    def placement(self) -> str:
        """The threads torch uses, which a parallel launcher sets per job."""
        return f"{self.device_name()}, {torch.get_num_threads()} threads"

    def manifest(self) -> dict[str, Any]:
        """CPU count, machine and torch's thread count."""
        return {"cpu.count": os.cpu_count(), "cpu.machine": platform.machine(), "cpu.threads": torch.get_num_threads()}

    def peak(self, dtype: str) -> Peak | None:
        """Measured once per machine and thread count, then cached."""
        return cpu_peak(dtype)
