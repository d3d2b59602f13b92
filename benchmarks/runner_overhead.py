"""Wall time of the runner against hand-written scripts doing the same profiling, side by side.

One job (P1): `python -m runner +workload=rmsnorm_naive` against `benchmarks/minimal_profile.py`
at the same shape (target: at most 1.25x). The sweep (P2, `--sweep`): the three-variant study
`-m +experiment=rmsnorm_comparison` against the three hand-written scripts run one after another
(target: the sweep at least 2x faster, a ratio of at most 0.5). The runner does more than the
scripts (timed worker rounds, accuracy, stability verdicts): the ratio is what that costs.
Each round alternates which side goes first, so drifting machine noise hits both alike; each
command gets a fresh copy of an already-migrated SQLite store. Prints the ratio of medians.

python benchmarks/runner_overhead.py [rounds] [--sweep] [--shape B S H]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("naive", "builtin", "compiled")
TARGETS = {"job": ("<=", 1.25), "sweep": ("<=", 0.5)}


def timed(commands: list[list[str]]) -> float:
    """Seconds to run the commands one after another."""
    start = time.perf_counter()
    for cmd in commands:
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def runner_commands(db: Path, out: Path, sweep: bool, shape: list[int]) -> list[list[str]]:
    """The runner's one invocation: a single job, or the three-variant sweep."""
    size = [f"workload.batch={shape[0]}", f"workload.seq_len={shape[1]}", f"workload.hidden={shape[2]}"]
    mode = ["-m", "+experiment=rmsnorm_comparison", f"hydra.sweep.dir={out}"] if sweep else [
        "+workload=rmsnorm_naive", f"hydra.run.dir={out}"]  # fmt: skip
    return [[sys.executable, "-m", "runner", *mode, "backend=cpu", *size, f"tracking.uri=sqlite:///{db}"]]


def script_commands(db: Path, out: Path, sweep: bool, shape: list[int]) -> list[list[str]]:
    """The hand-written scripts: one for the naive variant, or one per variant."""
    script = [sys.executable, "benchmarks/minimal_profile.py", f"sqlite:///{db}"]
    variants = VARIANTS if sweep else VARIANTS[:1]
    return [[*script, str(out / variant), variant, *map(str, shape)] for variant in variants]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=6)
    parser.add_argument("--sweep", action="store_true", help="the three-variant sweep against three scripts (P2)")
    parser.add_argument("--shape", type=int, nargs=3, default=[4, 512, 1024], metavar=("B", "S", "H"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="runner-bench-"))
    template = work / "template.db"
    subprocess.run(
        [sys.executable, "-c", f"import mlflow; mlflow.MlflowClient('sqlite:///{template}').search_experiments()"],
        check=True,
        capture_output=True,
    )
    sides = {"runner": runner_commands, "hand-written": script_commands}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(args.rounds):
        for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
            db, out = work / f"{name}{i}.db", work / f"{name}{i}"
            shutil.copy(template, db)
            times[name].append(timed(sides[name](db, out, args.sweep, args.shape)))
        print(f"round {i + 1}/{args.rounds}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items()), flush=True)
    runner, scripts = statistics.median(times["runner"]), statistics.median(times["hand-written"])
    what = "the three-variant sweep against three scripts" if args.sweep else "one job against one script"
    sign, target = TARGETS["sweep" if args.sweep else "job"]
    print(f"{what}, shape {'x'.join(map(str, args.shape))}: median runner {runner:.2f} s, hand-written {scripts:.2f} s")
    print(f"ratio runner/hand-written: {runner / scripts:.3f} (target {sign} {target})")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
