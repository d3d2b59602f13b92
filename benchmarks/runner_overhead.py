"""Wall time of one runner invocation against the hand-written script doing the same work.

Alternates the two commands (so machine noise hits both alike), each against a fresh copy of
an already-migrated SQLite store, and prints the ratio of medians. Target: <= 1.10.

python benchmarks/runner_overhead.py [rounds]
"""

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="runner-bench-"))
    template = work / "template.db"
    subprocess.run(
        [sys.executable, "-c", f"import mlflow; mlflow.MlflowClient('sqlite:///{template}').search_experiments()"],
        check=True,
        capture_output=True,
    )
    times: dict[str, list[float]] = {"runner": [], "minimal": []}
    for i in range(rounds):
        for name in ("runner", "minimal") if i % 2 == 0 else ("minimal", "runner"):
            db = work / f"{name}{i}.db"
            shutil.copy(template, db)
            out = work / f"{name}{i}"
            cmd = (
                [
                    sys.executable,
                    "-m",
                    "runner",
                    "+workload=rmsnorm_naive",
                    "backend=cpu",
                    f"tracking.uri=sqlite:///{db}",
                    f"hydra.run.dir={out}",
                ]
                if name == "runner"
                else [sys.executable, "benchmarks/minimal_profile.py", f"sqlite:///{db}", str(out)]
            )
            times[name].append(timed(cmd))
        print(f"round {i + 1}/{rounds}: runner {times['runner'][-1]:.2f} s, minimal {times['minimal'][-1]:.2f} s")
    runner, minimal = statistics.median(times["runner"]), statistics.median(times["minimal"])
    print(f"median wall time: runner {runner:.2f} s, hand-written {minimal:.2f} s")
    print(f"ratio runner/hand-written: {runner / minimal:.3f} (target <= 1.10)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
