"""A regression gate for CI: `python -m runner.gate --baseline REF --fail-above PCT`, or `--against REV`.

With `--against REV [--rounds N] [OVERRIDES...]` the gate measures both sides itself, in one
invocation: the baseline from a temporary git worktree of REV, the candidate from this tree,
each with its own code and conf/, one fresh worker of each side per round in a random order.
The job is judged on the rounds' paired ratios (`paired_time_ratio`), with the verdicts below.
Exit status: 0 passed, 1 a regression, 2 no such commit (or no git checkout), 3 a side failed.

With `--baseline`, stored runs are compared: each compared job (the latest sweep, --sweep or
--runs) is paired with the FINISHED baseline run of the same configuration (its config hash; a
single run against a single baseline pairs as is). A job fails the gate only when its step time
exceeds the baseline's by more than PCT percent with significance, its p-values corrected across
the jobs with Holm's method, so a sweep of twenty jobs does not raise a false alarm twenty times
as often. A job and baseline timed in the same rounds are tested round by round (a one-sided
t-test on the log per-round ratios, on the rounds both have); others with a one-sided Welch
test on the log per-process medians. The `test` column says which.

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
import json
import math
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Run
from scipy.stats import gmean

from runner import CONF_DIR, names
from runner.execute.processes import ChildFailed
from runner.execute.rounds import round_orders, run_round
from runner.execute.serve import MODULE, SideFailed, SideServer
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, TimeRatio, holm, paired_time_ratio
from runner.report.pairing import compare_times
from runner.report.reader import Rounds, label, rounds, sweep_children
from runner.report.selection import add_selection_arguments, find_run, open_experiment, selected_runs
from runner.report.table import FORMATS, render
from runner.signals import exit_code_of, skip_final_collections, stop_on_signals
from runner.tracking.worktree import NoCheckout, checkout, commit_of, snapshot_of

REGRESSION_EXIT, NOT_FOUND_EXIT, INCOMPLETE_EXIT = 1, 2, 3
TIMES_LEGEND = (
    "baseline ms, job ms: geometric mean of each run's per-process median step times (the values the test compares;"
    " a paired test compares the rounds both runs have, round by round)"
)
PAIRED_LEGEND = (
    "baseline ms, job ms: geometric mean of each side's per-round medians; change: the median ratio of the server "
    "pairs (each the ratio of its rounds' geometric means), its interval and p from a paired t-test on their log ratios"
)
# --against: the two sides, the rounds by default, the project's tree (the candidate, and where
# the baseline's worktree comes from) and the server each side's tree must have
SIDES = ("baseline", "candidate")
# 60, twenty server pairs: on a quiet 2-core host 0 of 20 A/A gates alarmed, 143 s a gate, and 10%
# more work was caught in 8 of 8 gates (30 rounds: 3 of 4), 134-177 s each (docs/benchmarks.md)
ROUNDS = 60
# Rounds one pair of side servers runs before both start afresh. Every worker of a side starts from
# its server, and under load one side of an A/A gate read 15% slower in 28 of 30 rounds: whatever
# a server started with holds for all its rounds, so the test pairs server pairs, not rounds.
ROUNDS_PER_SERVERS = 3
PROJECT_TREE = CONF_DIR.parent
SERVER_FILE = Path(*MODULE.split(".")).with_suffix(".py")


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
    baseline_ms: list[float],
    job_ms: list[float],
    est: TimeRatio | None,
    p: float,
    margin: float,
    test: str,
    correction: str,
) -> dict[str, str]:
    """A row's times, change, the `test` that gave it, its p (with its `correction`), what the gate can catch."""

    def typical(samples: list[float]) -> str:
        return f"{float(gmean(samples)):.4f}" if samples else "-"

    return {
        "baseline ms": typical(baseline_ms),
        "job ms": typical(job_ms),
        "change (95% CI)": "-" if est is None else f"{est.ratio - 1:+.1%} [{est.low - 1:+.1%}, {est.high - 1:+.1%}]",
        "test": test,
        f"p (> +{margin:.0%}, {correction})": "-" if est is None else f"{p:.3f}",
        "caught from": "-" if est is None else f"+{catchable(est, margin):.1%}",
    }


def summary(tested: list[tuple[TimeRatio, float]], untested: int, fail_above: float, closer: str) -> str:
    """The lines under the table: what the spread lets the gate catch (`closer` narrows it), and the count."""
    margin = fail_above / 100
    lines = []
    if tested:
        detectable = [catchable(estimate, margin) for estimate, _ in tested]
        reach = f"+{min(detectable):.1%}" + (f" to +{max(detectable):.1%}" if len(detectable) > 1 else "")
        lines.append(
            f"smallest slowdown the gate catches 80% of the time here: {reach}; {closer} bring it nearer the margin"
        )
    regressions = sum(p < SIGNIFICANCE for _, p in tested)
    unjudged = sum(not_judged(estimate, p, margin) for estimate, p in tested)
    lines.append(
        f"gate: {regressions} regression(s) above +{fail_above:g}% in {len(tested)} tested job(s)"
        + (f", {unjudged} of them not judged" if unjudged else "")
        + f"; {untested} not tested"
    )
    return "\n".join(lines)


