"""backend=cpu: the host CPU. Nothing to synchronise; peaks come from a calibration.

Workers and copies are placed as `backend.cpu_placement` says: on a busy 2-core host a worker with
torch's two threads stalled (steps over 10x the median) while another process held a core; pinned to
one core with one thread, none did (benchmarks/cpu_placement.py, docs/trust.md).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import torch

from runner import names
from runner.backends.base import WHOLE_MACHINE, Backend, DeviceTraits, Placement, Slot
from runner.backends.cores import format_cores, parse_cores
from runner.backends.peaks import Peak, cpu_peak, threads_words
from runner.config import BackendConfig, RunSpec

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# the cores of a CPU slot: a job started on it places its workers there
_CORES_VARIABLE = "RUNNER_CPU_CORES"


def _own_cores() -> list[int]:
    """The cores this process's jobs may use: its slot's, else those the OS lets it run on."""
    if spec := os.environ.get(_CORES_VARIABLE):
        return parse_cores(spec, _CORES_VARIABLE)
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


class CpuBackend(Backend):
    """Host CPU: CPU activity only, a Chrome trace per profiler cycle."""

    traits = DeviceTraits(
        name="cpu",
        # where a process's tensors land moved its median about 11% on the 2-core host; 8 layouts: 0-5% (docs/trust.md)
        default_layouts=8,
        workers_take_turns=True,
        # and inductor's probe of the CPU's vector instruction sets, which each process would run again
        compiler_preload=(*DeviceTraits.compiler_preload, "runner.backends.cpu_compiler_probe"),
        manifest_env_prefixes=("OMP_NUM_THREADS", _CORES_VARIABLE),
        # a job's process takes its workers' torch threads (`match_workers`), which a later job in it starts from
        process_keys={"backend.cpu_placement": "torch's threads in this process are that job's workers'"},
    )

    @classmethod
    def available(cls) -> bool:
        """There is always a CPU."""
        return True

    @classmethod
    def split_machine(cls, config: BackendConfig, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
        """`cores / jobs` cores per job, its own, and as many threads (jobs=0: one per core; more jobs share cores)."""
        cores = _own_cores()
        count = jobs or len(cores)
        per = max(1, len(cores) // count)
        groups = [format_cores(sorted({cores[(i * per + k) % len(cores)] for k in range(per)})) for i in range(count)]
        return [
            Slot(
                f"CPU slot {i} (cores {group}, {per} threads)",
                (*((variable, str(per)) for variable in _THREAD_VARIABLES), (_CORES_VARIABLE, group)),
            )
            for i, group in enumerate(groups)
        ]

    def copy_slots(self, copies: int) -> list[Slot]:
        """The machine split between the copies, saying so when there are more copies than cores."""
        cpus = len(_own_cores())
        if copies > cpus:
            print(
                f"measure.copies={copies} on {cpus} CPU core(s): the copies oversubscribe the host's cores, so "
                "their rates show contention for cores, not how the workload scales",
                file=sys.stderr,
                flush=True,
            )
        return super().copy_slots(copies)

    def steadier_measurement(self, spec: RunSpec) -> str:
        """Also one thread per worker, unless it has one: a worker whose threads outnumber the idle cores waits."""
        advice = super().steadier_measurement(spec)
        if self.config.cpu_placement == "one_core":
            return advice
        return f"{advice} or with backend.cpu_placement=one_core (one thread per worker, pinned to a core)"

    def take_slot(self, slot: Slot) -> None:
        """The slot's thread count: torch read OMP_NUM_THREADS when it loaded, before this."""
        super().take_slot(slot)
        torch.set_num_threads(int(dict(slot.env)[_THREAD_VARIABLES[0]]))

    @classmethod
    def worker_placement(cls, config: BackendConfig, number: int, slot: Slot = WHOLE_MACHINE) -> Placement:
        """`backend.cpu_placement` on the slot's cores (the job's own without one); unpinned where the OS pins nothing.

        one_core: worker k on the k-th core in turn, so a busy core shows as a round that disagrees.
        """
        env = dict(slot.env)
        cores = parse_cores(env[_CORES_VARIABLE], _CORES_VARIABLE) if _CORES_VARIABLE in env else _own_cores()
        if config.cpu_placement == "unpinned" or not hasattr(os, "sched_setaffinity"):
            return Placement(None, int(env.get(_THREAD_VARIABLES[0], torch.get_num_threads())))
        if config.cpu_placement == "one_core":
            return Placement((cores[(number - 1) % len(cores)],), 1)
        return Placement(tuple(cores), len(cores))

    def match_workers(self) -> None:
        """Its workers' thread count (not their core): the profiled window is then compared with like steps."""
        if self.config.cpu_placement != "unpinned":
            torch.set_num_threads(self.worker_placement(self.config, 1).threads)

    def placement_facts(self, spec: RunSpec) -> dict[str, Any]:
        """backend.cpu_placement, and each worker's or copy's cores and threads (none for ranks)."""
        if spec.distributed.ranks > 1:
            slots = []
        elif spec.measure.copies is not None:
            slots = self.split_machine(self.config, spec.measure.copies, None, 1)  # copy_slots's, without its warning
        else:
            slots = [WHOLE_MACHINE] * self.worker_processes(spec.measure.processes)
        placements = [self.worker_placement(self.config, number, slot) for number, slot in enumerate(slots, 1)]
        return {
            names.MANIFEST_CPU_PLACEMENT: self.config.cpu_placement,
            names.MANIFEST_CPU_WORKERS: [placement.facts() for placement in placements],
        }

    @property
    def device(self) -> torch.device:
        """The host CPU."""
        return torch.device("cpu")

    def device_name(self) -> str:
        """The processor as the platform names it."""
        return platform.processor() or platform.machine()

    def placement(self) -> str:
        """The threads torch uses, which a parallel launcher sets per job, and where its workers run."""
        return f"{self.device_name()}, {threads_words(torch.get_num_threads())}, workers {self.config.cpu_placement}"

    def manifest(self) -> dict[str, Any]:
        """CPU count, machine and torch's thread count."""
        return {"cpu.count": os.cpu_count(), "cpu.machine": platform.machine(), "cpu.threads": torch.get_num_threads()}

    def peak(self, dtype: str) -> Peak | None:
        """Measured once per machine and thread count, then cached."""
        return cpu_peak(dtype)
