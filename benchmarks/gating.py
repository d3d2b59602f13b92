"""What the gate benchmarks share: a store of their own, a runner job, a copy of the project in git, the gate."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from git_copy import project_repository  # benchmarks/git_copy.py, beside this script
from mlflow import MlflowClient
from mlflow.entities import Run
from scipy.stats import binomtest

from runner.config import TrackingConfig
from runner.job import read_status

REPO = Path(__file__).resolve().parents[1]


def progress(message: str) -> None:
    """A progress line on stderr: these benchmarks take minutes."""
    print(message, file=sys.stderr, flush=True)


def new_store(work: Path) -> str:
    """A migrated SQLite store holding the runner's experiment, its artifacts under `work` (not the repo)."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(TrackingConfig.experiment, artifact_location=(work / "artifacts").as_uri())
    return uri


def run_job(uri: str, out: Path, overrides: list[str], env: dict[str, str] | None = None) -> Run:
    """One runner job (with extra environment variables); its MLflow run."""
    cmd = [sys.executable, "-m", "runner", *overrides, f"tracking.uri={uri}", f"hydra.run.dir={out}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"runner exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return MlflowClient(uri).get_run((read_status(out) or {})["run_id"])


@dataclass
class GateTry:
    """One gate: its exit status, its row (with both sides' per-round medians) and its wall time."""

    code: int
    row: dict[str, Any]
    seconds: float


def project_copy(work: Path, extra: tuple[str, ...] = ()) -> Path:
    """A git repository under `work` with a copy of the project (and `extra` paths), committed once."""
    return project_repository(Path(tempfile.mkdtemp(prefix="repo-", dir=work)), extra)


def gate_against(repo: Path, rev: str, fail_above: float, rounds: int | None, overrides: list[str]) -> GateTry:
    """`python -m runner.gate --against REV` run from `repo`'s tree, as CI would run it there.

    Its row (with both sides' per-round medians and the orders) is appended to tries.jsonl
    beside the repository, for a look at the rounds after.
    """
    cmd = [
        sys.executable, "-m", "runner.gate", "--against", rev, "--fail-above", str(fail_above), "--format", "json",
        *(["--rounds", str(rounds)] if rounds else []), *overrides,
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env={**env, "PYTHONPATH": str(repo)})
    if done.returncode not in (0, 1):
        raise SystemExit(f"gate exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    (row,) = json.loads(done.stdout)
    attempt = GateTry(done.returncode, row, time.perf_counter() - start)
    with (repo.parent / "tries.jsonl").open("a") as tries:
        tries.write(json.dumps({"exit": attempt.code, "seconds": attempt.seconds, **row}) + "\n")
    return attempt


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """The options both gate benchmarks take: the gate's margin and rounds, and extra runner overrides."""
    parser.add_argument("--fail-above", type=float, default=5.0, metavar="PCT", help="the gate's margin (default 5)")
    parser.add_argument("--rounds", type=int, help="the gate's --rounds (default: the gate's)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override, e.g. measure.steps=400"
    )


class Spreads(NamedTuple):
    """How a gate's log(job / baseline) spread, and the rounds in which the job read slower."""

    round_sd: float  # over the rounds
    pair_sd: float  # over the server pairs, each its rounds' geometric means (the values the gate's test pairs)
    expected_pair_sd: float  # what the pairs would spread by their rounds alone: the rounds' sd within a pair / sqrt(k)
    slower: int


def spreads(row: dict[str, Any]) -> Spreads:
    """The spreads of one gate's row (`--format json`: both sides' per-round medians and each round's server pair)."""
    logs = np.log(np.asarray(row["job rounds ms"]) / np.asarray(row["baseline rounds ms"]))
    servers = np.asarray(row["servers"])
    numbers = sorted(set(row["servers"]))
    means = {number: logs[servers == number].mean() for number in numbers}
    residuals = logs - np.array([means[number] for number in row["servers"]])
    freedom = len(logs) - len(numbers)
    within = float(np.sqrt((residuals**2).sum() / freedom)) if freedom else float("nan")
    return Spreads(
        float(np.std(logs, ddof=1)),
        float(np.std(list(means.values()), ddof=1)),
        within / np.sqrt(len(logs) / len(numbers)),
        int((logs > 0).sum()),
    )


def try_line(number: int, attempt: GateTry) -> str:
    """One try's row: times, change, what the gate could catch, exit status, seconds, spreads, verdict."""
    row, spread = attempt.row, spreads(attempt.row)
    slower = f"{spread.slower}/{len(row['servers'])}"
    return (
        f"{number:>4} {row['baseline ms']:>11} {row['job ms']:>9}  {row['change (95% CI)']:26} "
        f"{row['caught from']:>11}  {attempt.code:>4}  {attempt.seconds:>5.0f}  {spread.round_sd:>8.1%} "
        f"{spread.pair_sd:>7.1%} {spread.expected_pair_sd:>8.1%} {slower:>7}  {row['verdict']}"
    )


TRY_HEADER = (
    f"{'try':>4} {'baseline ms':>11} {'job ms':>9}  {'change (95% CI)':26} {'caught from':>11}  exit  {'s':>5}  "
    f"{'round sd':>8} {'pair sd':>7} {'expected':>8} {'slower':>7}  verdict"
)
SPREADS_LEGEND = (
    "round sd, pair sd: the sd of log(job / baseline) over the rounds and over the server pairs (each pair's "
    "rounds' geometric means); expected: the pair sd the rounds predict (their sd within a pair / sqrt(rounds a "
    "pair)); slower: the rounds in which the job read slower"
)


def rate_line(what: str, hits: int, total: int, fail_above: float, target: str) -> str:
    """'what: hits of total (--fail-above PCT) = rate (95% CI low to high); target ...' (Clopper-Pearson)."""
    low, high = binomtest(hits, total).proportion_ci(0.95)
    return (
        f"{what}: {hits} of {total} (--fail-above {fail_above:g}) = {hits / total:.1%} "
        f"(95% CI {low:.1%} to {high:.1%}); target {target}"
    )
