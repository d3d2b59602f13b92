"""What a job costs beyond its measurement, and what measure.processes adds to it.

First, a worker process's start by each start method, side by side (runner.execute.processes):
in interleaved rounds (the order reversed every other round), (a) from `Child()` to the first
line of its target, and (b) a whole default worker (its build, first call, 5 warm-up calls and
200 timed steps of rmsnorm_naive at the default shape, backend=cpu), from `Child()` to its
answer, and (c) one round of the three-variant RMSNorm sweep (a worker of the naive, built-in
and compiled variant, one after another, as `runner.execute.rounds` starts them). Prints the
median, min and max of each, and forkserver's saving.

Then rmsnorm_naive (4x128x512, backend=cpu) with measure.processes=0 (steady state in the
job's own process), 1, 3 (the CPU default) and 5, in interleaved rounds (the order reversed
every other round), each into the same pre-migrated SQLite store after one untimed job that
fills the caches (CPU calibration, page cache). Prints per setting the medians of the whole
command's wall time, time/job_s, time/measured_s and time/process_cv, the runner's own cost
inside the job (job_s - measured_s) and outside it (wall - job_s: interpreter, imports,
Hydra), the extra wall time against processes=0, and the runs' timing.stable verdicts.

python benchmarks/processes_cost.py [rounds] [--starts N] [--variant V ...]
    (rounds=0: the start comparison only; --variant: only these variants in (c))

The workers import this script as their main module, as a spawned child does: it imports at
the top only what a runner worker imports (torch and the runner), the rest inside functions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from runner import names
from runner.compose import compose_config
from runner.config import RunSpec
from runner.config_loading import load_run_spec
from runner.execute.processes import Child, StartMethod
from runner.execute.rounds import run_round
from runner.execute.workers import WORKER_START_ENV, prepare_workers, start_steady_state, steps
from runner.sweep.rounds import JobSide, RoundJob

if TYPE_CHECKING:
    from mlflow.entities import Run

SETTINGS = (0, 1, 3, 5)
OVERRIDES = ["+workload=rmsnorm_naive", "backend=cpu"]
START_METHODS: tuple[StartMethod, ...] = ("spawn", "forkserver")


def first_line() -> float:
    """A target that only says when it began (CLOCK_MONOTONIC: one clock for every process)."""
    return time.monotonic()


def start_s(method: StartMethod) -> float:
    """Seconds from `Child()` to the first line of its target."""
    started = time.monotonic()
    with Child("start", first_line, start_method=method) as child:
        return float(child.result()) - started


@contextmanager
def started_by(method: StartMethod) -> Iterator[None]:
    """Workers started by `method` meanwhile (RUNNER_WORKER_START: auto forks them from the fork server)."""
    from unittest import mock

    with mock.patch.dict(os.environ, {WORKER_START_ENV: "spawn" if method == "spawn" else "auto"}):
        yield


def whole_worker_s(spec: RunSpec, method: StartMethod) -> float:
    """Seconds from `Child()` to the answer of a default worker: build, first call, warm-up, 200 steps."""
    with started_by(method):
        started = time.monotonic()
        steps(start_steady_state(spec, "steady-state worker 1", 1))
        return time.monotonic() - started


def round_s(jobs: list[RoundJob], method: StartMethod) -> float:
    """Seconds for one round: a worker of each job, taking turns as a sweep's CPU workers do."""
    with started_by(method):
        started = time.monotonic()
        run_round([JobSide(index, job) for index, job in enumerate(jobs)], 1, in_turns=True)
        return time.monotonic() - started


VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")


def compare_starts(rounds: int, variants: list[str]) -> None:
    """Spawn against forkserver, interleaved, after one untimed worker of each (the page cache, the server)."""
    spec = load_run_spec(compose_config("+workload=rmsnorm_naive", "backend=cpu", "tracking=off"))
    specs = [load_run_spec(compose_config(f"+workload={name}", "backend=cpu", "tracking=off")) for name in variants]
    jobs = [RoundJob(variant, variant, variant_spec, 1) for variant, variant_spec in zip(variants, specs, strict=True)]
    prepare_workers(specs)  # the fork server, with torch.compile's modules for the compiled variant
    for method in START_METHODS:
        whole_worker_s(spec, method)
        round_s(jobs, method)  # the compiled variant's caches, the server
    seconds: dict[tuple[str, StartMethod], list[float]] = {}
    for i in range(rounds):
        for method in START_METHODS if i % 2 == 0 else START_METHODS[::-1]:
            seconds.setdefault(("start", method), []).append(start_s(method))
            seconds.setdefault(("worker", method), []).append(whole_worker_s(spec, method))
            seconds.setdefault(("round", method), []).append(round_s(jobs, method))
        print(f"start round {i + 1}/{rounds} done", file=sys.stderr, flush=True)
    print(f"{'measured':>30} {'method':>10} {'median s':>9} {'min s':>7} {'max s':>7}")
    measured = (
        ("start", "Child() to target's first line"),
        ("worker", "a whole default worker"),
        ("round", f"a round of the {len(variants)}-variant sweep"),
    )
    for what, label in measured:
        for method in START_METHODS:
            values = seconds[(what, method)]
            print(f"{label:>30} {method:>10} {statistics.median(values):9.3f} {min(values):7.3f} {max(values):7.3f}")
        saved = statistics.median(seconds[(what, "spawn")]) - statistics.median(seconds[(what, "forkserver")])
        print(f"{'':>30} {'saved':>10} {saved:9.3f}")
    print(f"medians over {rounds} interleaved round(s)")


def timed_job(uri: str, out: Path, overrides: list[str]) -> tuple[Run, float]:
    """One runner job: its MLflow run and the command's wall time in seconds."""
    from gating import run_job  # benchmarks/gating.py, beside this script

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
    from gating import new_store, progress

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
    parser.add_argument("rounds", nargs="?", type=int, default=2, help="interleaved rounds of jobs (default 2)")
    parser.add_argument("--starts", type=int, default=5, help="interleaved rounds of worker starts (default 5)")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="the sweep's variants (default: all)")
    args = parser.parse_args()
    if args.rounds < 0 or args.starts < 1:
        parser.error("rounds must be >= 0 and --starts >= 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    compare_starts(arguments.starts, arguments.variant or list(VARIANTS))
    if arguments.rounds:
        main(arguments.rounds)
