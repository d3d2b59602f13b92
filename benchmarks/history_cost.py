"""What `python -m runner.history` costs: its wall time over a small store and a large one, side by side.

Fills two stores with FINISHED job runs as jobs log them (config hash, commit, timing verdict, step
median and three per-process medians, lognormal with a 5% spread): 12 runs of one configuration,
and 600 runs in 3 configurations. Each round runs the whole command, a fresh interpreter, over
each store (the order reversed every other round, so the host's drift falls on both alike),
its report and plots written to a folder of its own. Prints the median, min and max wall time per
store and the host's load average before and after.

python benchmarks/history_cost.py [rounds] [--large N]   (--large: the large store's runs, default 600)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gating import REPO, new_store, progress  # benchmarks/gating.py, beside this script
from mlflow import MlflowClient
from mlflow.entities import Metric

from runner import names
from runner.config import TrackingConfig

SMALL_RUNS, LARGE_RUNS, LARGE_CONFIGURATIONS = 12, 600, 3
SPREAD = 0.05
HOUR_MS = 3_600_000


def fill(uri: str, runs: int, configurations: int, rng: np.random.Generator) -> None:
    """`runs` FINISHED job runs spread over `configurations`, an hour apart, each at a commit of its own."""
    client = MlflowClient(uri)
    # a new store holds MLflow's `Default` experiment too: the runs go to the runner's, which new_store made
    experiment = client.get_experiment_by_name(TrackingConfig.experiment)
    if experiment is None:
        raise SystemExit(f"{uri}: no experiment {TrackingConfig.experiment!r}")
    experiment_id = experiment.experiment_id
    for k in range(runs):
        start = 1_700_000_000_000 + HOUR_MS * k
        tags = {
            names.TAG_CONFIG_HASH: f"cfg-{k % configurations}",
            names.TAG_GIT_COMMIT: f"c{k:04d}",
            names.TAG_WORKLOAD: "rmsnorm_naive",
            names.TAG_TIMING_STABLE: "true",
        }
        run_id = client.create_run(experiment_id, start_time=start, tags=tags).info.run_id
        process_ms = np.exp(rng.normal(0.0, SPREAD, 3))
        metrics = [Metric(names.PROCESS_MEDIAN_MS, float(ms), start, step) for step, ms in enumerate(process_ms)]
        client.log_batch(run_id, [Metric(names.STEP_MEDIAN_MS, float(np.median(process_ms)), start, 0), *metrics])
        client.set_terminated(run_id, "FINISHED", end_time=start + 1000)


def history_seconds(uri: str, out: Path) -> float:
    """Wall time of one `python -m runner.history` over `uri`, from its start to its exit."""
    cmd = [sys.executable, "-m", "runner.history", "--uri", uri, "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"runner.history exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return seconds


def main(rounds: int, large: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="history-cost-"))
    rng = np.random.default_rng(0)
    stores = {
        f"{SMALL_RUNS} runs, 1 configuration": (SMALL_RUNS, 1),
        f"{large} runs, {LARGE_CONFIGURATIONS} configurations": (large, LARGE_CONFIGURATIONS),
    }
    uris = {}
    for name, (runs, configurations) in stores.items():
        folder = work / f"{runs}_runs"
        folder.mkdir()
        progress(f"filling the store of {name} in {folder}")
        uris[name] = new_store(folder)
        fill(uris[name], runs, configurations, rng)
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in stores}
    for round_index in range(rounds):
        order = list(stores) if round_index % 2 == 0 else list(reversed(stores))
        for name in order:
            seconds[name].append(history_seconds(uris[name], work / f"out-{round_index}-{len(seconds[name])}"))
            progress(f"round {round_index + 1}: {name}: {seconds[name][-1]:.2f} s")
    load_after = os.getloadavg()
    print(f"python -m runner.history, {rounds} rounds, interleaved (whole command, a fresh interpreter each):")
    for name, values in seconds.items():
        print(f"  {name}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})")
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=3, help="rounds, each timing both stores (default 3)")
    parser.add_argument("--large", type=int, default=LARGE_RUNS, help=f"the large store's runs (default {LARGE_RUNS})")
    args = parser.parse_args()
    main(args.rounds, args.large)
