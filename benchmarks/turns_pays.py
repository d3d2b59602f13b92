"""Do a round's workers taking turns pay? Two workers of one config (A/A), in turns or one after the other.

Each round runs both modes in a random order: two fresh steady-state workers of the same spec
taking turns a stretch at a time (`runner.execute.rounds`' referee, as a sweep's or the gate's
rounds do on the CPU), and two started one after the other. The two workers of an A/A pair
differ only by their process and their stretch of the host's time, so the spread of log(a/b)
over rounds is what the gate's paired test must see through: with n pairs it catches about
2.5 * sd / sqrt(n) beyond its margin. Prints each mode's sd, that reach at 20 pairs (the gate's
default: 60 rounds, 3 a server pair), and the ratio of the two spreads with a bootstrap interval.

python benchmarks/turns_pays.py [rounds] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time

import numpy as np

from runner.compose import compose_config
from runner.config_loading import load_run_spec
from runner.execute.rounds import run_round
from runner.execute.workers import prepare_workers, start_first_call
from runner.sweep.rounds import JobSide, RoundJob

OVERRIDES = ["+workload=rmsnorm_naive", "backend=cpu", "tracking=off"]
MODES = ("in turns", "one after the other")
GATE_PAIRS = 20


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_ms(samples: list[list[float]]) -> float:
    return statistics.median(step for repeat in samples for step in repeat)


def pair(jobs: list[RoundJob], number: int, in_turns: bool) -> list[float]:
    results = run_round([JobSide(index, job) for index, job in enumerate(jobs)], number, in_turns)
    return [median_ms(samples) for samples in results]  # type: ignore[arg-type]  (a failure ends the benchmark)


def main(rounds: int, extra: list[str]) -> None:
    spec = load_run_spec(compose_config(*OVERRIDES, *extra))
    jobs = [RoundJob(side, side, spec, rounds) for side in ("a", "b")]
    prepare_workers([spec])
    start_first_call(spec, "first call").result()  # the caches are warm for every worker after
    log_ratios: dict[str, list[float]] = {mode: [] for mode in MODES}
    start = time.perf_counter()
    for number in range(1, rounds + 1):
        for mode in random.sample(MODES, len(MODES)):
            a, b = pair(jobs, number, in_turns=mode == MODES[0])
            log_ratios[mode].append(math.log(a / b))
        progress(f"round {number}/{rounds} [{time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.2f}]")
    sds = {mode: float(np.std(values, ddof=1)) for mode, values in log_ratios.items()}
    rng = np.random.default_rng(0)
    turns, sequence = (np.array(log_ratios[mode]) for mode in MODES)
    draws = [
        np.std(turns[picked], ddof=1) / np.std(sequence[picked], ddof=1)
        for picked in (rng.integers(0, rounds, rounds) for _ in range(2000))
    ]
    low, high = np.percentile(draws, [2.5, 97.5])
    print(f"rmsnorm_naive {' '.join(extra)}: {rounds} rounds, an A/A pair of fresh workers in each mode, shuffled")
    print(f"{'mode':<20} {'sd of log(a/b)':>14} {f'gate reach at {GATE_PAIRS} pairs':>24}")
    for mode, sd in sds.items():
        print(f"{mode:<20} {sd:14.1%} {2.5 * sd / math.sqrt(GATE_PAIRS):24.1%}")
    ratio = sds[MODES[0]] / sds[MODES[1]]
    print(f"sd in turns / sd one after the other: {ratio:.2f} (bootstrap 95%: {low:.2f}-{high:.2f})")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=30, help="rounds (default 30)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    main(args.rounds, args.set)