def progress(message: str) -> None:
    """A line on stderr while both sides run: a round takes seconds."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class SideRounds:
    """Both sides' per-round medians, the order each round ran the sides in, and the server pair that ran it."""

    seed: int
    orders: list[list[str]] = field(default_factory=list)
    ms: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    # per round, which pair of side servers (from 1) ran it
    servers: list[int] = field(default_factory=list)
    # whether both sides' workers took turns (runner.measure.turns), not one after the other
    turns: bool = False

    def per_servers(self, side: str) -> list[float]:
        """The side's geometric mean per server pair: the values the test pairs."""
        pairs = sorted(set(self.servers))
        return [
            float(gmean([ms for ms, pair in zip(self.ms[side], self.servers, strict=True) if pair == number]))
            for number in pairs
        ]


def rounds_per_servers(count: int) -> int:
    """How many of `count` rounds each pair of servers runs: `ROUNDS_PER_SERVERS`, fewer for three pairs at least.

    The test has one degree of freedom fewer than pairs: two pairs would leave one, whose t
    interval is too wide to judge anything.
    """
    return max(1, min(ROUNDS_PER_SERVERS, math.ceil(count / 3)))


def run_rounds(trees: dict[str, Path], overrides: list[str], count: int, seed: int) -> SideRounds:
    """Each side's first worker (its first call compiles; not counted), then the rounds in random orders.

    One worker of each side per round (`runner.execute.rounds`, taking turns where both sides'
    code and device can), in an order drawn afresh, so a slow stretch of the host falls on both
    sides of a round and cancels in its ratio. Every few rounds
    (`rounds_per_servers`) both sides' servers are started afresh, so what one server started
    with is one sample of the test, not a bias of its side.
    """
    result = SideRounds(seed)
    orders = round_orders([count] * len(SIDES), random.Random(seed))
    per_pair = rounds_per_servers(count)
    for pair, first in enumerate(range(0, count, per_pair), 1):
        last = min(first + per_pair, count)
        if pair > 1:
            progress(f"gate: servers {pair}: both sides' servers start afresh for rounds {first + 1}-{last} ...")
        with side_servers(trees, overrides) as servers:
            if pair == 1:  # the caches are on disk from then on: later servers' first workers count
                for side, server in servers.items():
                    progress(f"gate: {side}: a first worker (fills the compile caches; not counted) ...")
                    server.worker()
            result.turns = all(server.takes_turns for server in servers.values())
            for number in range(first + 1, last + 1):
                order = [SIDES[index] for index in orders[number - 1]]
                timed = run_round([servers[side] for side in order], number, result.turns)
                for side, ms in zip(order, timed, strict=True):
                    if isinstance(ms, ChildFailed):  # a side's worker failed: SideFailed, naming the side
                        raise ms
                    result.ms[side].append(ms)
                result.orders.append(order)
                result.servers.append(pair)
                times = ", ".join(f"{side} {result.ms[side][-1]:.4f} ms" for side in order)
                progress(f"gate: round {number}/{count} (servers {pair}): {times}")
    return result


@contextmanager
def side_servers(trees: dict[str, Path], overrides: list[str]) -> Iterator[dict[str, SideServer]]:
    """A worker server per side, started together, ready once both composed the job's config; stopped after."""
    servers: dict[str, SideServer] = {}
    try:
        for side, tree in trees.items():
            servers[side] = SideServer(side, tree, overrides)
        for server in servers.values():
            server.ready()
        yield servers
    finally:
        for server in servers.values():
            server.close()


def measure_both(rev: str, overrides: list[str], count: int, seed: int) -> tuple[str, SideRounds]:
    """The commit `rev` names and both sides' rounds, each side in a worktree of its own.

    The baseline is `rev`'s tree, the candidate this checkout as it is now (`snapshot_of`:
    uncommitted and untracked files included), so neither side's modules sit at paths of another shape.

    Raises:
        NoCheckout: no commit, no checkout, or a baseline without the side server.
        SideFailed: a side's config was refused or one of its workers failed.
    """
    commit = commit_of(PROJECT_TREE, rev)
    stop_on_signals()  # from here on SIGTERM too stops both servers and removes the worktree
    with checkout(PROJECT_TREE, commit) as baseline_tree, checkout(PROJECT_TREE, snapshot_of(PROJECT_TREE)) as tree:
        if not (baseline_tree / SERVER_FILE).is_file():
            raise NoCheckout(f"--against {rev}: its tree has no {SERVER_FILE.as_posix()} (the gate's worker server)")
        return commit, run_rounds({"baseline": baseline_tree, "candidate": tree}, overrides, count, seed)


