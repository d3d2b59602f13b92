"""How far the next identical run's median may land; and `timing.stable`, whether the run measured itself to 5%.

A run's blocks and worker processes show what moves its median inside the run; only the configuration's earlier
runs on this host show the host's drift between runs, which on a noisy VM is most of it (issue 52). The interval
takes in both. The flag takes in only the run's own spread: no longer measurement narrows the host's drift, and a
comparison paired by round cancels it, so a drifting host gets a note saying so, not a flag on every run
(docs/trust.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runner.measure.loop import stretch_ends
from runner.measure.stats import t_quantile

# blocks of consecutive steps per process and repeat (a CPU worker's memory layouts: one each)
BLOCKS = 8
# the "5% off" a user bets on: the next run's median may land at most this far on either side
MAX_UNCERTAINTY = 0.05
# the configuration's earlier runs (with this one, 3: two degrees of freedom) that show the host's drift
MIN_EARLIER_RUNS = 2
# and the newest this many of them: the host of last month is not the host of today
MAX_EARLIER_RUNS = 10


@dataclass(frozen=True)
class Spread:
    """The sd of a run's log median as one source shows it, with its degrees of freedom."""

    sd: float
    df: int
    source: str  # for the reason: "its blocks", "its 3 worker processes", "5 runs of this configuration ..."

    @property
    def next_run(self) -> float:
        """About the 95% half-width, relative, within which the next identical run's median lands (two runs' sd)."""
        if self.df < 1:
            return 0.0
        return float(np.expm1(t_quantile(0.975, self.df) * np.sqrt(2) * self.sd))


def block_medians(step_ms: list[list[list[float]]]) -> list[float]:
    """The median of each of `BLOCKS` equal runs of consecutive steps, per process and repeat."""
    medians = []
    for process in step_ms:
        for repeat in process:
            ends = stretch_ends(len(repeat), min(BLOCKS, len(repeat)))
            medians += [float(np.median(repeat[start:end])) for start, end in zip([0, *ends], ends, strict=False)]
    return medians


def _mean_spread(values: list[float], source: str) -> Spread:
    """The standard error of the values' log mean, which the run's median stands for."""
    logs = np.log(values)
    if len(logs) < 2:
        return Spread(0.0, 0, source)
    return Spread(float(logs.std(ddof=1) / np.sqrt(len(logs))), len(logs) - 1, source)


def within_run(step_ms: list[list[list[float]]], process_medians: list[float]) -> Spread:
    """What the run itself shows: its blocks (layouts, drift in a process) or its processes, whichever is wider."""
    spreads = [_mean_spread(block_medians(step_ms), "its blocks")]
    if len(process_medians) > 1:
        spreads.append(_mean_spread(process_medians, f"its {len(process_medians)} worker processes"))
    return max(spreads, key=lambda spread: spread.next_run)


def between_runs(earlier_ms: list[float], median_ms: float) -> Spread | None:
    """The spread of this run's and the configuration's earlier runs' medians: the host's drift included."""
    if len(earlier_ms) < MIN_EARLIER_RUNS:
        return None
    logs = np.log([*earlier_ms[:MAX_EARLIER_RUNS], median_ms])
    source = f"{len(logs)} runs of this configuration on this host"
    return Spread(float(logs.std(ddof=1)), len(logs) - 1, source)


def instability_reasons(spread: Spread) -> list[str]:
    """Why this run measured itself too loosely to resolve 5% against an identical run; empty when it did not."""
    if spread.next_run > MAX_UNCERTAINTY:
        return [
            f"its own measurement resolves a difference of +-{spread.next_run:.1%} at best (from {spread.source}; "
            f"over {MAX_UNCERTAINTY:.0%})"
        ]
    return []


def host_drift_note(drift: Spread | None) -> str | None:
    """The console's note where the configuration's runs moved more than 5%: how much, and which comparisons hold."""
    if drift is None or drift.next_run <= MAX_UNCERTAINTY:
        return None
    return (
        f"this host is noisy: it moves this configuration's median by about {drift.sd:.1%} between runs (sd over "
        f"{drift.source}), so the next run may land +-{drift.next_run:.1%} from this one; comparisons paired by "
        "round (one sweep, or gate --against) cancel what the rounds share and still hold"
    )
