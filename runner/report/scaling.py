"""Core scaling: aggregate throughput of 1, 2, 4, ... copies against linear, and where contention sets in.

A sweep over `measure.copies` (`+experiment=core_scaling`) gets `plots/core_scaling.png` and `scaling.md`.
Efficiency at k copies is their steps per second together (over the wall-clock window of their timed steps)
over k times one copy's.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.report.reader import metric, variant

CONTENTION_EFFICIENCY = 0.90


@dataclass(frozen=True)
class ScalingPoint:
    """One job of a scaling sweep: its copies, summed throughput and efficiency against linear."""

    copies: int
    throughput: float  # steps per second of all copies together, over the window of their timed steps
    efficiency: float
    stable: bool = True  # both this run's and the one-copy run's timing stable: only then is the efficiency a finding

    def per_copy(self) -> float:
        """One copy's share of the steps per second: the rate the contention verdict compares."""
        return self.throughput / self.copies

    def efficiency_text(self) -> str:
        """The efficiency as the report states it: not stated from unstable timing."""
        return f"{self.efficiency:.0%}" if self.stable else "not stated: timing unstable"


def scaling_curves(runs: list[Run]) -> dict[str, list[ScalingPoint]]:
    """Per variant with a one-copy run (measure.copies=1) and at least one more, its points by copies."""
    by_variant: dict[str, dict[int, Run]] = {}
    for run in runs:
        k = metric(run, names.SCALING_COPIES)  # None for a run without copies
        if run.info.status == JobStatus.FINISHED and k is not None and metric(run, names.SCALING_THROUGHPUT):
            by_variant.setdefault(variant(run), {})[int(k)] = run

    def point(k: int, run: Run, single: Run) -> ScalingPoint:
        total = metric(run, names.SCALING_THROUGHPUT) or 0.0
        stable = all(r.data.tags.get(names.TAG_TIMING_STABLE) != "false" for r in (run, single))
        return ScalingPoint(k, total, total / (k * (metric(single, names.SCALING_THROUGHPUT) or 0.0)), stable)

    return {
        name: [point(k, run, by_copies[1]) for k, run in sorted(by_copies.items())]
        for name, by_copies in sorted(by_variant.items())
        if 1 in by_copies and len(by_copies) >= 2
    }


def contention_onset(points: list[ScalingPoint]) -> int | None:
    """The fewest copies at which each copy gets under 90% of the best per-copy rate at fewer copies.

    The best so far, not one copy's: a copy with fewer threads can do better per copy than one with all of them.
    """
    best = 0.0
    for point in points:
        if best and point.per_copy() < CONTENTION_EFFICIENCY * best:
            return point.copies
        best = max(best, point.per_copy())
    return None


def scaling_report(curves: dict[str, list[ScalingPoint]]) -> str:
    """Markdown: per variant, throughput and efficiency at each level, and where contention sets in."""
    lines = []
    for name, points in curves.items():
        onset = contention_onset(points)
        verdict = f"contention from {onset} copies" if onset else "no contention: each copy keeps 90% of its best rate"
        lines += [
            f"{name}: {verdict}",
            "",
            # every column from the same rate (steps over the timed window), not a median step beside a mean rate
            "| copies | steps/s (all copies) | steps/s per copy | efficiency |",
            "|---|---|---|---|",
            *(f"| {p.copies} | {p.throughput:.1f} | {p.per_copy():.1f} | {p.efficiency_text()} |" for p in points),
            "",
        ]
    return "\n".join(lines).rstrip()
