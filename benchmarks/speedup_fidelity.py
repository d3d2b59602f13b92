"""Speedup fidelity: does a sweep's printed speedup agree with an independent interleaved timer, and do the
intervals it states cover the next identical run?

Per trial and shape: one default sweep of the reference study
(`python -m runner -m +experiment=rmsnorm_comparison`, tracking into a temporary store), whose
speedups of the built-in and compiled RMSNorm over the naive one (and their 95% CIs, paired by
round, widened by the same shape's earlier sweeps) are computed by the runner's own `compare_times` and
`with_earlier_sweeps` from what it logged; and an independent timing, half of it just before the
sweep and half just after: `SETS` sets of fresh processes, one per variant, each set pinned as the runner's worker of
that round (one thread on the round's core, the same malloc mode), taking turns in a fresh random
order `TURNS` times (`--turns`), each turn one `torch.utils.benchmark.Timer.blocked_autorange` after the
inputs moved to new memory (the runner's `MemoryLayouts`: a process's layout moves its time, so a
reference of a few fixed layouts is known only to 14-24%, issue 40). The Timer speedup is the
ratio of the variants' medians over all their turns.

Reported (issue 52's acceptance): per pair and shape, the runner's speedup over the Timer speedup
(share in 0.95-1.05) and the share of trials whose CI covers the Timer speedup; each job's stated
interval (`time/step_median_uncertainty_pct`) against the same job's median in the next trial, each
speedup CI against the next trial's speedup, and the share of jobs flagged `timing.stable=false`; and the
Timer's sets before the sweep against those after it, the reference against itself across the sweep's minutes.
`--together` runs no sweep: per trial, a sweep's rounds of the runner's own workers (`runner.execute.rounds`)
with one Timer process per variant taking turns among them (two layouts a turn), so both sides time in the
same seconds; the runner's speedup is paired by round, its CI not widened by earlier sweeps. `--single N`
times N default single runs (`+workload=rmsnorm_naive`, at its default shape or the first `--shape`) one
after another instead and reports their interval against the next run's median.
`--save FILE` keeps every number as JSON, which `--report FILE` reads back. The sweeps' folders are kept;
`--stretches DIR` profiles the first steps of their workers' stretches (a cold start reads above 1).

python benchmarks/speedup_fidelity.py [trials] [--quick] [--shape BxSxH ...] [--set KEY=VALUE ...] [--turns N]
    [--together] [--save FILE] | --single N | --report FILE | --stretches DIR
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

from mlflow import MlflowClient

from runner import names
from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config import TrackingConfig
from runner.config_loading import load_run_spec
from runner.execute.processes import ChildFailed
from runner.execute.rounds import run_round
from runner.execute.workers import prepare_workers, start_first_call, steady_state_timing
from runner.job import read_status
from runner.measure.host_memory import KEEP_ENV
from runner.measure.loop import SteadyState, layout_stretch_ends, layouts_count
from runner.measure.stability import MAX_EARLIER_RUNS, MIN_EARLIER_RUNS, worker_spread
from runner.measure.stats import TimeRatio
from runner.measure.turns import TurnsAddress
from runner.report.pairing import compare_times, with_earlier_sweeps, with_workers_spread
from runner.report.reader import Rounds, latest_sweep, metric, rounds, sweep_children, variant
from runner.sweep.rounds import JobSide, RoundJob

REPO = Path(__file__).resolve().parents[1]
BASELINE = "rmsnorm_naive"
VARIANTS = (BASELINE, "rmsnorm_builtin", "rmsnorm_compiled")
# (batch, seq_len, hidden): --quick keeps only the first
Shape = tuple[int, int, int]
SHAPES: tuple[Shape, ...] = ((4, 512, 1024), (8, 512, 1024))
TARGET = (0.95, 1.05)
# the independent side: sets of fresh processes (as the runner's rounds), turns per set, seconds per turn
SETS = 4
TURNS = 12
TURN_S = 0.1
# --together: layouts a Timer process times in each of its turns, so that the reference rests on twice the layouts
# of the runner's stretches: with one, its trial-to-trial sd of log speedup at 8x512x1024 was the runner's own
# (0.020-0.022 against 0.019-0.031), and the check measured the reference as much as the runner; with two, 0.010
# (docs/benchmarks.md)
LAYOUTS_A_TURN = 2
# a set's turn times in ms, by variant
Turns = dict[str, list[float]]


@dataclass
class Job:
    """One job of a sweep (or one single run): its median, stated interval, flag and per-round medians."""

    variant: str
    median_ms: float
    interval_pct: float
    stable: bool
    reasons: str
    round_medians_ms: list[float]
    # `time/worker_spread_pct`, the least its paired speedup's interval can be (None: a run logged before it)
    worker_spread_pct: float | None = None


@dataclass
class Speedup:
    """The runner's speedup of a variant over the baseline (baseline time over the variant's) and its 95% CI."""

    value: float
    low: float
    high: float


@dataclass
class Trial:
    """One trial of a shape: the sweep's jobs and speedups, and the Timer speedups of the same variants."""

    shape: tuple[int, int, int]
    jobs: list[Job] = field(default_factory=list)
    speedups: dict[str, Speedup] = field(default_factory=dict)
    timer_speedups: dict[str, float] = field(default_factory=dict)
    timer_set_speedups: dict[str, list[float]] = field(default_factory=dict)
    # each variant's median over its Timer turns, in ms (beside the jobs' `median_ms`: which side moved)
    timer_ms: dict[str, float] = field(default_factory=dict)
    # the Timer speedup of the sets before the sweep and of those after it
    timer_before_after: dict[str, tuple[float, float]] = field(default_factory=dict)
    # --together: the runner's workers and the Timer's processes took turns in the same rounds (no sweep, no store)
    together: bool = False


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shape_overrides(shape: tuple[int, int, int]) -> list[str]:
    batch, seq_len, hidden = shape
    return ["backend=cpu", f"workload.batch={batch}", f"workload.seq_len={seq_len}", f"workload.hidden={hidden}"]


