"""Timing fidelity: the runner's steady-state median against torch.utils.benchmark.Timer.

For the naive, built-in and compiled RMSNorm at three shapes, each round runs, per cell, one
whole runner job (`python -m runner`, default measure: 3 worker processes of 200 steps) and
reads its time/step_median_ms and timing.stable back from MLflow; and, in a fresh Python
process with the same malloc mode as the runner's workers (KEEP_ENV), builds the same module
and inputs as the runner does and times its step with `Timer(...).blocked_autorange()`.
Which of the two goes first alternates from round to round, so drifting machine noise hits
both alike. Target per cell: runner/Timer within 0.95 to 1.05, or the runner flagged the
run unstable (timing.stable=false), so that no silently wrong number gets through.

python benchmarks/timing_fidelity.py [rounds] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlflow import MlflowClient

from runner import names
from runner.config import TrackingConfig
from runner.job import read_status
from runner.measure.host_memory import KEEP_ENV

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")
# (batch, seq_len, hidden), smallest first: --quick keeps only the first
SHAPES = ((4, 128, 512), (8, 128, 1024), (8, 512, 1024))
# Timer's measuring time per cell; the runner's 3 x 200 steps take about as long at the middle shape
TIMER_MIN_RUN_TIME_S = 1.0
TARGET = (0.95, 1.05)


@dataclass
class Cell:
    """One variant at one shape, and what each round measured."""

    variant: str
    shape: tuple[int, int, int]
    runner_ms: list[float] = field(default_factory=list)
    timer_ms: list[float] = field(default_factory=list)
    stable: list[bool] = field(default_factory=list)

    def overrides(self) -> list[str]:
        """The Hydra overrides that select this cell."""
        batch, seq_len, hidden = self.shape
        return [
            f"+workload={self.variant}",
            "backend=cpu",
            f"workload.batch={batch}",
            f"workload.seq_len={seq_len}",
            f"workload.hidden={hidden}",
        ]

    def ratios(self) -> list[float]:
        """runner/Timer per round."""
        return [ours / theirs for ours, theirs in zip(self.runner_ms, self.timer_ms, strict=True)]

    def verdict(self) -> str:
        """In target, flagged unstable by the runner, or missed: out of target with no flag."""
        if TARGET[0] <= statistics.median(self.ratios()) <= TARGET[1]:
            return "in target"
        return "flagged unstable" if not all(self.stable) else "MISSED"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shape_text(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def new_store(work: Path) -> str:
    """A migrated SQLite store holding the runner's experiment, its artifacts under `work` (not the repo)."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(TrackingConfig.experiment, artifact_location=(work / "artifacts").as_uri())
    return uri


def runner_median(cell: Cell, uri: str, out: Path) -> tuple[float, bool]:
    """One runner job on the cell: its time/step_median_ms and timing.stable."""
    cmd = [sys.executable, "-m", "runner", *cell.overrides(), f"tracking.uri={uri}", f"hydra.run.dir={out}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"runner exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    run = MlflowClient(uri).get_run((read_status(out) or {})["run_id"])
    return run.data.metrics[names.STEP_MEDIAN_MS], run.data.tags.get(names.TAG_TIMING_STABLE) == "true"


def timer_median(cell: Cell) -> float:
    """Timer's median in ms, from a fresh process in the runner workers' malloc mode."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--timer-child", *cell.overrides()]
    # as the runner starts its workers: its fixed mode, unless the user set the variables
    env = {**KEEP_ENV, **os.environ}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"Timer process exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def timer_child(overrides: list[str]) -> None:
    """In the fresh process: build the workload as the runner does, time its step, print the median in ms."""
    import torch
    from torch.utils.benchmark import Timer

    from runner.backends.base import WHOLE_MACHINE
    from runner.backends.cpu import CpuBackend
    from runner.compose import compose_config
    from runner.config import load_run_spec
    from runner.measure.build import build_workload

    spec = load_run_spec(compose_config(*overrides, "tracking=off"))
    # where and on how many threads the runner's first worker times its steps
    CpuBackend.worker_placement(spec.backend, 1, WHOLE_MACHINE).take()
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    # the very step the runner times: the module on its inputs, under no_grad
    timer = Timer(
        "step()",
        globals={"step": workload.step},
        num_threads=torch.get_num_threads(),  # Timer defaults to one thread; the runner's workers' count
    )
    with torch.no_grad():
        workload.step()  # the first call, which compiles the compiled variant, outside the timing
        for _ in range(spec.measure.warmup):  # the runner's warm-up calls
            workload.step()
        median_s = timer.blocked_autorange(min_run_time=TIMER_MIN_RUN_TIME_S).median
    print(median_s * 1000)


def main(rounds: int, quick: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="timing-fidelity-"))
    uri = new_store(work)
    progress(f"store and job folders in {work}")
    cells = [Cell(v, s) for s in (SHAPES[:1] if quick else SHAPES) for v in VARIANTS]
    start = time.perf_counter()
    for i in range(rounds):
        for number, cell in enumerate(cells):
            for side in ("runner", "Timer") if i % 2 == 0 else ("Timer", "runner"):
                if side == "runner":
                    median, stable = runner_median(cell, uri, work / f"round{i}-cell{number}")
                    cell.runner_ms.append(median)
                    cell.stable.append(stable)
                else:
                    cell.timer_ms.append(timer_median(cell))
            progress(
                f"round {i + 1}/{rounds} {cell.variant} {shape_text(cell.shape)}: runner {cell.runner_ms[-1]:.4f} ms "
                f"(stable={str(cell.stable[-1]).lower()}), Timer {cell.timer_ms[-1]:.4f} ms, "
                f"ratio {cell.ratios()[-1]:.3f} [{time.perf_counter() - start:.0f} s]"
            )
    print(f"{'variant':17} {'shape':11} {'runner ms':>10} {'Timer ms':>10} {'ratio':>6}  {'stable':11} verdict")
    for cell in cells:
        stable = ",".join("yes" if s else "NO" for s in cell.stable)
        print(
            f"{cell.variant:17} {shape_text(cell.shape):11} {statistics.median(cell.runner_ms):10.4f} "
            f"{statistics.median(cell.timer_ms):10.4f} {statistics.median(cell.ratios()):6.3f}  {stable:11} "
            f"{cell.verdict()}  (per round: {' '.join(f'{r:.3f}' for r in cell.ratios())})"
        )
    verdicts = [cell.verdict() for cell in cells]
    print(
        f"{verdicts.count('in target')} of {len(cells)} cells in target ({TARGET[0]}-{TARGET[1]}), "
        f"{verdicts.count('flagged unstable')} flagged unstable, {verdicts.count('MISSED')} missed "
        f"(target: none missed); ratio is the median over {rounds} round(s) of runner/Timer"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--quick", action="store_true", help=f"only the smallest shape, {shape_text(SHAPES[0])}")
    parser.add_argument("--timer-child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    if args.timer_child is not None:
        timer_child(args.timer_child)
    else:
        main(args.rounds, args.quick)
