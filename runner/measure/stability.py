"""Is a run's step time a number one can compare? The verdict behind the tag `timing.stable`.

Each check looks for one way a host fails a measurement: worker processes that landed in
different modes (heap or page-fault state, thread placement), a tail of slow steps (another
process took the core), two clusters of step times (a slow mode that comes and goes), or
simply too much spread. Any reason makes the run unstable; the reasons say which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runner.measure.stats import coefficient_of_variation

if TYPE_CHECKING:
    from runner.backends.base import Backend
    from runner.config import RunSpec

# per-process medians further apart than this, relative to their median
MAX_PROCESS_SPREAD = 0.10
# steps beyond Q3 + 3 IQR (Tukey's far-out values)
MAX_OUTLIER_SHARE = 0.05
OUTLIER_FENCE_IQRS = 3.0
# a second cluster holding at least this share of the steps, this far from the first
MIN_MODE_SHARE = 0.10
MIN_MODE_RATIO = 1.3
# Ashman's D of the two sides of the split (on log times). Each side is cut off at the split, so
# D runs high: one normal cluster split in two scores 2.65, two normal clusters at Ashman's D 2
# (just apart enough to show two peaks) 2.92
MIN_MODE_SEPARATION = 2.9
# the coefficient of variation of single steps (the outlier and mode checks say why it is high)
MAX_STEP_CV = 0.25


def process_spread(process_medians: list[float]) -> float:
    """(max - min) / median of the per-process medians; 0 for one process."""
    if len(process_medians) < 2:
        return 0.0
    return float((max(process_medians) - min(process_medians)) / np.median(process_medians))


def outlier_share(samples_ms: list[float]) -> float:
    """The share of steps slower than Q3 + 3 IQR."""
    q1, q3 = np.percentile(samples_ms, [25, 75])
    fence = q3 + OUTLIER_FENCE_IQRS * (q3 - q1)
    return float(np.mean(np.asarray(samples_ms) > fence))


def two_modes(samples_ms: list[float]) -> tuple[float, float] | None:
    """The slower cluster's share and its median over the faster one's, when steps form two.

    The split is Otsu's: the threshold on log step time that maximises the variance between
    the two sides. It counts as two modes only when the smaller side is not a handful of
    outliers, the medians differ by `MIN_MODE_RATIO` and the clusters barely overlap.
    """
    logs = np.sort(np.log(np.asarray(samples_ms, dtype=float)))
    n = len(logs)
    if n < 10 or logs[-1] - logs[0] < np.log(MIN_MODE_RATIO):
        return None
    left = np.arange(1, n)
    sums = np.cumsum(logs)[:-1]
    mean_low, mean_high = sums / left, (logs.sum() - sums) / (n - left)
    split = int(np.argmax(left * (n - left) * (mean_high - mean_low) ** 2)) + 1
    low, high = logs[:split], logs[split:]
    share = min(len(low), len(high)) / n
    ratio = float(np.exp(np.median(high) - np.median(low)))
    spread = np.sqrt(low.var() + high.var()) or 1e-12
    separation = np.sqrt(2) * (high.mean() - low.mean()) / spread
    if share >= MIN_MODE_SHARE and ratio >= MIN_MODE_RATIO and separation >= MIN_MODE_SEPARATION:
        return len(high) / n, ratio
    return None


def instability_reasons(process_medians: list[float], samples_ms: list[float]) -> list[str]:
    """Why this run's step time should not be compared; empty when it can be."""
    reasons = []
    spread = process_spread(process_medians)
    if spread > MAX_PROCESS_SPREAD:
        reasons.append(f"the {len(process_medians)} rounds' medians (one worker process each) differ by {spread:.0%}")
    share = outlier_share(samples_ms)
    if share > MAX_OUTLIER_SHARE:
        reasons.append(f"{share:.0%} of steps are far-out slow (beyond Q3 + 3 IQR)")
    modes = two_modes(samples_ms)
    if modes is not None:
        slow_share, ratio = modes
        reasons.append(f"step times form two modes: {slow_share:.0%} of steps are {ratio:.1f}x slower")
    cv = coefficient_of_variation(samples_ms)
    if cv > MAX_STEP_CV:
        reasons.append(f"step cv {cv:.2f} (over {MAX_STEP_CV})")
    return reasons


def instability_advice(spec: RunSpec, backend: Backend) -> str:
    """What to rerun an unstable job with: the backend says what its device accepts (`steadier_measurement`)."""
    return f"rerun on an idle machine with {backend.steadier_measurement(spec)}"
