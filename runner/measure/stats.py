"""Summary statistics of step times, from numpy and scipy (scipy imported where used: it costs a process 2 s)."""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from runner import names

# the level of every test the comparison and the gate make, and the power the gate quotes
SIGNIFICANCE = 0.05
_POWER = 0.8


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile without scipy, whose import a job would pay (2 s).

    Exact for 1 and 2 degrees of freedom, the Cornish-Fisher series beyond (Abramowitz and Stegun 26.7.5; within
    0.15% of scipy from 3).
    """
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    z2 = z * z
    terms = (
        (z2 + 1) * z / 4,
        ((5 * z2 + 16) * z2 + 3) * z / 96,
        (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384,
        ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160,
    )
    return float(z + sum(term / df**power for power, term in enumerate(terms, start=1)))


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
    """Two-sided Mann-Whitney U p-value (no distribution assumed), 1 with an empty side; never under 2 / C(2n, n)."""
    if not a or not b:
        return 1.0
    from scipy import stats

    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


@dataclass
class TimeRatio:
    """How a run's step time compares with a baseline's, from their per-process medians."""

    # new over baseline: above 1 the new run is slower
    ratio: float
    # its 95% confidence interval
    low: float
    high: float
    # two-sided: the ratio differs from 1
    p_value: float
    # one-sided: the ratio exceeds 1 + margin (the regression gate's test)
    p_slower: float
    # the smallest slowdown (a fraction) a one-sided 5% test would catch 80% of the time
    detectable: float

    @property
    def significant(self) -> bool:
        """The interval excludes no change (as the test's p-value says, and also once earlier sweeps widened it)."""
        return not self.low <= 1 <= self.high


def time_ratio(baseline_ms: list[float], new_ms: list[float], margin: float = 0.0) -> TimeRatio | None:
    """Welch's t-test on log per-process medians (at 3-5 a side a bootstrap loses coverage); None under 2 a side."""
    if len(baseline_ms) < 2 or len(new_ms) < 2:
        return None
    base, new = np.log(baseline_ms), np.log(new_ms)
    diff = float(new.mean() - base.mean())
    ratio = float(np.exp(diff))
    if base.var() == 0 and new.var() == 0:  # identical medians on each side: nothing to test against
        return TimeRatio(ratio, ratio, ratio, float(diff == 0), float(diff <= np.log1p(margin)), 0.0)
    from scipy import stats

    with warnings.catch_warnings():  # one side's medians all equal: scipy warns, Welch's test still holds
        warnings.simplefilter("ignore", RuntimeWarning)
        test = stats.ttest_ind(new, base, equal_var=False)
        slower = stats.ttest_ind(new - np.log1p(margin), base, equal_var=False, alternative="greater")
    low, high = test.confidence_interval(1 - SIGNIFICANCE)
    se = (high - low) / (2 * stats.t.ppf(1 - SIGNIFICANCE / 2, test.df))
    return _estimate(ratio, test, slower, test.df, se)


def paired_time_ratio(baseline_ms: list[float], new_ms: list[float], margin: float = 0.0) -> TimeRatio | None:
    """The median ratio of two runs' medians timed in the same rounds (index k: round k); None under two rounds.

    A slow stretch a round shared cancels in its ratio, where `time_ratio` counts it as spread; the
    interval and p-values come from a t-test on the log per-round ratios.
    """
    if len(baseline_ms) != len(new_ms):
        raise ValueError(f"paired rounds: {len(baseline_ms)} baseline and {len(new_ms)} new medians")
    if len(new_ms) < 2:
        return None
    log_ratios = np.log(new_ms) - np.log(baseline_ms)
    ratio = float(np.exp(np.median(log_ratios)))
    if log_ratios.var() == 0:  # every round gave the same ratio: nothing to test against
        return TimeRatio(ratio, ratio, ratio, float(ratio == 1), float(ratio <= 1 + margin), 0.0)
    from scipy import stats

    with warnings.catch_warnings():  # near-identical ratios: scipy warns of precision, the test still holds
        warnings.simplefilter("ignore", RuntimeWarning)
        test = stats.ttest_1samp(log_ratios, 0.0)
        slower = stats.ttest_1samp(log_ratios, np.log1p(margin), alternative="greater")
    se = float(log_ratios.std(ddof=1) / np.sqrt(len(log_ratios)))
    return _estimate(ratio, test, slower, len(log_ratios) - 1, se)


def _estimate(ratio: float, test: Any, slower: Any, df: float, se: float) -> TimeRatio:
    """A t-test on logs as a TimeRatio: its interval, both p-values, and the slowdown it would detect."""
    from scipy import stats

    low, high = (float(np.exp(bound)) for bound in test.confidence_interval(1 - SIGNIFICANCE))
    detectable = float(np.expm1((stats.t.ppf(1 - SIGNIFICANCE, df) + stats.t.ppf(_POWER, df)) * se))
    return TimeRatio(ratio, low, high, float(test.pvalue), float(slower.pvalue), detectable)


def geometric_interval(samples: list[float]) -> tuple[float, float] | None:
    """The 95% t interval of the samples' geometric mean (per-process medians); None for fewer than two."""
    if len(samples) < 2:
        return None
    logs = np.log(samples)
    if logs.var() == 0:
        return samples[0], samples[0]
    from scipy import stats

    half = float(stats.t.ppf(1 - SIGNIFICANCE / 2, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: p-values that keep the family-wise error at the level."""
    order = np.argsort(p_values)
    adjusted = np.empty(len(p_values))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return [float(p) for p in adjusted]
