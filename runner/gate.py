"""A regression gate for CI: `python -m runner.gate --baseline REF --fail-above PCT`.

Each compared job (the latest sweep, --sweep or --runs) is paired with the FINISHED baseline
run of the same configuration (its config hash; a single run against a single baseline pairs as
is). A job fails the gate only when its step time exceeds the baseline's by more than PCT
percent with significance, its p-values corrected across the jobs with Holm's method, so a
sweep of twenty jobs does not raise a false alarm twenty times as often. A job and baseline
timed in the same rounds are tested round by round (a one-sided t-test on the log per-round
ratios, on the rounds both have); others with a one-sided Welch test on the log per-process
medians. The `test` column says which.

A job passes as "ok" only when its 95% interval stays within the margin; one whose interval
reaches past it without significance passes too, marked "could not judge" (the gate fails on
evidence only: its "caught from" says what the spread lets it catch). The times shown are
geometric means of the medians the test compares.

Exit status: 0 passed; 1 a regression; 2 the baseline or the runs could not be found; 3 a
compared job did not finish (FAILED, KILLED, still RUNNING) or no job could be tested, said in
one line on stderr. A regression outranks 3: both are said.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.entities import Run
from scipy.stats import gmean

from runner import names
from runner.compare import (
    FORMATS,
    add_selection_arguments,
    find_run,
    open_experiment,
    render,
    selected_runs,
)
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, TimeRatio, holm
from runner.report.pairing import compare_times
from runner.report.reader import Rounds, label, rounds, sweep_children

REGRESSION_EXIT, NOT_FOUND_EXIT, INCOMPLETE_EXIT = 1, 2, 3
TIMES_LEGEND = (
    "baseline ms, job ms: geometric mean of each run's per-process median step times (the values the test compares;"
    " a paired test compares the rounds both runs have, round by round)"
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
    # which test: "paired, 5 rounds" or "unpaired, 3+3 workers"
    test: str = "-"


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
    by_hash: dict[str, Run] = {}
    for run in sorted((r for r in baselines if r.info.status == JobStatus.FINISHED), key=lambda r: r.info.start_time):
        by_hash[run.data.tags.get(names.TAG_CONFIG_HASH, "")] = run
    job_ids = {job.info.run_id for job in jobs}
    pairs = []
    for job in jobs:
        base = by_hash.get(job.data.tags.get(names.TAG_CONFIG_HASH, ""))
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


def catchable(estimate: TimeRatio, margin: float) -> float:
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
    note = " (timing unstable)" if unstable else ""
    if pair.p_holm < SIGNIFICANCE:
        return f"REGRESSION: slower by more than {margin:.0%}{note}"
    if pair.estimate.high < 1:
        return f"faster{note}"
    if not_judged(pair.estimate, pair.p_holm, margin):
        reach = pair.estimate.high - 1
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
    table = []
    for pair in pairs:
        est = pair.estimate

        def typical(samples: list[float]) -> str:
            return f"{float(gmean(samples)):.4f}" if samples else "-"

        table.append({
            "job": label(pair.job),
            "baseline ms": typical(pair.baseline_ms),
            "job ms": typical(pair.job_ms),
            "change (95% CI)": "-" if est is None else
            f"{est.ratio - 1:+.1%} [{est.low - 1:+.1%}, {est.high - 1:+.1%}]",
            "test": pair.test,
            f"p (> +{margin:.0%}, Holm)": "-" if est is None else f"{pair.p_holm:.3f}",
            "caught from": "-" if est is None else f"+{catchable(est, margin):.1%}",
            "verdict": verdict(pair, margin),
            "run id": pair.job.info.run_id,
            "baseline id": pair.baseline.info.run_id if pair.baseline is not None else "-",
        })  # fmt: skip
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m runner.gate", description=__doc__.splitlines()[0])
    add_selection_arguments(parser)
    parser.add_argument("--baseline", required=True, help="KEY=VALUE (a tag), a sweep parent, or a run id")
    parser.add_argument(
        "--fail-above", type=float, required=True, metavar="PCT",
        help="fail on a job significantly slower than its baseline by more than PCT percent",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    args = parser.parse_args(argv)
    if args.fail_above < 0:
        parser.error(f"--fail-above {args.fail_above}: give a percentage >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Print the gate's table; exit 1 when a job regressed, else 3 when a job did not finish or none was tested."""
    args = parse_args(argv)
    margin = args.fail_above / 100
    try:
        client, experiment_id = open_experiment(args)
        jobs, _ = selected_runs(client, experiment_id, args)
        baselines = baseline_runs(client, experiment_id, args.baseline)
    except SystemExit as missing:
        print(missing, file=sys.stderr)
        return NOT_FOUND_EXIT
    pairs = pair_up(jobs, baselines)
    judge(client, pairs, margin)
    table = rows(pairs, margin)
    if table or args.format == "json":
        print(render(table, args.format))
    tested = [(p, p.estimate) for p in pairs if p.estimate is not None]
    regressions = [p for p, _ in tested if p.p_holm < SIGNIFICANCE]
    if args.format != "json":
        print(f"\n{TIMES_LEGEND}")
        if tested:
            detectable = [catchable(estimate, margin) for _, estimate in tested]
            print(
                f"smallest slowdown the gate catches 80% of the time here: +{min(detectable):.1%} to "
                f"+{max(detectable):.1%}; more worker processes (measure.processes) bring it nearer the margin"
            )
        unjudged = sum(not_judged(estimate, p.p_holm, margin) for p, estimate in tested)
        print(
            f"gate: {len(regressions)} regression(s) above +{args.fail_above:g}% in {len(tested)} tested job(s)"
            + (f", {unjudged} of them not judged" if unjudged else "")
            + f"; {len(pairs) - len(tested)} not tested"
        )
    why = not_passed(pairs, margin)
    if why is not None:
        print(f"gate: not passed: {why}", file=sys.stderr)
    return REGRESSION_EXIT if regressions else INCOMPLETE_EXIT if why is not None else 0


if __name__ == "__main__":
    sys.exit(main())
