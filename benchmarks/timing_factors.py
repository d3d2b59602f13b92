"""Which part of the runner's steady state moves its number away from a plain timed loop?

One cell (variant and shape), many rounds. Each round times, in a fresh random order:
- the runner's steady state as a default job times it (`measure.processes` fork-server workers,
  each pinned to one core, `measure.steps_s` of steps, the median of the process medians), and
  the same with one factor changed at a time (`FACTORS`);
- an independent reference: `torch.utils.benchmark.Timer` on the same step in a fresh process
  with the same thread count and malloc mode as the runner's workers (benchmarks/timing_fidelity.py).

The reference for the cell is the median of every round's Timer; each arm's error is its number
over that. A factor pays when changing it widens the arm's errors (its share within 5% falls).

python benchmarks/timing_factors.py [rounds] [--variant rmsnorm_naive] [--shape 4x512x1024]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from unittest import mock

import numpy as np
import torch
from timing_fidelity import independent_median, progress  # benchmarks/timing_fidelity.py, beside this script

from runner.compose import compose_config
from runner.config import RunSpec
from runner.config_loading import load_run_spec
from runner.execute.workers import WORKER_START_ENV, prepare_workers, steady_state_in_processes
from runner.measure.host_memory import KEEP_FREED_MEMORY_ENV
from runner.measure.loop import LAYOUTS_ENV

# arm -> the overrides that change one factor from the default job's steady state, or the benchmarks' knob
# (an environment variable, docs/trust.md) where no config key sets it
FACTORS: dict[str, list[str] | dict[str, str]] = {
    "default": [],
    "spawned workers (no fork server)": {WORKER_START_ENV: "spawn"},
    "unpinned workers": ["backend.cpu_placement=unpinned"],
    "glibc's own malloc modes": {KEEP_FREED_MEMORY_ENV: "0"},
    "warm-up 1 s": ["measure.warmup_s=1.0"],
    "steps for 1 s a process": ["measure.steps_s=1.0", "measure.steps=100000"],
    "5 processes": ["measure.processes=5"],
    "8 memory layouts a process": {LAYOUTS_ENV: "8"},
}


def arm_spec(cell: list[str], factor: list[str] | dict[str, str]) -> RunSpec:
    overrides = factor if isinstance(factor, list) else []
    return load_run_spec(compose_config(*cell, "backend=cpu", "tracking=off", *overrides))


def process_medians(spec: RunSpec, factor: list[str] | dict[str, str]) -> list[float]:
    """The runner's steady state for this spec (with the arm's knob set), in its worker processes: each one's median."""
    with mock.patch.dict(os.environ, factor if isinstance(factor, dict) else {}):
        steady = steady_state_in_processes(spec, spec.measure.processes or 3)
    return [statistics.median([ms for repeat in process for ms in repeat]) for process in steady.step_ms]


def within(errors: list[float], tolerance: float = 0.05) -> float:
    return float(np.mean([abs(e - 1) <= tolerance for e in errors]))


def main(rounds: int, variant: str, shape: str, arms: list[str] | None) -> None:
    torch.set_num_threads(1)  # an unpinned worker takes this process's count: one thread, as pinned ones
    batch, seq_len, hidden = shape.split("x")
    cell = [
        f"+workload={variant}",
        f"workload.batch={batch}",
        f"workload.seq_len={seq_len}",
        f"workload.hidden={hidden}",
    ]
    specs = {arm: arm_spec(cell, factor) for arm, factor in FACTORS.items() if not arms or arm in arms}
    prepare_workers(list(specs.values()))
    numbers: dict[str, list[float]] = {arm: [] for arm in specs}
    timer: list[float] = []
    rng, start = random.Random(0), time.perf_counter()
    try:
        for number in range(1, rounds + 1):
            for arm in rng.sample([*specs, "Timer"], len(specs) + 1):
                if arm == "Timer":
                    timer.append(independent_median([*cell, "backend=cpu"], "Timer"))
                else:
                    numbers[arm].append(statistics.median(process_medians(specs[arm], FACTORS[arm])))
            progress(f"round {number}/{rounds} [{time.perf_counter() - start:.0f} s]: Timer {timer[-1]:.4f} ms")
            progress("  " + ", ".join(f"{arm} {values[-1]:.4f}" for arm, values in numbers.items()))
    finally:  # a failed or stopped round: what was measured is still reported
        report(f"{variant} {shape}", {arm: values[: len(timer)] for arm, values in numbers.items()}, timer)


def report(cell: str, numbers: dict[str, list[float]], timer: list[float]) -> None:
    """Per arm, its numbers over the reference (the median of every round's Timer)."""
    if not timer:
        return
    reference = statistics.median(timer)
    print(f"{cell}, {len(timer)} rounds; reference: the median of {len(timer)} Timer processes, {reference:.4f} ms")
    print(f"  Timer itself: each process over the reference within 5% in {within([t / reference for t in timer]):.0%}")
    print(f"  {'arm':34} {'median':>7} {'within 5%':>9} {'p5-p95 of number/reference':>27}")
    for arm, values in numbers.items():
        errors = [v / reference for v in values]
        p5, p95 = np.percentile(errors, [5, 95])
        print(f"  {arm:34} {statistics.median(errors):7.3f} {within(errors):9.0%} {p5:13.3f} - {p95:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=10)
    parser.add_argument("--variant", default="rmsnorm_naive")
    parser.add_argument("--shape", default="4x512x1024")
    parser.add_argument("--arm", action="append", choices=list(FACTORS), help="only these arms (default: all)")
    args = parser.parse_args()
    main(args.rounds, args.variant, args.shape, args.arm)
