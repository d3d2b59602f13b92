"""The regression gate's false-alarm rate: an A/A test, the same configuration against itself.

Runs one configuration (rmsnorm_naive at a small shape, backend=cpu, default measure: 3
worker processes of 200 steps) N+1 times into a fresh SQLite store, then gates each run
i >= 1 against its predecessor, run i-1: `python -m runner.gate --runs RUN_i --baseline
RUN_i-1 --fail-above PCT`. Nothing changed between the runs, so every exit status 1 is a
false alarm. Predecessors rather than one fixed baseline: with run 0 as everyone's baseline,
all N answers hinge on whether that one run happened to be fast, and the count says little
about the rate; with predecessors each run takes part in at most two comparisons (as when
CI compares each commit with the one before). Also prints the gate's "caught from" (the
smallest slowdown it would catch 80% of the time at this spread). Target: <= 5% false alarms.

python benchmarks/gate_false_alarms.py [N] [--fail-above PCT] [--batch B] [--seq-len S] [--hidden H] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gating import (
    add_gate_options,
    gate,
    new_store,
    progress,
    rate_line,
    run_job,
)  # benchmarks/gating.py, beside this script

from runner import names

TARGET_RATE = 0.05


def percent(text: str) -> float | None:
    """'+12.3%' as 12.3; None for '-'."""
    return None if text == "-" else float(text.rstrip("%"))


def main(n: int, fail_above: float, shape: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gate-false-alarms-"))
    uri = new_store(work)
    progress(f"store and job folders in {work}")
    overrides = ["+workload=rmsnorm_naive", "backend=cpu", *shape]
    start = time.perf_counter()
    runs = []
    for i in range(n + 1):
        runs.append(run_job(uri, work / f"run{i}", overrides))
        median = runs[-1].data.metrics[names.STEP_MEDIAN_MS]
        stable = runs[-1].data.tags.get(names.TAG_TIMING_STABLE)
        progress(f"run {i}/{n}: {median:.4f} ms, stable={stable} [{time.perf_counter() - start:.0f} s]")
    hashes = {run.data.tags.get(names.TAG_CONFIG_HASH) for run in runs}
    if len(hashes) != 1:
        progress(f"warning: the runs have {len(hashes)} different config hashes")
    print(f"{'run':>4} {'baseline ms':>11} {'job ms':>9}  {'change (95% CI)':26} {'caught from':>11}  exit  verdict")
    alarms, caught = 0, []
    for i in range(1, n + 1):
        code, row = gate(uri, runs[i].info.run_id, runs[i - 1].info.run_id, fail_above)
        alarms += code == 1
        if (value := percent(row["caught from"])) is not None:
            caught.append(value)
        print(
            f"{i:>4} {row['baseline ms']:>11} {row['job ms']:>9}  {row['change (95% CI)']:26} "
            f"{row['caught from']:>11}  {code:>4}  {row['verdict']}"
        )
    unstable = sum(run.data.tags.get(names.TAG_TIMING_STABLE) == "false" for run in runs)
    print(f"\n{n + 1} runs of {' '.join(overrides)}; {unstable} flagged timing.stable=false")
    print(rate_line("false alarms in gates", alarms, n, fail_above, f"<= {TARGET_RATE:.0%}"))
    if caught:
        quartiles = statistics.quantiles(caught, n=4, method="inclusive") if len(caught) > 1 else caught * 3
        print(
            f"caught from: min +{min(caught):.1f}%, quartiles +{quartiles[0]:.1f}% / +{quartiles[1]:.1f}% / "
            f"+{quartiles[2]:.1f}%, max +{max(caught):.1f}% (the slowdown each gate would catch 80% of the time)"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=20, help="gates: N+1 runs, each gated against the one before")
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
    main(args.n, args.fail_above, args.shape + args.set)
