"""Summary statistics of step times, kept small and exact enough to test on known inputs."""

from __future__ import annotations

import statistics


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between order statistics."""
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def coefficient_of_variation(samples: list[float]) -> float:
    """Standard deviation over mean (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean else 0.0


def describe_steps(samples_ms: list[float]) -> dict[str, float]:
    """`time/step_*` metrics from per-step times in milliseconds."""
    return {
        "time/step_median_ms": statistics.median(samples_ms),
        "time/step_mean_ms": statistics.fmean(samples_ms),
        "time/step_min_ms": min(samples_ms),
        "time/step_p10_ms": percentile(samples_ms, 10),
        "time/step_p90_ms": percentile(samples_ms, 90),
        "time/step_iqr_ms": percentile(samples_ms, 75) - percentile(samples_ms, 25),
        "time/step_cv": coefficient_of_variation(samples_ms),
    }
