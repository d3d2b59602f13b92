"""The regression gate's verdicts: a job against its baseline, tested, corrected across jobs, said in a row.

The gate compares stored runs (`--baseline`: `pair_up`, then `judge`, Holm across the jobs) or both sides it
measured itself (`--against`). A job fails only on evidence: slower than the margin with significance; an
interval reaching past the margin without it is "could not judge".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.entities import Run
from scipy.stats import gmean

from runner import names
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, TimeRatio, holm
from runner.report.pairing import compare_times
from runner.report.reader import Rounds, configuration, label, rounds, sweep_children
from runner.report.selection import find_run

TIMES_LEGEND = (
    "baseline ms, job ms: geometric mean of each run's per-process median step times (the values the test compares;"
    " a paired test compares the rounds both runs have, round by round)"
)
PAIRED_LEGEND = (
    "baseline ms, job ms: geometric mean of each side's per-round medians; change: the median ratio of the server "
    "pairs (each the ratio of its rounds' geometric means), its interval and p from a paired t-test on their log ratios"
)


@dataclass
class Pair:
    """A job, its baseline run and what the test found."""

    job: Run
    baseline: Run | None
    estimate: TimeRatio | None = None
    p_holm: float = 1.0
    # per-process medians in ms: the test's data (a paired test's: the rounds both runs have)
    job_ms: list[float] = field(default_factory=list)
    baseline_ms: list[float] = field(default_factory=list)
    test: str = "-"  # which test: "paired, 5 rounds" or "unpaired, 3+3 workers"


def baseline_runs(client: MlflowClient, experiment_id: str, ref: str) -> list[Run]:
    """The runs --baseline names: `KEY=VALUE` (a tag, e.g. runner.git_commit=abc123), a sweep, or a run."""
    if "=" in ref:
        key, value = ref.split("=", 1)
        query = f"tags.`{key}` = '{value}' and attributes.status = '{JobStatus.FINISHED}'"
        runs = [r for r in client.search_runs([experiment_id], query, order_by=["start_time DESC"])
                if r.data.tags.get(names.TAG_SWEEP) != "true"]  # fmt: skip
        if not runs:
            raise SystemExit(f"error: --baseline {ref!r}: no FINISHED job run has tag {key} = {value!r}")
        return runs
    run = find_run(client, experiment_id, ref, "--baseline")
    if run.data.tags.get(names.TAG_SWEEP) == "true":
        return sweep_children(client, experiment_id, run)
    return [run]


def pair_up(jobs: list[Run], baselines: list[Run]) -> list[Pair]:
    """Each job with the newest FINISHED baseline run of its configuration (not itself)."""
    if len(jobs) == 1 and len(baselines) == 1:
        return [Pair(jobs[0], baselines[0])]
    finished = sorted((r for r in baselines if r.info.status == JobStatus.FINISHED), key=lambda r: r.info.start_time)
    by_configuration = {configuration(run): run for run in finished}  # the newest wins
    job_ids = {job.info.run_id for job in jobs}
    pairs = []
    for job in jobs:
        base = by_configuration.get(configuration(job))
        pairs.append(Pair(job, base if base is not None and base.info.run_id not in job_ids else None))
    return pairs


def judge(client: MlflowClient, pairs: list[Pair], margin: float) -> None:
    """Test every pair that can be tested, then correct the p-values across them (Holm)."""
    tested = []
    for pair in pairs:
        job = rounds(client, pair.job) if pair.job.info.status == JobStatus.FINISHED else Rounds({}, None)
        pair.job_ms = job.in_order()
        if pair.baseline is not None and pair.baseline.info.status == JobStatus.FINISHED:
            comparison = compare_times(rounds(client, pair.baseline), job, margin)
            pair.baseline_ms, pair.job_ms = comparison.baseline_ms, comparison.new_ms
            pair.estimate = comparison.estimate  # None without two medians a side
            if pair.estimate is not None:
                pair.test = comparison.test
                tested.append(pair)
    for pair, adjusted in zip(tested, holm([p.estimate.p_slower for p in tested if p.estimate]), strict=True):
        pair.p_holm = adjusted


def _catchable(estimate: TimeRatio, margin: float) -> float:
    """The smallest slowdown the gate would catch 80% of the time: the margin, plus what the spread hides."""
    return (1 + margin) * (1 + estimate.detectable) - 1


def not_judged(estimate: TimeRatio, p_holm: float, margin: float) -> bool:
    """Neither shown slower than the margin nor shown within it: the interval reaches past the margin."""
    return p_holm >= SIGNIFICANCE and estimate.high > 1 + margin


def verdict(pair: Pair, margin: float) -> str:
    """What the gate concludes for one job."""
    if pair.job.info.status != JobStatus.FINISHED:
        return f"not tested: the job is {pair.job.info.status}"
    if pair.baseline is None:
        return "no baseline for this configuration"
    if pair.baseline.info.status != JobStatus.FINISHED:
        return f"not tested: the baseline is {pair.baseline.info.status}"
    if pair.estimate is None:
        return "not tested: needs measure.processes >= 2 in both runs"
    unstable = any(r.data.tags.get(names.TAG_TIMING_STABLE) == "false" for r in (pair.job, pair.baseline))
    return judged(pair.estimate, pair.p_holm, margin, " (timing unstable)" if unstable else "")


def judged(estimate: TimeRatio, p: float, margin: float, note: str = "") -> str:
    """The verdict on a tested job from its estimate and its (corrected) p-value."""
    if p < SIGNIFICANCE:
        return f"REGRESSION: slower by more than {margin:.0%}{note}"
    if estimate.high < 1:
        return f"faster{note}"
    if not_judged(estimate, p, margin):
        reach = estimate.high - 1
        return f"could not judge: its 95% interval reaches {reach:+.1%}, past the +{margin:.0%} margin{note}"
    return f"ok{note}"


def not_passed(pairs: list[Pair], margin: float) -> str | None:
    """Why the gate cannot pass these jobs whatever their times: one did not finish, or none was tested."""
    unfinished = Counter(p.job.info.status for p in pairs if p.job.info.status != JobStatus.FINISHED)
    if unfinished:
        statuses = ", ".join(f"{count} {status}" for status, count in unfinished.items())
        return f"{unfinished.total()} of {len(pairs)} job(s) did not finish ({statuses})"
    if not any(p.estimate is not None for p in pairs):
        reasons = "; ".join(f"{n} {why}" for why, n in Counter(verdict(p, margin) for p in pairs).items())
        return f"no job could be tested ({reasons or 'no job runs'})"
    return None


def rows(pairs: list[Pair], margin: float) -> list[dict[str, str]]:
    """One row per job; its times are geometric means of the per-process medians, as the test sees them."""
    return [
        {
            "job": label(pair.job),
            **measured(pair.baseline_ms, pair.job_ms, pair.estimate, pair.p_holm, margin, pair.test, "Holm"),
            "verdict": verdict(pair, margin),
            "run id": pair.job.info.run_id,
            "baseline id": pair.baseline.info.run_id if pair.baseline is not None else "-",
        }
        for pair in pairs
    ]


def measured(
    base_ms: list[float], job_ms: list[float], est: TimeRatio | None, p: float, margin: float, test: str, corrected: str
) -> dict[str, str]:
    """A row's times, change, the `test` that gave it, its p (`corrected` by which method), what the gate can catch."""

    def typical(samples: list[float]) -> str:
        return f"{float(gmean(samples)):.4f}" if samples else "-"

    return {
        "baseline ms": typical(base_ms),
        "job ms": typical(job_ms),
        "change (95% CI)": "-" if est is None else f"{est.ratio - 1:+.1%} [{est.low - 1:+.1%}, {est.high - 1:+.1%}]",
        "test": test,
        f"p (> +{margin:.0%}, {corrected})": "-" if est is None else f"{p:.3f}",
        "caught from": "-" if est is None else f"+{_catchable(est, margin):.1%}",
    }


