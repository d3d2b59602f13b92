"""Reading runs back from MLflow: names, metrics, op tables and a sweep's jobs (shared by the comparison and plots)."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.chrome_trace import read_chrome_trace


def label(run: Run) -> str:
    """The run's readable name."""
    return str(run.info.run_name or run.info.run_id[:8])


def variant(run: Run) -> str:
    """What a study's curve is drawn for: the run's workload option (rmsnorm_naive, ...)."""
    return str(run.data.tags.get(names.TAG_WORKLOAD) or label(run))


def configuration(run: Run) -> str:
    """What a run's step times compare within: its config hash, and the clock unless the host's (older runs').

    The same config timed by another clock is another series: a new clock is not a step in its history.
    """
    config_hash = run.data.tags.get(names.TAG_CONFIG_HASH, "")
    clock = run.data.tags.get(names.TAG_STEP_CLOCK, names.STEP_CLOCK_HOST).split(",")[0]
    return config_hash if clock == names.STEP_CLOCK_HOST else f"{config_hash}-{clock}"


def metric(run: Run, key: str) -> float | None:
    """A metric of the run, None when absent or NaN."""
    value = run.data.metrics.get(key)
    return None if value is None or math.isnan(value) else value


def price_per_hour(run: Run) -> float | None:
    """The run's backend.price_per_hour (what its device costs), None when not set."""
    price = run.data.params.get("backend.price_per_hour")
    return None if price in (None, "None", "null") else float(price)


def dollars_per_million_steps(price: float, step_ms: float) -> float:
    """What a million steps of `step_ms` cost at `price` per hour."""
    return price / 3600 * step_ms / 1000 * 1e6


@dataclass(frozen=True)
class Rounds:
    """A run's steady-state medians by round, and the id of the rounds they were timed in."""

    medians: dict[int, float]  # round number (from 1) -> the run's median step time in ms that round
    rounds_id: str | None  # runs with the same id had their workers interleaved round by round; None for older runs

    def in_order(self) -> list[float]:
        """The per-process medians in process order (a run's workers are its rounds); empty for older runs."""
        return [self.medians[number] for number in sorted(self.medians)]


def rounds(client: MlflowClient, run: Run) -> Rounds:
    """The run's medians by round: step k of `time/process_median_ms` is round k + 1."""
    history = client.get_metric_history(run.info.run_id, names.PROCESS_MEDIAN_MS)
    return Rounds({m.step + 1: m.value for m in history}, run.data.tags.get(names.TAG_ROUNDS_ID))


def share_rounds(a: Rounds, b: Rounds) -> bool:
    """Both runs have rounds, timed in the same rounds (the same `timing.rounds_id`): they pair by round."""
    return a.rounds_id is not None and a.rounds_id == b.rounds_id and bool(a.medians) and bool(b.medians)


def op_table(client: MlflowClient, run: Run) -> dict[str, Any]:
    """The run's op table artifact ({"columns": [...], "data": [...]}) or empty; refused if a newer runner logged it."""
    # a run without the version tag was logged before the tag existed, in version 1's layout
    version = run.data.tags.get(names.TAG_OP_TABLE_VERSION, str(names.OP_TABLE_UNTAGGED_VERSION))
    readable = [str(known) for known in names.OP_TABLE_READABLE_VERSIONS]
    if version not in readable:
        raise SystemExit(
            f"error: run {run.info.run_id}: {names.TAG_OP_TABLE_VERSION}={version} is an op table layout this "
            f"runner cannot read (it reads {', '.join(readable)}); read it with the runner that logged it"
        )
    return logged_table(client, run, names.OP_TABLE_FILE) or {"columns": [], "data": []}


def logged_table(client: MlflowClient, run: Run, artifact_file: str) -> dict[str, Any] | None:
    """A table the run logged with mlflow.log_table ({"columns": [...], "data": [...]}), None when it has none."""
    try:
        path = client.download_artifacts(run.info.run_id, artifact_file)
    except Exception:
        return None
    with open(path) as f:
        return dict(json.load(f))


