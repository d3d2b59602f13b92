"""Roofline numbers: achieved bandwidth and FLOP rate against the device's ceilings."""

from __future__ import annotations

from runner import names
from runner.backends.base import Backend
from runner.backends.peaks import Peak, datasheet_peak


def resolve_peak(requested: str, backend: Backend, dtype: str) -> Peak | None:
    """`measure.peak`'s entry of conf/peaks.yaml (ConfigError if none), or with "auto" the backend's own."""
    return datasheet_peak(requested, 1, dtype) if requested != "auto" else backend.peak(dtype)


def over_peak(metrics: dict[str, float]) -> list[str]:
    """The ceilings the run's roofline is above, each with its fraction ("compute 177% of 10.2 GFLOP/s")."""
    ceilings = [
        ("bandwidth", names.ROOFLINE_BANDWIDTH_FRACTION, names.ROOFLINE_PEAK_GBPS, "GB/s"),
        ("compute", names.ROOFLINE_COMPUTE_FRACTION, names.ROOFLINE_PEAK_GFLOPS, "GFLOP/s"),
    ]
    return [
        f"{kind} {metrics[fraction]:.0%} of {metrics[peak]:.1f} {unit}"
        for kind, fraction, peak, unit in ceilings
        if metrics.get(fraction, 0) > 1
    ]


def roofline_metrics(bytes_moved: int, flops: int, step_ms: float, peak: Peak) -> dict[str, float]:
    """`roofline/*` metrics from the workload's cost model and its median step time."""
    seconds = step_ms / 1000
    achieved_gbps = bytes_moved / seconds / 1e9
    achieved_gflops = flops / seconds / 1e9
    return {
        names.ROOFLINE_BYTES: float(bytes_moved),
        names.ROOFLINE_FLOPS: float(flops),
        names.ROOFLINE_STEP_MS: step_ms,
        names.ROOFLINE_ACHIEVED_GBPS: achieved_gbps,
        names.ROOFLINE_ACHIEVED_GFLOPS: achieved_gflops,
        names.ROOFLINE_INTENSITY: flops / bytes_moved if bytes_moved else 0.0,
        names.ROOFLINE_PEAK_GBPS: peak.bandwidth_gbps,
        names.ROOFLINE_PEAK_GFLOPS: peak.gflops,
        names.ROOFLINE_BANDWIDTH_FRACTION: achieved_gbps / peak.bandwidth_gbps,
        names.ROOFLINE_COMPUTE_FRACTION: achieved_gflops / peak.gflops,
    }
