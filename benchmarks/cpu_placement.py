"""Where a CPU worker runs: does one thread pinned to one core remove the stall mode?

On a busy 2-core host a worker with torch's default threads (one per core) sometimes sits in
a slow mode: its steps take ~40x the median while another process holds the second core (the
console's "11% of steps are 42.6x slower"). This runs the runner's own steady-state workers
(`runner.execute.workers.start_steady_state`, default measure: warm-up, then 200 steps) of
rmsnorm_naive on backend=cpu in fresh processes, the variants interleaved (one worker of each
per round, the order reversed every other round), and prints per variant the median of the
workers' medians, the share of stalled steps and of stalled workers (a step, or a worker's
median, over 10x the fastest variant's median), the workers whose steps form two modes or have
over 5% far-out steps by the runner's own checks (`runner.measure.stability`), and the median
and stall share as ratios to today's default (unpinned).

Variants: backend.cpu_placement=unpinned (torch's default threads, anywhere), unpinned with
the job's threads set to one (one thread, anywhere) and one_core (one thread pinned to one
core, the core in turn by worker number). slot_cores is unpinned on a job that has the whole
machine (every core, a thread each). Run it while the host does its usual work: a quiet host
shows no stalls.

python benchmarks/cpu_placement.py [rounds] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from runner.compose import compose_config
from runner.config import RunSpec
from runner.config_loading import load_run_spec
from runner.execute.workers import start_steady_state, steps
from runner.measure.stability import MAX_UNCERTAINTY, within_run

OVERRIDES = ["+workload=rmsnorm_naive", "backend=cpu", "tracking=off"]
# a step this many times the fastest variant's median is a stall, not noise
STALL_RATIO = 10.0


@dataclass
class Variant:
    """One placement and the workers measured with it."""

    name: str
    placement: str
    # the job's own torch threads, which an unpinned worker takes; None: torch's default
    job_threads: int | None = None
    workers: list[list[float]] = field(default_factory=list)

    def median_ms(self) -> float:
        return statistics.median(statistics.median(steps) for steps in self.workers)

    def stall_share(self, fastest_ms: float) -> float:
        return float(np.mean([step > STALL_RATIO * fastest_ms for steps in self.workers for step in steps]))

    def stalled_workers(self, fastest_ms: float) -> int:
        return sum(statistics.median(steps) > STALL_RATIO * fastest_ms for steps in self.workers)

    def p90_over_median(self) -> float:
        return statistics.median(float(np.percentile(steps, 90)) / statistics.median(steps) for steps in self.workers)

    def unstable_workers(self) -> int:
        """Workers whose own interval, each judged as a run of its own, is over the runner's 5%."""
        judged = [within_run([[steps]], [statistics.median(steps)]) for steps in self.workers]
        return sum(spread.next_run > MAX_UNCERTAINTY for spread in judged)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def one_worker(variant: Variant, spec: RunSpec, number: int) -> list[float]:
    """A fresh worker's step times (one repeat) with the variant's placement."""
    default_threads = torch.get_num_threads()
    if variant.job_threads is not None:
        torch.set_num_threads(variant.job_threads)
    try:
        return steps(start_steady_state(spec, f"{variant.name} worker {number}", number))[0]
    finally:
        torch.set_num_threads(default_threads)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(rounds: int, extra: list[str]) -> None:
    variants = [
        Variant("unpinned (default threads)", "unpinned"),
        Variant("unpinned, 1 thread", "unpinned", job_threads=1),
        Variant("one_core (1 thread pinned)", "one_core"),
    ]
    specs = {
        v.name: load_run_spec(compose_config(*OVERRIDES, f"backend.cpu_placement={v.placement}", *extra))
        for v in variants
    }
    progress(f"load average (1, 5, 15 min) at start: {load()}; {os.cpu_count()} cores")
    start = time.perf_counter()
    for number in range(1, rounds + 1):
        for variant in variants if number % 2 else variants[::-1]:
            variant.workers.append(one_worker(variant, specs[variant.name], number))
        progress(f"round {number}/{rounds} [{time.perf_counter() - start:.0f} s, load {load()}]")
    base = variants[0]
    fastest = min(v.median_ms() for v in variants)
    print(f"rmsnorm_naive {' '.join(extra)}: {rounds} workers per variant, interleaved; load at end {load()}")
    print(
        f"{'variant':<28} {'median ms':>9} {'x base':>6} {'stalled steps':>13} {'x base':>6} {'stalled workers':>15} "
        f"{'p90/median':>10} {'unstable workers':>16}"
    )
    for v in variants:
        share, base_share = v.stall_share(fastest), base.stall_share(fastest)
        print(
            f"{v.name:<28} {v.median_ms():9.4f} {v.median_ms() / base.median_ms():6.2f} {share:13.2%} "
            f"{share / base_share if base_share else float('nan'):6.2f} {v.stalled_workers(fastest):>8}/{rounds:<6} "
            f"{v.p90_over_median():10.2f} {v.unstable_workers():>9}/{rounds:<6}"
        )
    print(
        f"stalled: over {STALL_RATIO:g}x the fastest variant's median ({fastest:.4f} ms); unstable: the runner's "
        "timing.stable verdict on each worker's steps alone"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=20, help="workers per variant (default 20)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    main(args.rounds, args.set)