def summary(
    tested: list[tuple[TimeRatio, float]], untested: int, fail_above: float, closer: str, failed_checks: int
) -> str:
    """The lines under the table: what the spread lets the gate catch (`closer` narrows it), and the counts.

    `failed_checks` jobs failed a check besides their time (output, accuracy, memory): the verdict column judges
    time only, so the count line says so too, for a reader of stdout alone.
    """
    margin = fail_above / 100
    lines = []
    if tested:
        detectable = [_catchable(estimate, margin) for estimate, _ in tested]
        reach = f"+{min(detectable):.1%}" + (f" to +{max(detectable):.1%}" if len(detectable) > 1 else "")
        lines.append(
            f"smallest slowdown the gate catches 80% of the time here: {reach}; {closer} bring it nearer the margin"
        )
    regressions = sum(p < SIGNIFICANCE for _, p in tested)
    unjudged = sum(not_judged(estimate, p, margin) for estimate, p in tested)
    counts = f"gate: {regressions} regression(s) above +{fail_above:g}% in {len(tested)} tested job(s)"
    checked = f"; {failed_checks} failed a check besides time (the lines above)" if failed_checks else ""
    lines.append(
        counts + (f", {unjudged} of them not judged" if unjudged else "") + f"; {untested} not tested{checked}"
    )
    return "\n".join(lines)
