"""The runner's own overhead per job inside a sweep: job wall time minus the measured phases.

Runs `python -m runner -m +experiment=rmsnorm_comparison` into a fresh SQLite store and reads
each child's time/job_s and time/measured_s back from MLflow.

python benchmarks/sweep_overhead.py [--set KEY=VALUE ...]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow

from runner import names

REPO = Path(__file__).resolve().parents[1]


def main(extra: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="runner-sweep-"))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "runner", "-m", "+experiment=rmsnorm_comparison", "backend=cpu", *extra,
         f"tracking.uri={uri}", f"hydra.sweep.dir={work / 'sweep'}"],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    client = mlflow.MlflowClient(uri)
    every = client.search_runs([e.experiment_id for e in client.search_experiments()])
    runs = [r for r in every if r.data.tags.get(names.TAG_SWEEP) != "true"]
    print(f"{'job':18} {'job s':>7} {'measured s':>11} {'runner s':>9} {'runner %':>9}")
    for run in sorted(runs, key=lambda r: r.info.start_time):
        job, measured = run.data.metrics[names.JOB_S], run.data.metrics[names.MEASURED_S]
        name = run.data.tags[names.TAG_WORKLOAD]
        print(f"{name:18} {job:7.2f} {measured:11.2f} {job - measured:9.2f} {(job - measured) / job:9.1%}")
    print(
        f"whole sweep process: {wall:.1f} s for {len(runs)} jobs (includes interpreter, imports, Hydra, store set-up)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    main(parser.parse_args().set)
