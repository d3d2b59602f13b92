"""How two runs' step times compare: round by round where they share rounds, else unpaired.

Runs timed in the same rounds saw the same stretches of the host: a slow stretch cancels in that round's ratio.
Runs from different rounds, or older runs without rounds, go to Welch's test on their per-process medians.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.measure.stats import TimeRatio, paired_time_ratio, time_ratio
from runner.report.reader import Rounds, share_rounds


@dataclass(frozen=True)
class TimeComparison:
    """The estimate of new over baseline, which test gave it, and the medians it compared."""

    # None when a side has fewer than two medians (or the runs fewer than two rounds in common)
    estimate: TimeRatio | None
    test: str  # for the tables' `test` column: "paired, 5 rounds" or "unpaired, 3+3 workers"
    baseline_ms: list[float]
    new_ms: list[float]


def compare_times(baseline: Rounds, new: Rounds, margin: float = 0.0) -> TimeComparison:
    """Paired on the rounds both runs have when they share rounds; unpaired otherwise."""
    if share_rounds(baseline, new):
        common = sorted(baseline.medians.keys() & new.medians.keys())
        base_ms = [baseline.medians[number] for number in common]
        new_ms = [new.medians[number] for number in common]
        test = f"paired, {len(common)} round{'' if len(common) == 1 else 's'}"
        return TimeComparison(paired_time_ratio(base_ms, new_ms, margin), test, base_ms, new_ms)
    base_ms, new_ms = baseline.in_order(), new.in_order()
    test = f"unpaired, {len(base_ms)}+{len(new_ms)} workers"
    return TimeComparison(time_ratio(base_ms, new_ms, margin), test, base_ms, new_ms)
