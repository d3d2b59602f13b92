"""ProfileMode.DEVICE's HBM reservation, counted per chip before a job's device-profiled processes start.

"ProfileMode.DEVICE reserves approximately 5 GB of HBM on Trn2 for storing hardware notifications"
(SDK:tools/neuron-explorer/how-to-profile-workload.rst; "~5 GB HBM on Trn2/Trn3",
troubleshooting.rst). Each process builds its own NeuronConfig, so each is taken to reserve its own
(inferred); the chip's HBM is conf/peaks.yaml's hbm_gib, its logical cores physical_cores_per_chip / LNC.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from runner import CONF_DIR
from runner.backends.cores import logical_nc_config

DEVICE_PROFILE_GB = 5.0
DEVICE_MODE = "DEVICE"


def reservation_note(key: str, generation: str, process_cores: list[int]) -> str | None:
    """One line on the HBM device profiling reserves on the busiest chip (`process_cores`: each process's first core).

    Never a refusal: at most 8 processes of a Trn2/Trn3 chip reserve 40 GB of its 103; what the
    workload needs on top is unknown before it runs.
    """
    table: dict[str, Any] = yaml.safe_load((CONF_DIR / "peaks.yaml").read_text())
    chip = table.get(f"{generation}_chip", {})
    lnc = logical_nc_config(generation)[0]
    if "hbm_gib" not in chip or lnc is None:
        return None
    hbm_gb = chip["hbm_gib"] * 2**30 / 1e9
    per_chip = Counter(core // (chip["physical_cores_per_chip"] // lnc) for core in process_cores)
    worst, count = max(per_chip.items(), key=lambda item: item[1])
    reserved = count * DEVICE_PROFILE_GB
    return (
        f"{key}={len(process_cores)}, profiler.modes has {DEVICE_MODE}: {count} device-profiled "
        f"process(es) on chip {worst} reserve ~{reserved:g} GB "
        f"of its {hbm_gb:.0f} GB HBM ({DEVICE_PROFILE_GB:g} GB each, neuron-explorer docs)"
    )
