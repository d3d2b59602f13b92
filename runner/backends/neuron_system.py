"""Explorer's system-profile tables as metrics: each event source's events and time, and the HBM peak.

Tables and columns of `SDK:tools/neuron-explorer/profile-schema-reference.rst` (schema 7.4.0; that 12.0.1
keeps them is inferred): `SystemProfileEvents` (`duration_ns`, `trace_event_source`: "neuron_rt" the
runtime, "neuron_hw" a device, "framework") and `SystemProfileHbmUsage` (`total_bytes` in use).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from runner import names

EVENT_SOURCES = ("neuron_rt", "neuron_hw", "framework")


def parquet_tables(folder: Path, table: str) -> list[Path]:
    """The files of one Parquet table, split or not (`Summary.parquet`, `Summary_0.parquet`, ...)."""
    pattern = re.compile(rf"^{table}(_\d+)?\.parquet$")
    return sorted(p for p in folder.rglob("*.parquet") if pattern.match(p.name))


def system_profile_metrics(folder: Path) -> dict[str, float]:
    """Each source's event count and summed ms (nested events each count), and the HBM peak; empty without RUNTIME."""
    import pyarrow.parquet as pq

    metrics: defaultdict[str, float] = defaultdict(float)
    for path in parquet_tables(folder, "SystemProfileEvents"):
        for row in pq.read_table(path, columns=["duration_ns", "trace_event_source"]).to_pylist():
            if (source := row["trace_event_source"]) in EVENT_SOURCES:
                metrics[names.NEURON_SYSTEM_EVENTS.format(source=source)] += 1
                metrics[names.NEURON_SYSTEM_MS.format(source=source)] += row["duration_ns"] / 1e6
    hbm = [
        row["total_bytes"]
        for p in parquet_tables(folder, "SystemProfileHbmUsage")
        for row in pq.read_table(p).to_pylist()
    ]
    if hbm:
        metrics[names.NEURON_SYSTEM_HBM_PEAK_BYTES] = float(max(hbm))
    return dict(metrics)


def add_system_metrics(total: dict[str, float], session: dict[str, float]) -> None:
    """Add one session's figures to the capture's: counts and times add up, the HBM peak is the highest."""
    for key, value in session.items():
        peak = key == names.NEURON_SYSTEM_HBM_PEAK_BYTES
        total[key] = max(total.get(key, value), value) if peak else total.get(key, 0.0) + value
