"""Summary statistics of step times, from numpy and scipy (both come with MLflow)."""

from __future__ import annotations

import statistics

import numpy as np
from scipy import stats

from runner import names


def coefficient_of_variation(samples: list[float]) -> float:
    """Standard deviation over mean (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean else 0.0


def describe_steps(samples_ms: list[float]) -> dict[str, float]:
    """`time/step_*` metrics from per-step times in milliseconds (linear-interpolated percentiles)."""
    p10, p25, p75, p90 = (float(v) for v in np.percentile(samples_ms, [10, 25, 75, 90]))
    return {
        names.STEP_MEDIAN_MS: statistics.median(samples_ms),
        names.STEP_MEAN_MS: statistics.fmean(samples_ms),
        names.STEP_MIN_MS: min(samples_ms),
        names.STEP_P10_MS: p10,
        names.STEP_P90_MS: p90,
        names.STEP_IQR_MS: p75 - p25,
        names.STEP_CV: coefficient_of_variation(samples_ms),
    }


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (scipy: exact for small samples without ties).

    Needs no distribution assumption, which suits a handful of per-cycle timings. With n
    samples per side the smallest possible p is 2 / C(2n, n): 0.1 for 3 cycles, 0.008 for 5.
    An empty side gives 1 (no evidence of a change).
    """
    if not a or not b:
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
