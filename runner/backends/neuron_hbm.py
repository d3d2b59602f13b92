"""ProfileMode.DEVICE's HBM reservation, counted per chip before a job's device-profiled processes start.

"ProfileMode.DEVICE reserves approximately 5 GB of HBM on Trn2 for storing hardware notifications"
(SDK:tools/neuron-explorer/how-to-profile-workload.rst; "~5 GB HBM on Trn2/Trn3",
troubleshooting.rst). Each process builds its own NeuronConfig, so each is taken to reserve its own
(inferred); the chip's HBM is conf/peaks.yaml's hbm_gib, its logical cores physical_cores_per_chip / LNC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import yaml

from runner import CONF_DIR
from runner.backends.base import Slot
from runner.backends.cores import logical_nc_config, parse_cores
from runner.backends.neuron import VISIBLE_CORES_ENV

_DEVICE_PROFILE_GB = 5.0
_DEVICE_MODE = "DEVICE"


def device_profiled(enabled: bool, modes: Iterable[str]) -> bool:
    """Whether a profiler config captures in DEVICE mode, which reserves HBM in each process."""
    return enabled and _DEVICE_MODE in modes


def first_cores(slots: Iterable[Slot]) -> list[int]:
    """Each Neuron slot's first NeuronCore (a slot's process runs there); none for another device's slots."""
    envs = [dict(slot.env) for slot in slots]
    return [parse_cores(env[VISIBLE_CORES_ENV], "")[0] for env in envs if VISIBLE_CORES_ENV in env]


def reservation_note(who: str, generation: str, process_cores: list[int]) -> str | None:
    """One line on the HBM device profiling reserves on the busiest chip (`process_cores`: each process's first core).

    `who` names the processes as the user set them (`distributed.ranks=4`). Never a refusal: at most 8
    processes of a Trn2/Trn3 chip reserve 40 GB of its 103; what the workload needs on top is unknown
    before it runs, so the line says what is left for it.
    """
    table: dict[str, Any] = yaml.safe_load((CONF_DIR / "peaks.yaml").read_text())
    chip = table.get(f"{generation}_chip", {})
    lnc = logical_nc_config(generation)[0]
    if not process_cores or "hbm_gib" not in chip or lnc is None:
        return None
    hbm_gb = chip["hbm_gib"] * 2**30 / 1e9
    per_chip = Counter(core // (chip["physical_cores_per_chip"] // lnc) for core in process_cores)
    worst, count = max(per_chip.items(), key=lambda item: item[1])
    reserved = count * _DEVICE_PROFILE_GB
    return (
        f"{who} with profiler.modes {_DEVICE_MODE}: {count} device-profiled process(es) on chip {worst} reserve "
        f"~{reserved:g} GB of its {hbm_gb:.0f} GB HBM ({_DEVICE_PROFILE_GB:g} GB each, neuron-explorer docs), "
        f"leaving ~{(hbm_gb - reserved) / count:.0f} GB each for the workload"
    )
