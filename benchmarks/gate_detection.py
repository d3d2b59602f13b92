"""The regression gate's detection rate: a commit whose module does a known 10% more work.

Copies the project with benchmarks/extra_work.py into a throwaway git repository and commits
it with RepeatedRMSNorm applying the naive RMSNorm 10 times a step, then commits the change to
11 (the same config, as in CI, where the code changes and the config does not). Each try runs
`python -m runner.gate --against HEAD~1 --fail-above 5` there, both sides measured round by
round in one invocation (default measure); exit status 1 is a detection. Prints the measured
change per try, the seconds per try and the detection rate. Target: >= 80% of tries caught at
--fail-above 5, each within 10 minutes of gate time.

python benchmarks/gate_detection.py [tries] [--fail-above PCT] [--rounds R] \
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
    try_line,
)  # benchmarks/gating.py, beside this script
from git_copy import commit  # benchmarks/git_copy.py, beside this script

# benchmarks/extra_work.py; the job imports it from its tree's root, its working directory
TARGET = "benchmarks.extra_work.RepeatedRMSNorm"
BASE_REPEATS, SLOWER_REPEATS = 10, 11
TARGET_RATE = 0.80
TRY_LIMIT_S = 600


def slower_commit(work: Path) -> Path:
    """The project's copy with RepeatedRMSNorm at 10 repeats, then a commit that makes it 11."""
    repo = project_copy(work, ("benchmarks/__init__.py", "benchmarks/extra_work.py"))
    module = repo / "benchmarks" / "extra_work.py"
    base = f"DEFAULT_REPEATS = {BASE_REPEATS}\n"
    if base not in module.read_text():
        raise SystemExit(f"{module}: no line {base.strip()!r} to change")
    module.write_text(module.read_text().replace(base, f"DEFAULT_REPEATS = {SLOWER_REPEATS}\n"))
    commit(repo, f"RepeatedRMSNorm: {SLOWER_REPEATS} repeats, 10% more work")
    return repo


def main(tries: int, fail_above: float, rounds: int | None, shape: dict[str, int], extra: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gate-detection-"))
    repo = slower_commit(work)
    progress(f"the project's copy in {repo}; each try's row in {work / 'tries.jsonl'}")
    overrides = [
        "+workload=custom", f"workload._target_={TARGET}", "workload.inputs=null",  # inputs: its example_inputs
        *(f"+workload.{key}={value}" for key, value in shape.items()), "backend=cpu", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    print(TRY_HEADER)
    detected, seconds = 0, []
    for i in range(1, tries + 1):
        attempt = gate_against(repo, "HEAD~1", fail_above, rounds, overrides)
        detected += attempt.code == 1
        seconds.append(attempt.seconds)
        print(try_line(i, attempt), flush=True)
        progress(f"try {i}/{tries} done [{time.perf_counter() - start:.0f} s]")
    print(SPREADS_LEGEND)
    print(f"\n{SLOWER_REPEATS} against {BASE_REPEATS} RMSNorms: +{SLOWER_REPEATS / BASE_REPEATS - 1:.0%} work")
    slow = sum(s > TRY_LIMIT_S for s in seconds)
    print(
        f"seconds per try: median {statistics.median(seconds):.0f}, max {max(seconds):.0f}; {slow} over {TRY_LIMIT_S}"
    )
    print(rate_line("detected in tries", detected, tries, fail_above, f">= {TARGET_RATE:.0%}"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tries", nargs="?", type=int, default=10, help="gates (default 10)")
    add_gate_options(parser)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()
    if args.tries < 1:
        parser.error("tries must be >= 1")
    return args


if __name__ == "__main__":
    args = parse_args()
    shape = {"batch": args.batch, "seq_len": args.seq_len, "hidden": args.hidden}
    main(args.tries, args.fail_above, args.rounds, shape, args.set)
