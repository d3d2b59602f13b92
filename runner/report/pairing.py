"""How two runs' step times compare: round by round where they share rounds, else unpaired.

Runs timed in the same rounds saw the same stretches of the host: a slow stretch cancels in that round's ratio.
Runs from different rounds, or older runs without rounds, go to Welch's test on their per-process medians.
What the rounds share cancels; what moves between sweeps does not, so a paired interval is widened to where the
same pair's earlier sweeps on this host landed (issue 52: unwidened, 3 of 8 reruns fell inside), and what each
worker saw within itself does not either, so it is at least the two runs' workers' spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.measure.stability import MAX_EARLIER_RUNS, between_runs
from runner.measure.stats import TimeRatio, paired_time_ratio, time_ratio
from runner.report.reader import Rounds, rounds, share_rounds

# earlier sweeps count where they ran as this one: the same host, at the same commit
_PLACE_TAGS = (names.TAG_HOST, names.TAG_GIT_COMMIT)


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


def earlier_sweeps(client: MlflowClient, run: Run, baseline: Run) -> list[float]:
    """Run over baseline in each earlier sweep that timed both configurations in shared rounds, newest first.

    FINISHED, on the run's host at its commit: the runs a run's own interval counts (`earlier_medians`).
    """
    by_rounds: dict[str, dict[str, Run]] = {}
    for side in (baseline, run):
        query = f"tags.`{names.TAG_CONFIG_HASH}` = '{side.data.tags.get(names.TAG_CONFIG_HASH)}'"
        for other in client.search_runs([run.info.experiment_id], query, order_by=["start_time DESC"]):
            rounds_id = other.data.tags.get(names.TAG_ROUNDS_ID)
            same_place = all(other.data.tags.get(tag) == run.data.tags.get(tag) for tag in _PLACE_TAGS)
            if other.info.status == JobStatus.FINISHED and same_place and rounds_id:
                by_rounds.setdefault(rounds_id, {}).setdefault(side.info.run_id, other)
    by_rounds.pop(run.data.tags.get(names.TAG_ROUNDS_ID, ""), None)  # this sweep's own pair
    pairs = [(pair[baseline.info.run_id], pair[run.info.run_id]) for pair in by_rounds.values() if len(pair) == 2]
    ratios = []
    for earlier_baseline, earlier_run in sorted(pairs, key=lambda pair: -pair[1].info.start_time)[:MAX_EARLIER_RUNS]:
        estimate = compare_times(rounds(client, earlier_baseline), rounds(client, earlier_run)).estimate
        if estimate is not None:
            ratios.append(estimate.ratio)
    return ratios


def with_earlier_sweeps(estimate: TimeRatio, earlier_ratios: list[float]) -> TimeRatio:
    """The interval widened to where the next sweep's ratio may land, as `between_runs` states a run's.

    From this and at least two earlier sweeps' ratios; unchanged with fewer, or where the rounds' own is wider.
    """
    drift = between_runs(earlier_ratios, estimate.ratio)
    return estimate if drift is None else _widened(estimate, math.log1p(drift.next_run))


def with_workers_spread(estimate: TimeRatio, baseline_pct: float | None, new_pct: float | None) -> TimeRatio:
    """A paired ratio's interval at least as wide as the two runs' workers' own spread (`time/worker_spread_pct`).

    Pairing cancels what a round shared, not what each worker saw within itself; a few rounds' ratios can agree by
    chance, and then their t interval is narrower than that (issue 52: +-0.5%, an interleaved Timer 1.6% off; at
    8x512x1024 such CIs covered the Timer in 17 of 20 trials, floored 19 of 20, docs/benchmarks.md). The ratio's
    half-width is the root-sum-square of the two medians'. Unchanged where a run states none (logged before it).
    """
    return _with_halves(estimate, [baseline_pct, new_pct], 1.0)


def with_stated_intervals(estimate: TimeRatio, baseline: Run, run: Run) -> TimeRatio:
    """An unpaired ratio's interval widened by the two runs' stated intervals, which take in the host's drift.

    Runs timed apart share no rounds, so what the host did between them stays in their ratio; each run's +-X%
    is t x sqrt(2) of its sd, so the ratio's half-width is their root-sum-square over sqrt(2).
    """
    stated = [r.data.metrics.get(names.STEP_MEDIAN_UNCERTAINTY_PCT) for r in (baseline, run)]
    return _with_halves(estimate, stated, math.sqrt(2))


def _with_halves(estimate: TimeRatio, percents: list[float | None], per_sd: float) -> TimeRatio:
    """The interval at least the root-sum-square of two runs' halves (percent, `per_sd` sds each) over `per_sd`."""
    halves = [math.log1p(pct / 100) for pct in percents if pct is not None]
    return _widened(estimate, math.hypot(*halves) / per_sd) if len(halves) == 2 else estimate


def _widened(estimate: TimeRatio, half: float) -> TimeRatio:
    """The interval at least `half` (log) either side of the ratio."""
    low, high = estimate.ratio * math.exp(-half), estimate.ratio * math.exp(half)
    return replace(estimate, low=min(estimate.low, low), high=max(estimate.high, high))
