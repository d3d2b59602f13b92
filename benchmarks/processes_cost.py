"""What a job costs beyond its measurement, and what measure.processes adds to it.

Runs rmsnorm_naive (4x128x512, backend=cpu) with measure.processes=0 (steady state in the
job's own process), 1, 3 (the CPU default) and 5, in interleaved rounds (the order reversed
every other round), each into the same pre-migrated SQLite store after one untimed job that
fills the caches (CPU calibration, page cache). Prints per setting the medians of the whole
command's wall time, time/job_s, time/measured_s and time/process_cv, the runner's own cost
inside the job (job_s - measured_s) and outside it (wall - job_s: interpreter, imports,
Hydra), the extra wall time against processes=0, and the runs' timing.stable verdicts.

python benchmarks/processes_cost.py [rounds]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gating import new_store, progress, run_job  # benchmarks/gating.py, beside this script
from mlflow.entities import Run

from runner import names

SETTINGS = (0, 1, 3, 5)
OVERRIDES = ["+workload=rmsnorm_naive", "backend=cpu"]


def timed_job(uri: str, out: Path, overrides: list[str]) -> tuple[Run, float]:
    """One runner job: its MLflow run and the command's wall time in seconds."""
    start = time.perf_counter()
    run = run_job(uri, out, overrides)
    return run, time.perf_counter() - start


def median_of(runs: list[Run], key: str) -> float:
    return statistics.median(run.data.metrics[key] for run in runs)


def cv_text(runs: list[Run]) -> str:
    """The median time/process_cv, which only runs with two or more worker processes log."""
    values = [run.data.metrics[names.PROCESS_CV] for run in runs if names.PROCESS_CV in run.data.metrics]
    return f"{statistics.median(values):.3f}" if values else "-"


def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="processes-cost-"))
    uri = new_store(work)
    progress(f"store and job folders in {work}")
    timed_job(uri, work / "warm-up", [*OVERRIDES, "measure=quick"])
    runs: dict[int, list[Run]] = {k: [] for k in SETTINGS}
    walls: dict[int, list[float]] = {k: [] for k in SETTINGS}
    start = time.perf_counter()
    for i in range(rounds):
        for k in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
            run, wall = timed_job(uri, work / f"round{i}-processes{k}", [*OVERRIDES, f"measure.processes={k}"])
            runs[k].append(run)
            walls[k].append(wall)
            progress(
                f"round {i + 1}/{rounds} processes={k}: wall {wall:.1f} s, job {run.data.metrics[names.JOB_S]:.1f} s "
                f"[{time.perf_counter() - start:.0f} s]"
            )
    print(
        f"{'processes':>9} {'wall s':>7} {'job s':>6} {'measured s':>10} {'in-job cost':>11} {'outside':>7} "
        f"{'+wall vs 0':>10} {'step ms':>8} {'process cv':>10}  stable"
    )
    base_wall = statistics.median(walls[SETTINGS[0]])
    for k in SETTINGS:
        wall = statistics.median(walls[k])
        job, measured = median_of(runs[k], names.JOB_S), median_of(runs[k], names.MEASURED_S)
        step = median_of(runs[k], names.STEP_MEDIAN_MS)
        stable = ",".join(run.data.tags.get(names.TAG_TIMING_STABLE, "-") for run in runs[k])
        print(
            f"{k:>9} {wall:7.1f} {job:6.1f} {measured:10.1f} {job - measured:11.1f} {wall - job:7.1f} "
            f"{wall - base_wall:+10.1f} {step:8.4f} {cv_text(runs[k]):>10}  {stable}"
        )
    print(f"medians over {rounds} round(s); in-job cost = job_s - measured_s, outside = wall - job_s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=2, help="interleaved rounds (default 2)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("rounds must be >= 1")
    return args


if __name__ == "__main__":
    main(parse_args().rounds)