def new_store(work: Path) -> str:
    """A migrated SQLite store holding the runner's experiment, its artifacts under `work` (not the repo)."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(TrackingConfig.experiment, artifact_location=(work / "artifacts").as_uri())
    return uri


def run_runner(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"runner exited {done.returncode}: {' '.join(args)}\n{done.stderr[-3000:]}")


def job_of(client: MlflowClient, run_id: str) -> Job:
    run = client.get_run(run_id)
    return Job(
        variant(run),
        run.data.metrics[names.STEP_MEDIAN_MS],
        run.data.metrics[names.STEP_MEDIAN_UNCERTAINTY_PCT],
        run.data.tags.get(names.TAG_TIMING_STABLE) == "true",
        run.data.tags.get(names.TAG_TIMING_REASONS) or "",
        rounds(client, run).in_order(),
        metric(run, names.WORKER_SPREAD_PCT),
    )


def runner_sweep(trial: Trial, uri: str, out: Path, extra: list[str]) -> None:
    """One default sweep of the reference study: its jobs, and each variant's paired speedup over the baseline."""
    sweep = ["-m", "+experiment=rmsnorm_comparison", *shape_overrides(trial.shape), "resume=false", *extra]
    run_runner([*sweep, f"tracking.uri={uri}", f"hydra.sweep.dir={out}"])
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(TrackingConfig.experiment)
    assert experiment is not None  # new_store made it
    children = sweep_children(client, experiment.experiment_id, latest_sweep(client, experiment.experiment_id))
    trial.jobs = [job_of(client, run.info.run_id) for run in children]


def paired_estimate(jobs: list[Job], name: str) -> TimeRatio | None:
    """The variant over the baseline, paired by round as `runner.compare` pairs one sweep's jobs."""
    samples = {job.variant: Rounds(dict(enumerate(job.round_medians_ms, start=1)), "sweep") for job in jobs}
    return compare_times(samples[BASELINE], samples[name]).estimate


def runner_speedups(jobs: list[Job], earlier: list[Trial]) -> dict[str, Speedup]:
    """Each variant's speedup over the baseline as `runner.compare` states it: paired by round, its interval at least
    the two jobs' workers' spread and widened by the earlier sweeps of the same shape (`earlier`, oldest first),
    which are what the trials' store holds.
    """
    speedups, spreads = {}, {job.variant: job.worker_spread_pct for job in jobs}
    for name in VARIANTS[1:]:
        estimate = paired_estimate(jobs, name)
        if estimate is None:
            continue
        estimate = with_workers_spread(estimate, spreads[BASELINE], spreads[name])
        before = [e.ratio for t in reversed(earlier) if (e := paired_estimate(t.jobs, name)) is not None]
        estimate = with_earlier_sweeps(estimate, before[:MAX_EARLIER_RUNS])
        # new over baseline: the speedup is its inverse
        speedups[name] = Speedup(1 / estimate.ratio, 1 / estimate.high, 1 / estimate.low)
    return speedups


