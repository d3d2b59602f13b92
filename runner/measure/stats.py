"""Summary statistics of step times, kept small and exact enough to test on known inputs."""

from __future__ import annotations

import math
import statistics

from runner import names


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
        names.STEP_MEDIAN_MS: statistics.median(samples_ms),
        names.STEP_MEAN_MS: statistics.fmean(samples_ms),
        names.STEP_MIN_MS: min(samples_ms),
        names.STEP_P10_MS: percentile(samples_ms, 10),
        names.STEP_P90_MS: percentile(samples_ms, 90),
        names.STEP_IQR_MS: percentile(samples_ms, 75) - percentile(samples_ms, 25),
        names.STEP_CV: coefficient_of_variation(samples_ms),
    }


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test: exact up to 20 samples, normal beyond.

    Needs no distribution assumption, which suits a handful of per-cycle timings. With n
    samples per side the smallest possible p is 2 / C(2n, n): 0.1 for 3 cycles, 0.008 for 5.
    """
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return 1.0
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    if n1 + n2 > 20:
        mean, sd = n1 * n2 / 2, math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
        z = abs(u - mean) / sd
        return min(1.0, math.erfc(z / math.sqrt(2)))
    counts = _u_distribution(n1, n2)
    total = sum(counts)
    below = sum(counts[: math.floor(u) + 1]) / total
    above = sum(counts[math.ceil(u) :]) / total
    return min(1.0, 2 * min(below, above))


def _u_distribution(n1: int, n2: int) -> list[int]:
    """Number of orderings giving each U = 0..n1*n2 (the Mann-Whitney recurrence)."""
    table = {(0, j): [1] for j in range(n2 + 1)} | {(i, 0): [1] for i in range(n1 + 1)}
    for i in range(1, n1 + 1):
        for j in range(1, n2 + 1):
            with_j = [0] * j + table[(i - 1, j)]
            without = table[(i, j - 1)]
            size = i * j + 1
            table[(i, j)] = [
                (with_j[k] if k < len(with_j) else 0) + (without[k] if k < len(without) else 0) for k in range(size)
            ]
    return table[(n1, n2)]
