"""A regression gate for CI: `python -m runner.gate --baseline REF --fail-above PCT`, or `--against REV`.

`--against REV` measures both sides itself, round by round, the baseline from a git worktree of REV. Exit
status: 0 passed, 1 a regression, 2 no such commit (or no git checkout), 3 a side failed. A regression is a
slowdown, or a check besides time that failed (`runner.report.checks`: a wrong output, more peak device memory).
`--baseline` pairs each stored job with the FINISHED baseline run of its config hash; p-values are
Holm-corrected across the jobs, so a sweep of twenty does not raise false alarms twenty times as often.
Exit status: 0 passed; 1 a regression; 2 the baseline or the runs not found; 3 a job did not finish or
none could be tested. A regression outranks 3. The verdicts: docs/gate.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from runner import CONF_DIR
from runner.execute.against import SideRounds, run_rounds
from runner.execute.serve import MODULE, SideFailed
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, paired_time_ratio
from runner.report.checks import Check, checks, logged
from runner.report.gate_verdicts import (
    PAIRED_LEGEND,
    TIMES_LEGEND,
    Pair,
    baseline_runs,
    judge,
    judged,
    measured,
    not_passed,
    pair_up,
    rows,
    summary,
)
from runner.report.selection import add_selection_arguments, open_experiment, selected_runs
from runner.report.table import FORMATS, render
from runner.signals import exit_code_of, skip_final_collections, stop_on_signals
from runner.tracking.worktree import NoCheckout, checkout, commit_of, snapshot_of

REGRESSION_EXIT, NOT_FOUND_EXIT, INCOMPLETE_EXIT = 1, 2, 3
# 60 (twenty server pairs, 100-243 s a gate on a shared 2-core host): 0 of 20 A/A gates alarmed, 10% more work
# caught in 8 of 8 (gate_false_alarms.py 20, gate_detection.py 8, 2026-12-04/05, load 2.8-7.1; docs/benchmarks.md)
ROUNDS = 60
# the project's tree (the candidate, and the baseline's worktree's source) and the server each side's tree must have
PROJECT_TREE = CONF_DIR.parent
SERVER_FILE = Path(*MODULE.split(".")).with_suffix(".py")


def measure_both(rev: str, overrides: list[str], count: int, seed: int) -> tuple[str, SideRounds]:
    """The commit `rev` names and both sides' rounds, each in a worktree of its own, so their paths have one shape.

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
    job = " ".join(args.overrides) or "(the default config)"
    row = {
        "job": job,
        **measured(base_ms, job_ms, estimate, estimate.p_slower, margin, test, "one job"),
        "verdict": judged(estimate, estimate.p_slower, margin),
        "baseline": f"{args.against} at {commit[:12]}",
        "rounds": f"{args.rounds} (seed {seed})",
    }
    found = checks(timed.checks["baseline"], timed.checks["candidate"], margin)
    if args.format == "json":
        print(json.dumps([{**row, "checks": [check.text for check in found], "orders": timed.orders,
                           "baseline rounds ms": base_ms, "job rounds ms": job_ms, "servers": timed.servers,
                           "turns": timed.turns}]))  # fmt: skip
    else:
        print(render([row], args.format))
        print(_checks_text({job: found}))
        firsts = " ".join(order[0][0] for order in timed.orders)
        print(f"\n{PAIRED_LEGEND}\nwhich side ran first in each round (b baseline, c candidate): {firsts}")
        print(
            summary(
                [(estimate, estimate.p_slower)], 0, args.fail_above, "more rounds (--rounds)", failing({job: found})
            )
        )
    wrong = _not_passed_checks({job: found})
    return REGRESSION_EXIT if estimate.p_slower < SIGNIFICANCE or wrong else 0


def _checks_text(found: dict[str, list[Check]]) -> str:
    """Each job's lines besides its time (output, accuracy, first call, peak memory), under the table."""
    lines = [f"\n{job}:\n" + "\n".join(f"  {check.text}" for check in lines) for job, lines in found.items() if lines]
    return "".join(lines)


def failing(found: dict[str, list[Check]]) -> int:
    """How many jobs failed a check besides their time."""
    return sum(any(check.failed for check in lines) for lines in found.values())


def _not_passed_checks(found: dict[str, list[Check]]) -> bool:
    """Say on stderr, a line per job, which checks besides its time failed; whether any did."""
    wrong = {job: [check.text for check in lines if check.failed] for job, lines in found.items()}
    for job, texts in wrong.items():
        if texts:
            print(f"gate: not passed: {job}: {'; '.join(texts)}", file=sys.stderr)
    return any(wrong.values())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; one line (exit 2) for options of the two modes mixed."""
    parser = argparse.ArgumentParser(prog="python -m runner.gate", description=__doc__.splitlines()[0])
    add_selection_arguments(parser)
    add = parser.add_argument
    add("--baseline", help="stored runs: KEY=VALUE (a tag), a sweep parent, or a run id")
    add("--against", metavar="REV", help="run both sides: the baseline from a worktree of REV")
    add("--rounds", type=int, help=f"with --against: rounds of one worker a side (default {ROUNDS})")
    add("--seed", type=int, help="with --against: the seed of the rounds' orders (default: the time)")
    add("overrides", nargs="*", help="with --against: the job's overrides, e.g. +workload=rmsnorm_naive")
    add("--fail-above", type=float, required=True, metavar="PCT",
        help="fail on a job significantly slower than its baseline by more than PCT percent")  # fmt: skip
    add("--format", choices=FORMATS, default="table", help="output format (default: table)")
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
    # a job's lines besides its time, by the job and its run
    found = {
        f"{row['job']} ({row['run id']})": _stored_checks(pair, margin) for row, pair in zip(table, pairs, strict=True)
    }
    if args.format == "json":
        lines = found.values()
        print(
            json.dumps(
                [{**row, "checks": [c.text for c in its]} for row, its in zip(table, lines, strict=True)], indent=2
            )
        )
    elif table:
        print(render(table, args.format))
        print(_checks_text(found))
    tested = [(p.estimate, p.p_holm) for p in pairs if p.estimate is not None]
    if args.format != "json":
        print(f"\n{TIMES_LEGEND}")
        closer = "more worker processes (measure.processes)"
        print(summary(tested, len(pairs) - len(tested), args.fail_above, closer, failing(found)))
    why = not_passed(pairs, margin)
    if why is not None:
        print(f"gate: not passed: {why}", file=sys.stderr)
    wrong = _not_passed_checks(found)
    regressions = wrong or any(p < SIGNIFICANCE for _, p in tested)
    return REGRESSION_EXIT if regressions else INCOMPLETE_EXIT if why is not None else 0


def _stored_checks(pair: Pair, margin: float) -> list[Check]:
    """A FINISHED job's lines besides its time, against its baseline where one FINISHED (else its own alone)."""
    if pair.job.info.status != JobStatus.FINISHED:
        return []
    finished = pair.baseline is not None and pair.baseline.info.status == JobStatus.FINISHED
    return checks(logged(pair.baseline if finished else None), logged(pair.job), margin)


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(main())