def start_process(
    name: str, shape: tuple[int, int, int], number: int, in_turns: list[str] | None = None
) -> subprocess.Popen[str]:
    """A Timer process placed as the runner's worker `number`; `in_turns` (referee path, name, turns): in its turns."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *(["--in-turns", *in_turns] if in_turns else []),
        "--child",
        str(number),
        f"+workload={name}",
        *shape_overrides(shape),
    ]
    # as the runner starts its workers: its fixed malloc mode, unless the user set the variables
    env = {**KEEP_ENV, **os.environ}
    return subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def answer(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise SystemExit(f"a Timer process exited {process.wait()} without an answer")
    return line.strip()


def timer_sets(shape: tuple[int, int, int], rng: random.Random, turns_per_set: int, numbers: range) -> list[Turns]:
    """The independent side: per set (`numbers`, as the rounds), one fresh process per variant, taking turns."""
    sets = []
    for number in numbers:
        processes = {name: start_process(name, shape, number) for name in VARIANTS}
        try:
            for process in processes.values():
                answer(process)  # built, first call made, warmed up
            mine: Turns = {name: [] for name in VARIANTS}
            for _ in range(turns_per_set):
                for name in rng.sample(VARIANTS, len(VARIANTS)):
                    process = processes[name]
                    assert process.stdin is not None
                    process.stdin.write("turn\n")
                    process.stdin.flush()
                    mine[name].append(float(answer(process)))
        finally:
            for process in processes.values():
                if process.stdin is not None:
                    process.stdin.close()
                process.wait()
        sets.append(mine)
    return sets


def medians_over(sets: list[Turns]) -> dict[str, float]:
    """Each variant's median over all the sets' turns, in ms."""
    return {name: statistics.median(ms for turns in sets for ms in turns[name]) for name in VARIANTS}


def speedups_over(sets: list[Turns]) -> dict[str, float]:
    """Each variant's speedup over the baseline: the ratio of their medians over all the sets' turns."""
    medians = medians_over(sets)
    return {name: medians[BASELINE] / medians[name] for name in VARIANTS[1:]}


def take_timer_sets(trial: Trial, before: list[Turns], after: list[Turns]) -> None:
    """The Timer's speedups over all its sets, per set, and before and after the sweep; each variant's median."""
    sets = before + after
    trial.timer_speedups = speedups_over(sets)
    per_set = [speedups_over([one]) for one in sets]
    trial.timer_set_speedups = {name: [speedups[name] for speedups in per_set] for name in VARIANTS[1:]}
    if before and after:
        first, last = speedups_over(before), speedups_over(after)
        trial.timer_before_after = {name: (first[name], last[name]) for name in VARIANTS[1:]}
    trial.timer_ms = medians_over(sets)


def child(number: int, overrides: list[str], in_turns: list[str] | None) -> None:
    """In the fresh process: build the workload as the runner does, placed as its worker `number`, then time turns.

    Its turns come as lines on stdin, or with `in_turns` (referee path, name, turns) from the runner's referee,
    whose first two turns build it and warm it up as a runner's worker's do. As many turns as a worker's, so
    that none of these processes ends, and tears torch down on the round's core, while a worker still times:
    with one turn fewer, the exits fell on 22 of 27 workers' last stretches (docs/benchmarks.md).
    """
    import torch
    from torch.utils.benchmark import Timer

    from runner.backends.base import WHOLE_MACHINE
    from runner.measure.build import build_workload
    from runner.measure.layouts import MemoryLayouts
    from runner.measure.loop import WARM_CALLS, settle
    from runner.measure.turns import NoTurns, RefereedTurns, TurnsAddress

    referee = RefereedTurns(TurnsAddress(in_turns[0], in_turns[1])) if in_turns else NoTurns()
    referee.take()
    spec = load_run_spec(compose_config(*overrides, "tracking=off"))
    CpuBackend.worker_placement(spec.backend, number, WHOLE_MACHINE).take()
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    with torch.no_grad():
        workload.step()  # the first call, which compiles the compiled variant, outside the timing
        referee.give()
        referee.take()
        end = time.perf_counter() + spec.measure.warmup_s
        for _ in range(spec.measure.warmup):
            workload.step()
        while time.perf_counter() < end:
            workload.step()
        warm_ms = statistics.median(backend.time_steps(workload.step, WARM_CALLS, False))  # as the runner's warm-up
        timer = Timer("step()", globals={"step": workload.step}, num_threads=torch.get_num_threads())
        layouts = MemoryLayouts(workload.inputs)

        def turn() -> None:
            layouts.move()  # a turn's median is one layout's: the reference, like the runner, rests on many
            settle(lambda: backend.time_steps(workload.step, 1, False)[0], warm_ms)  # as the runner's stretches
            print(timer.blocked_autorange(min_run_time=TURN_S).median * 1000, flush=True)

        if in_turns:
            referee.give()
            for _ in range(int(in_turns[2])):
                referee.take()
                for _ in range(LAYOUTS_A_TURN):
                    turn()
                referee.give()
            referee.finish()
            return
        print("ready", flush=True)
        for _ in sys.stdin:
            turn()


class TimerSide:
    """A Timer process as a side of the runner's rounds (`runner.execute.rounds.Side`): its turns among the workers'."""

    def __init__(self, variant: str, shape: tuple[int, int, int], turns: int) -> None:
        self.name, self.variant, self.shape, self.turns = f"Timer {variant}", variant, shape, turns
        self._process: subprocess.Popen[str] | None = None

    def start(self, number: int, turns_at: TurnsAddress | None) -> None:
        assert turns_at is not None  # it only ever takes turns
        self._process = start_process(self.variant, self.shape, number, [turns_at.path, self.name, str(self.turns)])

    def ended(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def result(self, timeout_s: float | None = None) -> list[float]:
        """Its turns' medians in ms."""
        assert self._process is not None
        out, _ = self._process.communicate(timeout=timeout_s)
        if self._process.returncode:
            raise SystemExit(f"{self.name}'s process exited {self._process.returncode}")
        return [float(line) for line in out.split()]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def together(trial: Trial, rng: random.Random, extra: list[str]) -> None:
    """The runner's workers of a default sweep and the Timer's processes, all taking turns in the same rounds.

    As a sweep's rounds (`runner.sweep.rounds.time_rounds`): a first-call worker per variant, then per round one
    fresh worker per variant, here beside one Timer process per variant, in a fresh random order, each Timer
    process taking as many turns as a worker times stretches, `LAYOUTS_A_TURN` layouts a turn. The runner's
    speedup is paired by round as a sweep's; the Timer's is the ratio of medians over all its layouts.
    """
    turns_per_round = layouts_count(CpuBackend.traits.default_layouts)
    specs = {
        name: load_run_spec(compose_config(f"+workload={name}", *shape_overrides(trial.shape), *extra))
        for name in VARIANTS
    }
    prepare_workers(list(specs.values()))
    for name, spec in specs.items():
        with start_first_call(spec, name) as worker:
            worker.result()
    jobs = [
        RoundJob(name, name, spec, steady_state_timing(spec, CpuBackend, rounds=True).processes)
        for name, spec in specs.items()
    ]
    timed_by: dict[str, list[list[list[float]]]] = {name: [] for name in VARIANTS}
    turns: Turns = {name: [] for name in VARIANTS}
    for number in range(1, max(job.rounds for job in jobs) + 1):
        sides: list[JobSide | TimerSide] = [JobSide(index, job) for index, job in enumerate(jobs)]
        sides += [TimerSide(name, trial.shape, turns_per_round) for name in VARIANTS]
        rng.shuffle(sides)
        for side, result in zip(sides, run_round(sides, number, in_turns=True), strict=True):
            if isinstance(result, ChildFailed):
                raise SystemExit(f"round {number}: {result}")
            if isinstance(side, JobSide):
                timed_by[side.job.name].append(cast(list[list[float]], result))
            else:
                turns[side.variant] += cast(list[float], result)
    for name, step_ms in timed_by.items():
        medians = [statistics.median(ms for repeat in timed for ms in repeat) for timed in step_ms]
        spread = worker_spread(step_ms) * 100
        trial.jobs.append(Job(name, statistics.median(medians), math.nan, True, "", medians, spread))
    trial.speedups = runner_speedups(trial.jobs, [])  # no earlier sweeps to widen it
    take_timer_sets(trial, [turns], [])


