"""What a warm compile cache saves a compiled job's first call: `+experiment=compile_cache`, cold against warm.

Each round runs `python -m runner -m +experiment=compile_cache` (the compiled RMSNorm, backend=cpu,
measure=quick) into a sweep folder of its own, so its cold job starts with empty caches and its
warm job, right after it, finds what the cold one filled. Reads each run's time/first_call_s and
compile/cache_hits and compile/cache_misses back from MLflow. Prints them per round, the median
ratio of warm to cold first call, and the host's load average before and after.

python benchmarks/compile_cache.py [rounds]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gating import REPO, new_store, progress  # benchmarks/gating.py, beside this script
from mlflow import MlflowClient

from runner import names


def one_round(uri: str, sweep_dir: Path) -> dict[str, dict[str, float]]:
    """One cold-then-warm sweep into `uri`; its runs' first call, hits and misses, by `compile.cache`."""
    cmd = [
        sys.executable, "-m", "runner", "-m", "+experiment=compile_cache", "backend=cpu", "measure=quick",
        f"tracking.uri={uri}", f"hydra.sweep.dir={sweep_dir}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"runner exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    client = MlflowClient(uri)
    runs = client.search_runs([experiment.experiment_id for experiment in client.search_experiments()])
    metrics = (names.FIRST_CALL_S, names.COMPILE_CACHE_HITS, names.COMPILE_CACHE_MISSES)
    return {
        run.data.tags[names.TAG_COMPILE_CACHE]: {key: run.data.metrics[key] for key in metrics}
        for run in runs
        if names.TAG_COMPILE_CACHE in run.data.tags
    }


def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    load_before = os.getloadavg()
    ratios = []
    for round_index in range(rounds):
        folder = work / f"round{round_index}"
        folder.mkdir()
        runs = one_round(new_store(folder), folder / "sweep")
        for cache in ("cold", "warm"):
            run = runs[cache]
            print(
                f"round {round_index + 1} {cache}: first call {run[names.FIRST_CALL_S]:.2f} s, "
                f"{run[names.COMPILE_CACHE_HITS]:g} hits, {run[names.COMPILE_CACHE_MISSES]:g} misses"
            )
        ratios.append(runs["warm"][names.FIRST_CALL_S] / runs["cold"][names.FIRST_CALL_S])
        progress(f"round {round_index + 1} of {rounds} done")
    load_after = os.getloadavg()
    print(f"warm first call / cold: median {statistics.median(ratios):.2f} over {rounds} round(s)")
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=2, help="cold-then-warm sweeps (default 2)")
    main(parser.parse_args().rounds)
