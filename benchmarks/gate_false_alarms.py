"""The regression gate's false-alarm rate: an A/A test, the same code and config against itself.

Copies the project into a throwaway git repository (one commit), then runs the gate there N
times as CI would, `python -m runner.gate --against HEAD --fail-above PCT` with one config
(rmsnorm_naive at its default shape, backend=cpu, default measure): the baseline's worktree
and the candidate hold the same code, so every exit status 1 is a false alarm. Prints each
try's change with its interval, the gate's "caught from" (the smallest slowdown it would catch
80% of the time at that spread), the seconds per try, and the spread of log(job / baseline) over
its rounds and over its server pairs, and in how many rounds the job read slower ("N of M rounds"),
each try's and over the tries (docs/gate.md quotes them). Target: <= 5% false alarms.

python benchmarks/gate_false_alarms.py [N] [--fail-above PCT] [--rounds R] \
    [--batch B] [--seq-len S] [--hidden H] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gating import (
    SPREADS_LEGEND,
    TRY_HEADER,
    add_gate_options,
    gate_against,
    progress,
    project_copy,
    rate_line,
    spreads,
    try_line,
)  # benchmarks/gating.py, beside this script

TARGET_RATE = 0.05


SPREAD_NAMES = (("round sd", "round_sd"), ("server pair sd", "pair_sd"), ("expected from rounds", "expected_pair_sd"))


def range_text(values: list[float]) -> str:
    """'2.1% (1.4%-4.1%)': the median and the range."""
    return f"{statistics.median(values):.1%} ({min(values):.1%}-{max(values):.1%})"


def slower_line(slower: list[int], rounds: int) -> str:
    """How many rounds of each gate read the job slower: an A/A gate expects about half, one side's mode nearly all."""
    most = max(range(len(slower)), key=slower.__getitem__)
    return (
        f"rounds the job read slower: most {slower[most]} of {rounds} rounds (try {most + 1}), "
        f"median {statistics.median(slower):g} of {rounds}, fewest {min(slower)} of {rounds}"
    )


def percent(text: str) -> float | None:
    """'+12.3%' as 12.3; None for '-'."""
    return None if text == "-" else float(text.rstrip("%"))


def main(n: int, fail_above: float, rounds: int | None, shape: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gate-false-alarms-"))
    repo = project_copy(work)
    progress(f"the project's copy in {repo}; each try's row in {work / 'tries.jsonl'}")
    overrides = ["+workload=rmsnorm_naive", "backend=cpu", *shape]
    start = time.perf_counter()
    print(TRY_HEADER)
    alarms, caught, seconds, spread = 0, [], [], []
    for i in range(1, n + 1):
        attempt = gate_against(repo, "HEAD", fail_above, rounds, overrides)
        alarms += attempt.code == 1
        seconds.append(attempt.seconds)
        if (value := percent(attempt.row["caught from"])) is not None:
            caught.append(value)
        spread.append(spreads(attempt.row))
        print(try_line(i, attempt), flush=True)
        progress(f"try {i}/{n} done [{time.perf_counter() - start:.0f} s]")
    print(SPREADS_LEGEND)
    print(f"\n{n} gates of {' '.join(overrides)} against the same commit, {attempt.row['rounds']} rounds each")
    print(f"seconds per try: median {statistics.median(seconds):.0f}, max {max(seconds):.0f}")
    print(rate_line("false alarms in gates", alarms, n, fail_above, f"<= {TARGET_RATE:.0%}"))
    print("; ".join(f"{name}: median {range_text([getattr(x, key) for x in spread])}" for name, key in SPREAD_NAMES))
    print(slower_line([x.slower for x in spread], len(attempt.row["servers"])))
    if caught:
        quartiles = statistics.quantiles(caught, n=4, method="inclusive") if len(caught) > 1 else caught * 3
        print(
            f"caught from: min +{min(caught):.1f}%, quartiles +{quartiles[0]:.1f}% / +{quartiles[1]:.1f}% / "
            f"+{quartiles[2]:.1f}%, max +{max(caught):.1f}% (the slowdown each gate would catch 80% of the time)"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=20, help="gates (default 20)")
    add_gate_options(parser)
    for key in ("batch", "seq_len", "hidden"):
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, help=f"workload.{key} (default: the workload's)")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("N must be >= 1")
    args.shape = [f"workload.{key}={value}" for key in ("batch", "seq_len", "hidden") if (value := getattr(args, key))]
    return args


if __name__ == "__main__":
    args = parse_args()
    main(args.n, args.fail_above, args.rounds, args.shape + args.set)