def against(args: argparse.Namespace) -> int:
    """Run both sides round by round and judge the pairs; exit 1 on a regression, 2 no such commit, 3 a side failed."""
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    try:
        commit, timed = measure_both(args.against, args.overrides, args.rounds, seed)
    except NoCheckout as err:
        print(f"error: {err}", file=sys.stderr)
        return NOT_FOUND_EXIT
    except SideFailed as err:
        print(f"gate: not passed: {err}", file=sys.stderr)
        return INCOMPLETE_EXIT
    except KeyboardInterrupt as stop:  # the servers were stopped and the worktrees removed on the way out
        name = signal.Signals(exit_code_of(stop) - 128).name
        print(
            f"gate: stopped by {name}, no verdict: both sides' servers stopped, their worktrees removed",
            file=sys.stderr,
        )
        return exit_code_of(stop)
    margin = args.fail_above / 100
    base_ms, job_ms = timed.ms["baseline"], timed.ms["candidate"]
    estimate = paired_time_ratio(timed.per_servers("baseline"), timed.per_servers("candidate"), margin)
    assert estimate is not None  # --rounds >= 2: two server pairs at least
    taking = "in turns" if timed.turns else "one worker after the other"
    test = f"paired, {len(base_ms)} rounds on {max(timed.servers)} server pairs, {taking}"
    row = {
        "job": " ".join(args.overrides) or "(the default config)",
        **measured(base_ms, job_ms, estimate, estimate.p_slower, margin, test, "one job"),
        "verdict": judged(estimate, estimate.p_slower, margin),
        "baseline": f"{args.against} at {commit[:12]}",
        "rounds": f"{args.rounds} (seed {seed})",
    }
    if args.format == "json":
        rounds_ms = {
            "baseline rounds ms": base_ms,
            "job rounds ms": job_ms,
            "servers": timed.servers,
            "turns": timed.turns,
        }
        print(json.dumps([{**row, "orders": timed.orders, **rounds_ms}]))
    else:
        print(render([row], args.format))
        firsts = " ".join(order[0][0] for order in timed.orders)
        print(f"\n{PAIRED_LEGEND}\nwhich side ran first in each round (b baseline, c candidate): {firsts}")
        print(summary([(estimate, estimate.p_slower)], 0, args.fail_above, "more rounds (--rounds)"))
    return REGRESSION_EXIT if estimate.p_slower < SIGNIFICANCE else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; one line (exit 2) for options of the two modes mixed."""
    parser = argparse.ArgumentParser(prog="python -m runner.gate", description=__doc__.splitlines()[0])
    add_selection_arguments(parser)
    parser.add_argument("--baseline", help="stored runs: KEY=VALUE (a tag), a sweep parent, or a run id")
    parser.add_argument("--against", metavar="REV", help="run both sides: the baseline from a worktree of REV")
    parser.add_argument("--rounds", type=int, help=f"with --against: rounds of one worker a side (default {ROUNDS})")
    parser.add_argument("--seed", type=int, help="with --against: the seed of the rounds' orders (default: the time)")
    parser.add_argument(
        "overrides", nargs="*", help="with --against: the job's overrides, e.g. +workload=rmsnorm_naive"
    )
    parser.add_argument(
        "--fail-above", type=float, required=True, metavar="PCT",
        help="fail on a job significantly slower than its baseline by more than PCT percent",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    args = parser.parse_intermixed_args(argv)
    if args.fail_above < 0:
        parser.error(f"--fail-above {args.fail_above}: give a percentage >= 0")
    stored = [name for name in ("--baseline", "--sweep", "--runs") if getattr(args, name[2:])]
    running = [name for name in ("--rounds", "--seed") if getattr(args, name[2:]) is not None]
    running += ["job overrides"] if args.overrides else []
    if args.against is not None and stored:
        parser.exit(
            2, f"error: --against (run both sides) and {', '.join(stored)} (stored runs) do not mix: give one\n"
        )
    if args.against is None and args.baseline is None:
        parser.exit(2, "error: give --baseline REF (stored runs) or --against REV (run both sides)\n")
    if args.against is None and running:
        parser.exit(2, f"error: {', '.join(running)}: only with --against (run both sides), not with --baseline\n")
    args.rounds = ROUNDS if args.rounds is None else args.rounds
    if args.rounds < 2:
        parser.exit(2, f"error: --rounds {args.rounds}: give at least 2 (pairs of rounds are what the test compares)\n")
    return args


def main(argv: list[str] | None = None) -> int:
    """Print the gate's table; exit 1 when a job regressed, else 3 when a job did not finish or none was tested."""
    args = parse_args(argv)
    if args.against is not None:
        return against(args)
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
    tested = [(p.estimate, p.p_holm) for p in pairs if p.estimate is not None]
    if args.format != "json":
        print(f"\n{TIMES_LEGEND}")
        print(summary(tested, len(pairs) - len(tested), args.fail_above, "more worker processes (measure.processes)"))
    why = not_passed(pairs, margin)
    if why is not None:
        print(f"gate: not passed: {why}", file=sys.stderr)
    regressions = any(p < SIGNIFICANCE for _, p in tested)
    return REGRESSION_EXIT if regressions else INCOMPLETE_EXIT if why is not None else 0


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(main())
