"""Does a fresh worker's median rest on where its memory landed? Workers of one config, two per round.

Each round starts two fresh steady-state workers of each variant (`RUNNER_LAYOUTS=1`: the
memory the workload was built in; `RUNNER_LAYOUTS=8`: the CPU's default, the inputs and the
step's allocations moved between 8 stretches), in a random order, with the runner's own workers
(`runner.execute.workers.start_steady_state`) on rmsnorm_naive, backend=cpu. The two workers of
a variant in one round share the host's stretch of time, so the spread of their difference is
what a worker of its own adds: its process, its layout. Prints per variant the median of the
worker medians, that per-worker spread (sd of log(a/b) / sqrt 2) and the spread of the round
means (the host's drift, which rounds pair out). `RUNNER_WORKER_START=spawn` before the command gives
every worker its own interpreter instead of a fork of one server.

python benchmarks/memory_layouts.py [rounds] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from unittest import mock

import numpy as np

from runner.compose import compose_config
from runner.config_loading import load_run_spec
from runner.execute.workers import start_steady_state, steps
from runner.measure.loop import LAYOUTS_ENV

OVERRIDES = ["+workload=rmsnorm_naive", "backend=cpu", "tracking=off"]
# variant -> its RUNNER_LAYOUTS, the benchmarks' knob (docs/trust.md), set while its workers start
VARIANTS = {"layouts=1": "1", "layouts=8": "8"}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(rounds: int, extra: list[str]) -> None:
    spec = load_run_spec(compose_config(*OVERRIDES, *extra))
    medians: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    start = time.perf_counter()
    for number in range(1, rounds + 1):
        order = [name for name in VARIANTS for _ in range(2)]
        random.shuffle(order)
        pair: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for place, name in enumerate(order, 1):
            with mock.patch.dict(os.environ, {LAYOUTS_ENV: VARIANTS[name]}):
                worker = start_steady_state(spec, f"{name} worker {number}.{place}", place)
            samples = steps(worker)[0]
            pair[name].append(statistics.median(samples))
        for name, (a, b) in pair.items():
            medians[name].append((a, b))
        progress(f"round {number}/{rounds} [{time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.2f}]")
    print(f"rmsnorm_naive {' '.join(extra)}: {rounds} rounds, two fresh workers of each variant per round, shuffled")
    print(f"{'variant':<10} {'median ms':>9} {'per-worker sd':>13} {'round-to-round sd':>17}")
    for name, pairs in medians.items():
        logs = np.log(np.array(pairs))
        per_worker = float(np.std(logs[:, 0] - logs[:, 1], ddof=1)) / math.sqrt(2)
        rounds_sd = float(np.std(logs.mean(1), ddof=1))
        median = statistics.median(value for pair in pairs for value in pair)
        print(f"{name:<10} {median:9.4f} {per_worker:13.1%} {rounds_sd:17.1%}")
    print("per-worker sd: what one worker's own process and memory add to its median; round-to-round: the host's drift")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    main(args.rounds, args.set)
