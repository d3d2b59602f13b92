"""What the gate benchmarks share: a store of their own, a runner job, the gate as CI runs it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

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


def gate(uri: str, run_id: str, baseline_id: str, fail_above: float) -> tuple[int, dict[str, str]]:
    """The gate's exit status and its one row, as CI would run it."""
    cmd = [
        sys.executable, "-m", "runner.gate", "--runs", run_id, "--baseline", baseline_id,
        "--fail-above", str(fail_above), "--uri", uri, "--format", "json",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"gate exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    (row,) = json.loads(done.stdout)
    return done.returncode, row


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """The options both gate benchmarks take: the gate's margin and extra runner overrides."""
    parser.add_argument("--fail-above", type=float, default=5.0, metavar="PCT", help="the gate's margin (default 5)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override, e.g. measure.processes=5"
    )


def rate_line(what: str, hits: int, total: int, fail_above: float, target: str) -> str:
    """'what: hits of total (--fail-above PCT) = rate (95% CI low to high); target ...' (Clopper-Pearson)."""
    low, high = binomtest(hits, total).proportion_ci(0.95)
    return (
        f"{what}: {hits} of {total} (--fail-above {fail_above:g}) = {hits / total:.1%} "
        f"(95% CI {low:.1%} to {high:.1%}); target {target}"
    )
