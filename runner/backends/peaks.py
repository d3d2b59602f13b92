"""Device ceilings for the roofline: datasheet figures (`conf/peaks.yaml`), or the host CPU's calibration.

Every run tags which it used, so nobody mistakes a datasheet figure for a measurement.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import timeit
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from runner import CONF_DIR
from runner.backends.cores import logical_nc_config
from runner.config import ConfigError
from runner.files import write_whole

# Working sets from L2-sized to DRAM-sized: the peak is the best of them.
_COPY_SIZES_MIB = (1, 4, 16, 64)
MATMUL_SIZE = 512
_BEST_OF = 5
# the links a collective's ranks can cross, as conf/peaks.yaml's links_gbps names them
INTRA_CHIP = "intra_chip"
CHIP_TO_CHIP = "chip_to_chip"
NODE_TO_NODE = "node_to_node"
LINK_WORDS = {INTRA_CHIP: "intra-chip", CHIP_TO_CHIP: "chip-to-chip", NODE_TO_NODE: "node-to-node (EFA)"}


@dataclass
class Peak:
    """A device's ceilings and where they come from."""

    bandwidth_gbps: float
    gflops: float
    # e.g. "datasheet: trn2_core (conf/peaks.yaml)" or "measured: ..."
    source: str
    # a collective's ceiling in GB/s per link its ranks cross, where the datasheet gives one
    links_gbps: dict[str, float] = field(default_factory=dict)
    # the device's logical cores on one chip (NeuronCores at the LNC in force); None where unknown or one chip
    cores_per_chip: int | None = None


def datasheet_peak(entry: str, multiplier: int, dtype: str) -> Peak:
    """Look up `entry` in conf/peaks.yaml, scaled to `multiplier` units; `<generation>_core` is a logical core's share.

    Raises:
        ConfigError: no such entry, no figure for the dtype, or a core's share at an unknown LNC.
    """
    table: dict[str, Any] = yaml.safe_load((CONF_DIR / "peaks.yaml").read_text())
    chip = f"{entry.removesuffix('_core')}_chip"
    per_core = entry.endswith("_core") and "physical_cores_per_chip" in table.get(chip, {})
    name = chip if per_core else entry
    figures = table.get(name)
    if figures is None:
        cores = [f"{key[:-5]}_core" for key, found in table.items() if "physical_cores_per_chip" in found]
        raise ConfigError(
            f"measure.peak={entry!r} is not in conf/peaks.yaml; choose one of: auto, {', '.join([*table, *cores])}"
        )
    if dtype not in figures["tflops"]:
        raise ConfigError(f"measure.peak={entry}: no {dtype} figure; it has {', '.join(figures['tflops'])}")
    physical = figures.get("physical_cores_per_chip")
    lnc, lnc_words = logical_nc_config(name.removesuffix("_chip")) if physical else (None, "")
    logical = physical // lnc if physical and lnc else None
    if per_core and logical is None:
        raise ConfigError(f"measure.peak={entry}: a core's share needs the LNC, {lnc_words}; set it or use {chip}")
    share = multiplier / logical if per_core and logical else multiplier
    scale = f" x {multiplier}" if multiplier > 1 else ""
    at_lnc = f"; {logical} logical cores per chip at LNC {lnc_words}" if logical else ""
    return Peak(
        bandwidth_gbps=figures["bandwidth_gbps"] * share,
        gflops=figures["tflops"][dtype] * 1000 * share,
        source=f"datasheet: {entry}{scale} (conf/peaks.yaml{at_lnc})",
        links_gbps=figures.get("links_gbps", {}),
        cores_per_chip=logical,
    )


def link_between(cores: list[int], cores_per_chip: int | None, nodes: int) -> str:
    """The link a collective among ranks on these cores (one per rank, of one node) or on several nodes crosses."""
    if nodes > 1:
        return NODE_TO_NODE
    if cores_per_chip is not None and len({core // cores_per_chip for core in cores}) == 1:
        return INTRA_CHIP
    return CHIP_TO_CHIP


def _best_seconds(fn: Any) -> float:
    fn()  # a warm-up call, not timed
    return min(timeit.repeat(fn, repeat=_BEST_OF, number=1))


def calibrate_cpu(dtype: str) -> tuple[float, float]:
    """Best copy bandwidth (GB/s, read + write) over several sizes, and matmul GFLOP/s."""
    bandwidth = 0.0
    for mib in _COPY_SIZES_MIB:
        src = torch.ones(mib * 2**20 // 4)
        dst = torch.empty_like(src)
        bandwidth = max(bandwidth, 2 * src.nbytes / _best_seconds(lambda d=dst, s=src: d.copy_(s)) / 1e9)
    a = torch.ones(MATMUL_SIZE, MATMUL_SIZE, dtype=getattr(torch, dtype))
    gflops = 2 * MATMUL_SIZE**3 / _best_seconds(lambda: a @ a) / 1e9
    return bandwidth, gflops


def threads_words(threads: int) -> str:
    """'1 thread', '2 threads': a calibration is per thread count, and says which."""
    return f"{threads} thread{'s' * (threads != 1)}"


def _cache_file() -> Path:
    """Per-user cache of CPU calibrations ($XDG_CACHE_HOME/runner/cpu_peaks.json)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "runner" / "cpu_peaks.json"


def _calibration_key(dtype: str) -> str:
    return f"{_this_machine()}|threads={torch.get_num_threads()}|{dtype}"


def _this_machine() -> str:
    return f"{platform.node()}|{platform.processor() or platform.machine()}"


def cached_here() -> list[tuple[int, str]]:
    """The calibrations cached for this machine, as (threads, dtype): each thread count jobs ran with has its own."""
    here = f"{_this_machine()}|threads="
    keys = [key.removeprefix(here).partition("|") for key in _cached_calibrations() if key.startswith(here)]
    return sorted((int(threads), dtype) for threads, _, dtype in keys if threads.isdigit())


def _cached_calibrations() -> dict[str, list[float]]:
    """The cached calibrations; an unreadable cache is measured again and rewritten, not fatal."""
    try:
        return dict(json.loads(_cache_file().read_text()))
    except (OSError, ValueError):
        return {}


def cpu_peak(dtype: str) -> Peak:
    """The CPU calibration for this machine and thread count, measured on first use; its source names the entry."""
    figures = _cached_calibrations().get(_calibration_key(dtype))
    if figures is None:
        # on stderr whatever the logging setup (the doctor has none): it can take ten seconds
        print(
            f"calibrating this machine's CPU peaks for the roofline (once per machine and thread count; "
            f"cached in {_cache_file()}) ...",
            file=sys.stderr,
            flush=True,
        )
        figures = keep_best_calibration(dtype, *calibrate_cpu(dtype))
    bandwidth, gflops = figures
    where = f"on this machine, {threads_words(torch.get_num_threads())} ({_cache_file()})"
    return Peak(bandwidth, gflops, f"measured: best copy bandwidth and {dtype} matmul {where}")


def keep_best_calibration(dtype: str, bandwidth: float, gflops: float) -> list[float]:
    """Cache the best of this and the cached measurement, and return it: a busy host reads low."""
    cache = _cached_calibrations()
    cached = cache.get(_calibration_key(dtype), [0.0, 0.0])
    best = cache[_calibration_key(dtype)] = [max(bandwidth, cached[0]), max(gflops, cached[1])]
    write_whole(_cache_file(), json.dumps(cache, indent=2))  # ranks and workers calibrate side by side
    return best
