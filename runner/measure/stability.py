"""How far the next identical run's median may land, and the console's note when that is over 5% (docs/trust.md).

A run's blocks and worker processes show what moves its median inside the run; only the configuration's earlier
runs on this host show the host's drift between runs, which on a noisy VM is most of it (issue 52). The interval
takes in both. A wide one is a note, not a flag: on a noisy host every run's is wide, and comparisons paired by
round still hold. `timing.stable` is set false where a comparison asked for does not resolve (`report_sweep`).
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


def block_medians(step_ms: list[list[list[float]]]) -> list[list[float]]:
    """The median of each of `BLOCKS` equal runs of consecutive steps, a list per process and repeat."""
    medians = []
    for process in step_ms:
        for repeat in process:
            ends = stretch_ends(len(repeat), min(BLOCKS, len(repeat)))
            medians.append([float(np.median(repeat[start:end])) for start, end in zip([0, *ends], ends, strict=False)])
    return medians


def _mean_spread(values: list[float], source: str) -> Spread:
    """The standard error of the values' log mean, which the run's median stands for."""
    logs = np.log(values)
    if len(logs) < 2:
        return Spread(0.0, 0, source)
    return Spread(float(logs.std(ddof=1) / np.sqrt(len(logs))), len(logs) - 1, source)


def within_run(step_ms: list[list[list[float]]], process_medians: list[float]) -> Spread:
    """What the run itself shows: its blocks (layouts, drift in a process) or its processes, whichever is wider."""
    spreads = [_mean_spread([median for repeat in block_medians(step_ms) for median in repeat], "its blocks")]
    if len(process_medians) > 1:
        spreads.append(_mean_spread(process_medians, f"its {len(process_medians)} worker processes"))
    return max(spreads, key=lambda spread: spread.next_run)


def worker_spread(step_ms: list[list[list[float]]]) -> float:
    """About the 95% half-width, relative, of the run's median from its blocks' spread about their own repeat's mean.

    What each worker saw within itself (its memory layouts, drift inside it) is its own: pairing by round does not
    cancel it, so it is the least a paired interval can be, where a few rounds' ratios may agree by chance. The
    blocks' pooled sd over the root of their count is the log median's standard error, t(0.975, df) of them.
    """
    repeats = [np.log(blocks) for blocks in block_medians(step_ms)]
    count = sum(len(blocks) for blocks in repeats)
    df = count - len(repeats)
    if df < 1:
        return 0.0
    squares = sum(float(((blocks - blocks.mean()) ** 2).sum()) for blocks in repeats)
    return float(np.expm1(t_quantile(0.975, df) * np.sqrt(squares / df / count)))


def between_runs(earlier_ms: list[float], median_ms: float) -> Spread | None:
    """The spread of this run's and the configuration's earlier runs' medians: the host's drift included."""
    if len(earlier_ms) < MIN_EARLIER_RUNS:
        return None
    logs = np.log([*earlier_ms[:MAX_EARLIER_RUNS], median_ms])
    source = f"{len(logs)} runs of this configuration on this host"
    return Spread(float(logs.std(ddof=1)), len(logs) - 1, source)


def noise_note(stated: Spread, steadier: str) -> str | None:
    """The console's note when the next run may land over 5% away: by how much, from what, and what still holds.

    `steadier`: what narrows the run's own part (more worker processes, `Backend.steadier_measurement`).
    """
    if stated.next_run <= MAX_UNCERTAINTY:
        return None
    return (
        f"this host is noisy: the next identical run may land +-{stated.next_run:.1%} from this one (from "
        f"{stated.source}; over {MAX_UNCERTAINTY:.0%}); comparisons paired by round (one sweep, or gate --against) "
        f"cancel what the rounds share and still hold; {steadier} narrows what the run itself measures"
    )