@dataclass
class OpStats:
    """One op of one run, merged across input shapes: per-step numbers and per-cycle samples."""

    calls_per_step: float = 0.0
    self_ms_per_step: float = 0.0
    cycle_samples: list[float] | None = None


def per_op(table: dict[str, Any], active_steps: float) -> dict[str, OpStats]:
    """Merge an op table's rows by op name (device self time when present, else CPU)."""
    columns = table["columns"]
    clock = names.self_time_column(names.OP_SELF_DEVICE_MS in columns)
    ops: dict[str, OpStats] = defaultdict(OpStats)
    for values in table["data"]:
        row = dict(zip(columns, values, strict=True))
        if str(row[names.OP_NAME]).startswith(names.OP_STEP_PREFIX):
            continue
        stats = ops[row[names.OP_NAME]]
        stats.calls_per_step += row[names.OP_CALLS_PER_STEP]
        stats.self_ms_per_step += row[clock] / active_steps
        if row.get(names.OP_CYCLE_SELF_MS):
            samples = json.loads(row[names.OP_CYCLE_SELF_MS])
            merged = stats.cycle_samples or [0.0] * len(samples)
            stats.cycle_samples = [a + b for a, b in zip(merged, samples, strict=False)]
    return dict(ops)


def trace_files(client: MlflowClient, run: Run, dest: Path) -> list[Path]:
    """The run's profiler traces (Chrome JSON, one per recorded cycle), downloaded under `dest`.

    Any `*.json` artifact in a folder that holds `traceEvents` counts (file names differ by exporter and age),
    except the diffs `runner.compare --diff` logged and the traces of ranks other than 0 (their steps differ).
    """
    found = []
    other_ranks = re.compile(names.RANK_FOLDER.format(rank=r"\d+"))
    top = [info.path for info in client.list_artifacts(run.info.run_id) if info.is_dir]
    folders = [path for path in top if path != names.TRACE_DIFF_FOLDER and not other_ranks.fullmatch(path)]
    while folders:
        for info in client.list_artifacts(run.info.run_id, folders.pop()):
            if info.is_dir:
                folders.append(info.path)
            elif info.path.endswith(".json"):
                folder = dest / Path(info.path).parent  # every cycle's file has the same name: keep them apart
                folder.mkdir(parents=True, exist_ok=True)
                path = Path(client.download_artifacts(run.info.run_id, info.path, str(folder)))
                if read_chrome_trace(path) is not None:
                    found.append(path)
    return sorted(found)


def latest_sweep(client: MlflowClient, experiment_id: str) -> Run:
    """The most recent sweep parent run of the experiment."""
    parents = client.search_runs([experiment_id], "tags.`runner.sweep` = 'true'", order_by=["start_time DESC"])
    if not parents:
        raise SystemExit("error: no sweep in this experiment; run one with python -m runner -m ..., or pass --runs")
    return parents[0]


def sweep_children(client: MlflowClient, experiment_id: str, parent: Run) -> list[Run]:
    """A sweep's job runs, oldest first: its children, and the FINISHED runs its skipped jobs reused."""
    query = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    runs = list(client.search_runs([experiment_id], query))
    reused = parent.data.tags.get(names.TAG_REUSED_RUNS, "")
    runs += [client.get_run(run_id) for run_id in reused.split(",") if run_id]
    return sorted(runs, key=lambda run: run.info.start_time)


def find_sweep(client: MlflowClient, experiment_id: str, key: str) -> Run:
    """A sweep parent by run id or by run name."""
    try:
        return client.get_run(key)
    except Exception:
        found = client.search_runs([experiment_id], f"attributes.run_name = '{key}'")
        if not found:
            raise SystemExit(f"error: --sweep {key!r} is neither a run id nor a run name in this experiment") from None
        return found[0]