def measure(trials: list[Trial], work: Path, extra: list[str], turns_per_set: int) -> None:
    uri = new_store(work)
    progress(f"store and sweep folders in {work}")
    rng, start = random.Random(0), time.perf_counter()
    for index, trial in enumerate(trials):
        if trial.together:
            together(trial, rng, extra)
        else:
            # half the Timer's sets before the sweep and half after: the host's minutes fall on both sides alike
            before = timer_sets(trial.shape, rng, turns_per_set, range(1, SETS // 2 + 1))
            runner_sweep(trial, uri, work / f"trial{index}", extra)
            trial.speedups = runner_speedups(trial.jobs, [t for t in trials[:index] if t.shape == trial.shape])
            after = timer_sets(trial.shape, rng, turns_per_set, range(SETS // 2 + 1, SETS + 1))
            take_timer_sets(trial, before, after)
        said = ", ".join(
            f"{name}: runner {trial.speedups[name].value:.3f} [{trial.speedups[name].low:.3f}, "
            f"{trial.speedups[name].high:.3f}], Timer {trial.timer_speedups[name]:.3f}"
            for name in VARIANTS[1:]
            if name in trial.speedups
        )
        progress(
            f"trial {index + 1}/{len(trials)} {'x'.join(map(str, trial.shape))}: {said} "
            f"[{time.perf_counter() - start:.0f} s]"
        )


# a stretch's first steps, whose cold start the profile shows
PROFILED_STEPS = 3


def stretch_starts(work: Path) -> None:
    """Each variant's first steps in a stretch over their worker's median, from the sweeps kept in `work`.

    A stretch that starts cold (after the other workers' turns, or a move of memory) reads above 1 there.
    """
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(TrackingConfig.experiment)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    labels = {run.data.tags[names.TAG_CONFIG_HASH]: f"{variant(run)} {run.data.params['workload.batch']}x"
              f"{run.data.params['workload.seq_len']}x{run.data.params['workload.hidden']}"
              for run in runs if names.TAG_CONFIG_HASH in run.data.tags}  # fmt: skip
    print(f"a stretch's first {PROFILED_STEPS} timed steps over their worker's median (median over workers):")
    for key, label in sorted(labels.items(), key=lambda item: item[1]):
        first: list[list[float]] = [[] for _ in range(PROFILED_STEPS)]
        later: list[list[float]] = [[] for _ in range(PROFILED_STEPS)]
        timed = [
            repeat
            for path in work.glob(f"trial*/{names.ROUNDS_FOLDER}/{key}.json")
            if (steady := SteadyState.load(path)) is not None
            for process in steady.step_ms
            for repeat in process
        ]
        for repeat in timed:
            median, start = statistics.median(repeat), 0
            for stretch, end in enumerate(layout_stretch_ends(len(repeat), CpuBackend.traits.default_layouts)):
                for place, ms in enumerate(repeat[start : min(end, start + PROFILED_STEPS)]):
                    (later if stretch else first)[place].append(ms / median)
                start = end

        def medians(by_place: list[list[float]]) -> str:
            return " ".join(f"{statistics.median(ratios):.2f}" for ratios in by_place if ratios)

        print(f"  {label}: first stretch {medians(first)}; later stretches {medians(later)} ({len(timed)} workers)")


def single_runs(count: int, work: Path, shape: tuple[int, int, int] | None, extra: list[str]) -> list[Job]:
    """`count` default single runs of the naive RMSNorm (at its default shape, or `shape`), one after another."""
    uri, found = new_store(work), []
    client, start = MlflowClient(uri), time.perf_counter()
    for number in range(count):
        out = work / f"run{number}"
        sized = shape_overrides(shape) if shape else ["backend=cpu"]
        run_runner(["+workload=rmsnorm_naive", *sized, *extra, f"tracking.uri={uri}", f"hydra.run.dir={out}"])
        job = job_of(client, (read_status(out) or {})["run_id"])
        found.append(job)
        progress(
            f"run {number + 1}/{count}: {job.median_ms:.4f} ms +-{job.interval_pct:.1f}% "
            f"stable={str(job.stable).lower()} [{time.perf_counter() - start:.0f} s]"
        )
    return found


def share(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)} ({sum(flags) / len(flags):.0%})" if flags else "0/0"


def covers(job: Job, next_ms: float) -> bool:
    """The job's stated interval holds the next identical run's median."""
    return abs(math.log(next_ms / job.median_ms)) <= math.log1p(job.interval_pct / 100)


def report_runs(series: list[list[Job]]) -> None:
    """Interval coverage over consecutive runs of each series, and the flags with their reasons."""
    pairs = [covers(a, b.median_ms) for jobs in series for a, b in zip(jobs, jobs[1:], strict=False)]
    flagged = [not job.stable for jobs in series for job in jobs]
    widths = sorted(job.interval_pct for jobs in series for job in jobs)
    print(
        f"a run's interval holds the next identical run's median: {share(pairs)} (target at least 90%); "
        f"stated +-% median {statistics.median(widths):.1f} (range {widths[0]:.1f}-{widths[-1]:.1f})"
    )
    print(f"runs flagged timing.stable=false: {share(flagged)} (target at most 30%)")
    reasons = sorted({job.reasons for jobs in series for job in jobs if not job.stable})
    for reason in reasons:
        print(f"  flagged: {reason}")


def report(trials: list[Trial]) -> None:
    print(
        f"{'pair':34} {'shape':11} {'trials':>6} {'runner/Timer (median)':>21} {'in 0.95-1.05':>13} "
        f"{'CI covers Timer':>15} {'Timer sets sd':>13}"
    )
    within_all, covered_all, timer_halves_all = [], [], []
    for shape in sorted({trial.shape for trial in trials}):
        mine = [t for t in trials if t.shape == shape]
        for name in VARIANTS[1:]:
            both = [t for t in mine if name in t.speedups and name in t.timer_speedups]
            ratios = [t.speedups[name].value / t.timer_speedups[name] for t in both]
            within = [TARGET[0] <= r <= TARGET[1] for r in ratios]
            covered = [t.speedups[name].low <= t.timer_speedups[name] <= t.speedups[name].high for t in both]
            spread = [
                statistics.stdev(map(math.log, t.timer_set_speedups[name]))
                for t in both
                if len(t.timer_set_speedups.get(name, [])) > 1
            ]
            within_all += within
            covered_all += covered
            print(
                f"{name + ' / ' + BASELINE:34} {'x'.join(map(str, shape)):11} {len(both):6} "
                f"{statistics.median(ratios) if ratios else math.nan:21.3f} {share(within):>13} "
                f"{share(covered):>15} {statistics.median(spread) if spread else math.nan:13.3f}"
            )
            print(f"{'':34} runner/Timer per trial: {' '.join(f'{r:.3f}' for r in ratios)}")
            halves = [t.timer_before_after[name] for t in both if name in t.timer_before_after]
            if halves:  # the reference against itself across the sweep's minutes
                moved = [before / after for before, after in halves]
                timer_halves_all += [TARGET[0] <= r <= TARGET[1] for r in moved]
                print(
                    f"{'':34} the Timer's sets before the sweep over those after it: "
                    f"{' '.join(f'{r:.3f}' for r in moved)}, within {TARGET[0]}-{TARGET[1]} "
                    f"{share([TARGET[0] <= r <= TARGET[1] for r in moved])}"
                )
            if len(both) > 1:  # who moves from trial to trial: the ratio's variance is the two sides' together
                runner_sd = statistics.stdev(math.log(t.speedups[name].value) for t in both)
                timer_sd = statistics.stdev(math.log(t.timer_speedups[name]) for t in both)
                print(
                    f"{'':34} trial-to-trial sd of log speedup: runner {runner_sd:.3f}, Timer {timer_sd:.3f}, "
                    f"their ratio {statistics.stdev(map(math.log, ratios)):.3f}"
                )
    print(
        f"all pairs: runner speedup within {TARGET[0]}-{TARGET[1]} of the Timer speedup {share(within_all)}, "
        f"its 95% CI covering it {share(covered_all)} (targets at least 90% each)"
    )
    if timer_halves_all:
        print(
            f"all pairs: the Timer before the sweep within {TARGET[0]}-{TARGET[1]} of after it: "
            f"{share(timer_halves_all)}"
        )
    for shape in sorted({trial.shape for trial in trials}):
        timed = [t for t in trials if t.shape == shape and t.timer_ms]
        for name in VARIANTS if timed else ():
            ratios = [job.median_ms / t.timer_ms[name] for t in timed for job in t.jobs if job.variant == name]
            print(
                f"{name} {'x'.join(map(str, shape))}: the runner's median over the Timer's, per trial: "
                + " ".join(f"{ratio:.3f}" for ratio in ratios)
            )
    if any(t.together for t in trials):  # no sweep: no interval, no flag, no earlier sweeps
        return
    reruns, widened = [], []
    for shape in sorted({trial.shape for trial in trials}):
        mine = [t for t in trials if t.shape == shape]
        for index, (a, b) in enumerate(zip(mine, mine[1:], strict=False)):
            held = [
                a.speedups[n].low <= b.speedups[n].value <= a.speedups[n].high
                for n in VARIANTS[1:]
                if n in a.speedups and n in b.speedups
            ]
            reruns += held
            widened += held if index >= MIN_EARLIER_RUNS else []
    print(
        f"a sweep's speedup CI holds its rerun's speedup: {share(reruns)} (target at least 90%); "
        f"of those with {MIN_EARLIER_RUNS} or more earlier sweeps (widened by them): {share(widened)}"
    )
    series = [
        [job for t in trials if t.shape == shape for job in t.jobs if job.variant == name]
        for shape in sorted({t.shape for t in trials})
        for name in VARIANTS
    ]
    report_runs(series)


def load(saved: Path) -> tuple[list[Trial], list[Job]]:
    """A --save file's trials, their speedups computed again from the rounds by today's `compare_times`."""
    data = json.loads(saved.read_text())
    trials: list[Trial] = []
    for saved_trial in data["trials"]:
        jobs = [Job(**job) for job in saved_trial["jobs"]]
        timer, per_set = saved_trial["timer_speedups"], saved_trial["timer_set_speedups"]
        shape, timer_ms = tuple(saved_trial["shape"]), saved_trial.get("timer_ms", {})
        halves = {name: (before, after) for name, (before, after) in saved_trial.get("timer_before_after", {}).items()}
        together = saved_trial.get("together", False)  # its speedups are its rounds' alone
        earlier = [] if together else [t for t in trials if t.shape == shape and not t.together]
        speedups = runner_speedups(jobs, earlier)
        trials.append(Trial(shape, jobs, speedups, timer, per_set, timer_ms, halves, together))
    return trials, [Job(**j) for j in data["single"]]


def save(path: Path, trials: list[Trial], single: list[Job]) -> None:
    path.write_text(
        json.dumps({"trials": [asdict(t) for t in trials], "single": [asdict(j) for j in single]}, indent=1)
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trials", nargs="?", type=int, default=10, help="trials per shape (default 10)")
    parser.add_argument("--quick", action="store_true", help="only the smallest shape")
    parser.add_argument("--shape", action="append", metavar="BxSxH", help="these shapes instead (repeatable)")
    parser.add_argument("--single", type=int, metavar="N", help="N default single runs instead of sweeps")
    parser.add_argument("--save", type=Path, help="write every number to this JSON file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    parser.add_argument("--turns", type=int, default=TURNS, help=f"the reference's turns per set (default {TURNS})")
    parser.add_argument("--report", type=Path, help="read a --save file back and report it")
    parser.add_argument("--stretches", type=Path, metavar="DIR", help="profile the stretches of the sweeps kept in DIR")
    parser.add_argument(
        "--together", action="store_true", help="the runner's workers and the Timer's in the same rounds, no sweep"
    )
    parser.add_argument("--in-turns", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child(int(args.child[0]), args.child[1:], args.in_turns)
        return
    if args.stretches is not None:
        stretch_starts(args.stretches)
        return
    single: list[Job] = []
    if args.report is not None:
        trials, single = load(args.report)
    else:
        shapes = [cast(Shape, tuple(map(int, s.split("x")))) for s in args.shape] if args.shape else list(SHAPES)
        shapes = shapes[:1] if args.quick else shapes
        trials = [] if args.single else [Trial(s, together=args.together) for _ in range(args.trials) for s in shapes]
        work = Path(tempfile.mkdtemp(prefix="speedup-fidelity-"))
        try:
            if args.single:
                shape = tuple(shapes[0]) if args.shape else None
                single = single_runs(args.single, work, shape, args.set)  # type: ignore[arg-type]
            else:
                measure(trials, work, args.set, args.turns)
                if not args.together:
                    stretch_starts(work)
        finally:  # what was measured is kept, even when a run failed or Ctrl-C stopped it
            trials = [t for t in trials if t.jobs and t.timer_speedups]
            if args.save is not None:
                save(args.save, trials, single)
    if trials:
        report(trials)
    if single:
        report_runs([single])


if __name__ == "__main__":
    main()
