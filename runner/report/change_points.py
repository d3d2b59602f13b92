"""Where a performance series stepped: change points in a run-by-run series, with their sizes and p-values.

`ruptures` (PELT, squared error) segments the log values, so a step is a ratio whatever the scale; its penalty
grows with the noise, estimated from neighbouring points' differences (a few steps barely move their median).
Each change point is Welch-tested on the segments either side; the weakest failing one is dropped and its
neighbours retested, until all pass. The p-value is on segments chosen to differ, so it reads low: hence `MAX_P`.
docs/history.md#performance-over-time says how this was chosen and what it finds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

_MIN_SEGMENT = 3  # the fewest points a segment may have: a single odd run is noise, not a step
MIN_POINTS = 2 * _MIN_SEGMENT  # the fewest points a series needs for a change point between two segments
# PELT's penalty per change point, in units of the noise's variance times log(points): higher
# finds fewer steps (docs/history.md#performance-over-time has the figures that chose it)
PENALTY = 2.0
# the largest p-value a change point keeps (the test is on segments chosen to differ): at 0.01,
# series of 24 points without a step had 0.46 false change points per 100 points, at 0.001 0.08
MAX_P = 0.001
_MAD_PER_SD = 0.6745  # the median absolute deviation of a normal sample over its standard deviation


@dataclass(frozen=True)
class ChangePoint:
    """A step between two segments: the first point after it, the typical values either side, its test."""

    index: int  # index of the first point of the newer segment
    before: float  # geometric mean of the older segment
    after: float  # geometric mean of the newer segment
    p_value: float  # Welch's t-test on the log values of the two segments (two-sided)

    @property
    def change(self) -> float:
        """The newer segment over the older, less one: +0.10 is 10% higher."""
        return self.after / self.before - 1


def noise(log_values: np.ndarray) -> float:
    """The standard deviation of the series' noise, from its neighbours' differences (steps barely move it)."""
    return float(np.median(np.abs(np.diff(log_values))) / (_MAD_PER_SD * math.sqrt(2)))


def _welch_p(older: np.ndarray, newer: np.ndarray) -> float:
    """Two-sided p of Welch's t-test; 0 for two constant segments that differ, 1 for equal ones."""
    if older.var() == 0 and newer.var() == 0:
        return float(older.mean() == newer.mean())
    from scipy import stats

    with warnings.catch_warnings():  # one constant segment: scipy warns, the test still holds
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(newer, older, equal_var=False).pvalue)


def candidates(log_values: np.ndarray) -> list[int]:
    """PELT's change points (first index of each newer segment) at the noise-scaled penalty."""
    import ruptures

    spread = noise(log_values) or float(log_values.std())  # most neighbours equal: the whole series' spread stands in
    if spread == 0:
        return []
    penalty = PENALTY * spread**2 * math.log(len(log_values))
    ends = ruptures.Pelt(model="l2", min_size=_MIN_SEGMENT, jump=1).fit(log_values).predict(pen=penalty)
    return [int(end) for end in ends[:-1]]


def tested(log_values: np.ndarray, indices: list[int]) -> list[ChangePoint]:
    """Each change point with the segments either side; the weakest insignificant one dropped until none is left."""
    kept = list(indices)
    while True:
        bounds = [0, *kept, len(log_values)]
        found = []
        for k, index in enumerate(kept):
            older, newer = log_values[bounds[k] : index], log_values[index : bounds[k + 2]]
            found.append(ChangePoint(index, math.exp(older.mean()), math.exp(newer.mean()), _welch_p(older, newer)))
        weakest = max(found, key=lambda point: point.p_value, default=None)
        if weakest is None or weakest.p_value <= MAX_P:
            return found
        kept.remove(weakest.index)


def change_points(values: list[float]) -> list[ChangePoint]:
    """The significant steps of a series of positive values, oldest first; none for fewer than two segments' worth."""
    if len(values) < MIN_POINTS:
        return []
    log_values = np.log(np.asarray(values, dtype=float))
    return tested(log_values, candidates(log_values))
