"""The regression gate's detection rate: a module that does a known 10% more work.

benchmarks/extra_work.py's RepeatedRMSNorm applies the naive RMSNorm $EXTRA_WORK_REPEATS
times; the baseline runs it 10 times, the slower version 11 times, with the same command line
and so the same config hash (as in CI, where the code changes and the config does not).
Each try runs both (default measure: 3 worker processes of 200 steps), which first
alternating from try to try, then `python -m runner.gate --runs SLOWER --baseline BASE
--fail-above 5`; exit status 1 is a detection. Prints the measured change per try and the
detection rate. Target: >= 80% of tries caught at --fail-above 5.

python benchmarks/gate_detection.py [tries] [--fail-above PCT] [--batch B] [--seq-len S] [--hidden H] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
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
from mlflow.entities import Run

from runner import names

# benchmarks/extra_work.py; the job imports it from the repository root, its working directory
TARGET = "benchmarks.extra_work.RepeatedRMSNorm"
REPEATS_ENV = "EXTRA_WORK_REPEATS"
BASE_REPEATS, SLOWER_REPEATS = 10, 11
TARGET_RATE = 0.80


def main(tries: int, fail_above: float, shape: dict[str, int], extra: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gate-detection-"))
    uri = new_store(work)
    progress(f"store and job folders in {work}")
    overrides = [
        "+workload=custom", f"workload._target_={TARGET}", "workload.inputs=null",  # inputs: its example_inputs
        *(f"+workload.{key}={value}" for key, value in shape.items()), "backend=cpu", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    print(f"{'try':>3} {'base ms':>9} {'slower ms':>9}  {'change (95% CI)':26} {'caught from':>11}  exit  verdict")
    detected, same_hash = 0, True
    for i in range(tries):
        runs: dict[int, Run] = {}
        for repeats in (BASE_REPEATS, SLOWER_REPEATS) if i % 2 == 0 else (SLOWER_REPEATS, BASE_REPEATS):
            runs[repeats] = run_job(uri, work / f"try{i}-repeats{repeats}", overrides, {REPEATS_ENV: str(repeats)})
        base, slower = runs[BASE_REPEATS], runs[SLOWER_REPEATS]
        same_hash &= base.data.tags.get(names.TAG_CONFIG_HASH) == slower.data.tags.get(names.TAG_CONFIG_HASH)
        code, row = gate(uri, slower.info.run_id, base.info.run_id, fail_above)
        detected += code == 1
        unstable = [r for r, run in runs.items() if run.data.tags.get(names.TAG_TIMING_STABLE) == "false"]
        note = f"  (timing.stable=false: {', '.join(f'{r} repeats' for r in unstable)})" if unstable else ""
        print(
            f"{i + 1:>3} {row['baseline ms']:>9} {row['job ms']:>9}  {row['change (95% CI)']:26} "
            f"{row['caught from']:>11}  {code:>4}  {row['verdict']}{note}",
            flush=True,
        )
        progress(f"try {i + 1}/{tries} done [{time.perf_counter() - start:.0f} s]")
    print(f"\n{SLOWER_REPEATS} against {BASE_REPEATS} RMSNorms: +{SLOWER_REPEATS / BASE_REPEATS - 1:.0%} work")
    if not same_hash:
        print("warning: the two versions' config hashes differ (they should not)")
    print(rate_line("detected in tries", detected, tries, fail_above, f">= {TARGET_RATE:.0%}"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tries", nargs="?", type=int, default=10, help="baseline/slower pairs (default 10)")
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
    main(args.tries, args.fail_above, {"batch": args.batch, "seq_len": args.seq_len, "hidden": args.hidden}, args.set)
