"""What the history's change points find in a series of runs with this host's noise, and what they invent.

Synthetic series, one point per run: a level of 1, times the noise. The noise is resampled from
real runs' step times (--noise-from URI: each configuration's log values about their median,
as `python -m runner.history` reads them), or drawn normal in the log with --noise SD (default
0.18: the spread of 12 runs of `python -m runner +workload=rmsnorm_naive measure=quick` in a
row on the 2-core development machine, docs/history.md#performance-over-time).
Prints the false change points per 100 points in series without a step (--length points each),
and the share of 5% and 10% steps found within five points of where they are (a series of
--length points, the step in the middle). Printed, not timed. Target: under 1 false change point
per 100 points; a step is found when it is large against the noise (docs say how large).

--method compares the detectors tried: `runner` (runner.report.change_points: ruptures' PELT
with a Welch test per change point), `otava` (Apache Otava's e-divisive, its defaults) and
`e-divisive` (MongoDB's signal-processing-algorithms, p 0.05, 100 permutations); the last two
only where they are installed (their numpy and scipy pins do not fit the project's).

python benchmarks/change_points.py [--series N] [--length L] [--noise SD | --noise-from URI] [--method M]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from runner.report.change_points import change_points

STEPS = (0.05, 0.10)
# a step counts as found by a change point this many points from it or fewer
FOUND_WITHIN = 5
TARGET_FALSE_PER_100 = 1.0
DEFAULT_NOISE = 0.18


def runner_method(values: np.ndarray) -> list[int]:
    return [found.index for found in change_points(list(values))]


def otava_method(values: np.ndarray) -> list[int]:
    from otava.analysis import compute_change_points

    found, _ = compute_change_points(list(values))
    return [point.index for point in found]


def e_divisive_method(values: np.ndarray) -> list[int]:
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    return list(e_divisive(values, pvalue=0.05, permutations=100))


METHODS: dict[str, Callable[[np.ndarray], list[int]]] = {
    "runner": runner_method,
    "otava": otava_method,
    "e-divisive": e_divisive_method,
}
MODULES = {"runner": "ruptures", "otava": "otava", "e-divisive": "signal_processing_algorithms"}


def residuals_from(uri: str) -> np.ndarray:
    """Each configuration's log step times about their median, for configurations with three runs or more."""
    import mlflow

    from runner import names
    from runner.report.series import by_configuration, job_runs

    client = mlflow.MlflowClient(uri)
    found = []
    for experiment in client.search_experiments():
        for runs in by_configuration(job_runs(client, experiment.experiment_id, names.STEP_MEDIAN_MS)).values():
            if len(runs) >= 3:
                logs = np.log([run.data.metrics[names.STEP_MEDIAN_MS] for run in runs])
                found.extend(logs - np.median(logs))
    if not found:
        sys.exit(f"error: --noise-from {uri}: no configuration with three FINISHED runs of {names.STEP_MEDIAN_MS}")
    return np.asarray(found)


def noisy(rng: np.random.Generator, levels: np.ndarray, residuals: np.ndarray | None, sd: float) -> np.ndarray:
    """The levels times noise: resampled log residuals, or normal in the log."""
    logs = rng.choice(residuals, len(levels)) if residuals is not None else rng.normal(0.0, sd, len(levels))
    return levels * np.exp(logs)


def main(args: argparse.Namespace) -> None:
    detect = METHODS[args.method]
    try:
        __import__(MODULES[args.method])
    except ImportError:
        sys.exit(f"error: --method {args.method}: {MODULES[args.method]} is not installed in this Python")
    residuals = residuals_from(args.noise_from) if args.noise_from else None
    noise = f"{len(residuals)} residuals from {args.noise_from} (sd {residuals.std():.3f})" if residuals is not None \
        else f"normal in the log, sd {args.noise}"  # fmt: skip
    print(f"method {args.method}; noise: {noise}; {args.series} series of {args.length} points each")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    flat = np.ones(args.length)
    false = sum(len(detect(noisy(rng, flat, residuals, args.noise))) for _ in range(args.series))
    per_100 = 100 * false / (args.series * args.length)
    verdict = "meets" if per_100 < TARGET_FALSE_PER_100 else "misses"
    print(
        f"no step: {per_100:.2f} false change points per 100 points ({verdict} the target < {TARGET_FALSE_PER_100:g})"
    )
    middle = args.length // 2
    for step in STEPS:
        levels = np.where(np.arange(args.length) < middle, 1.0, 1.0 + step)
        found = sum(
            any(abs(index - middle) <= FOUND_WITHIN for index in detect(noisy(rng, levels, residuals, args.noise)))
            for _ in range(args.series)
        )
        print(f"{step:.0%} step at point {middle}: found within {FOUND_WITHIN} points in {found / args.series:.0%} "
              f"of {args.series} series")  # fmt: skip
    print(f"({time.perf_counter() - started:.1f} s)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100, help="series per case (default 100)")
    parser.add_argument("--length", type=int, default=60, help="points per series (default 60)")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("--noise", type=float, default=DEFAULT_NOISE, help="sd of the log noise (default 0.18)")
    noise.add_argument("--noise-from", metavar="URI", help="resample the noise from this store's runs")
    parser.add_argument("--method", choices=list(METHODS), default="runner", help="the detector (default runner)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


if __name__ == "__main__":
    main(parse_args())
