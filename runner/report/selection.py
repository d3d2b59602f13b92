"""Which runs a command reads: the store and experiment, a sweep's jobs or runs by id, the baseline, and the refusals.

Their options (`--uri`, `--experiment`, `--sweep`, `--runs`) are shared by `runner.compare`, `gate` and `history`.
"""

from __future__ import annotations

import argparse
import os
import re

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from runner import names
from runner.config import ConfigError, TrackingConfig
from runner.job import JobStatus
from runner.report.reader import find_sweep, label, latest_sweep, sweep_children
from runner.secrets import redact
from runner.tracking.store import check_usable, mlflow_client, sqlite_path

# the same store and experiment a job logs to by default (tracking=local)
DEFAULT_EXPERIMENT = TrackingConfig.experiment
DEFAULT_URI = TrackingConfig.uri
_WHOLE_RUN_ID = re.compile(r"[0-9a-f]{32}")  # a whole MLflow run id (uuid4 hex), as opposed to a prefix of one


def find_run(client: MlflowClient, experiment_id: str, key: str, option: str = "--runs") -> Run:
    """A run by its id, or by an unambiguous prefix of it (as the MLflow UI shortens them)."""
    try:
        return client.get_run(key)
    except MlflowException:  # not a whole id: look for a prefix
        pass
    every = client.search_runs([experiment_id], max_results=50000)
    matches = [run.info.run_id for run in every if run.info.run_id.startswith(key)]
    if len(matches) > 1:
        raise SystemExit(f"error: {option} {key!r}: {len(matches)} runs in this experiment have an id starting so; "
                         "give more of it")  # fmt: skip
    if not matches:
        if _WHOLE_RUN_ID.fullmatch(key):  # get_run looked in every experiment
            raise SystemExit(f"error: {option} {key!r}: no run has this id in this store")
        raise SystemExit(f"error: {option} {key!r}: no run in this experiment has an id starting so")
    return client.get_run(matches[0])


def not_compared(runs: list[Run]) -> str | None:
    """Why these runs' ops or traces are not compared: the first run that did not finish; None when all did."""
    unfinished = next((run for run in runs if run.info.status != JobStatus.FINISHED), None)
    return None if unfinished is None else f"not compared: run {label(unfinished)} {unfinished.info.status}"


def require_finished(run: Run, option: str, refusal: str) -> None:
    """Exit in one line for a run that did not finish: its ops and trace are not a finished run's."""
    if run.info.status != JobStatus.FINISHED:
        raise SystemExit(f"error: {option} {run.info.run_id}: {refusal}: run {run.info.status}")


def missing_op_table(client: MlflowClient, run: Run) -> str | None:
    """Why the run's ops cannot be read, naming it, when its op table is gone from its artifacts; None when it is there.

    Read as it is, a missing table would diff as every op gone.
    """
    if names.OP_TABLE_FILE in {info.path for info in client.list_artifacts(run.info.run_id)}:
        return None
    return (
        f"run {run.info.run_id} ({label(run)}): its op table {names.OP_TABLE_FILE} is missing from its "
        "artifacts (were they deleted?); its ops cannot be read"
    )


def require_op_table(client: MlflowClient, run: Run) -> None:
    """Exit in one line, naming the run, when its op table is gone from its artifacts (`missing_op_table`)."""
    if (missing := missing_op_table(client, run)) is not None:
        raise SystemExit(f"error: {missing}")


def pick_baseline(runs: list[Run], key: str | None) -> Run | None:
    """--baseline as a run id, an unambiguous prefix of one (as --runs takes), or a workload name; default the first."""
    if key is None:
        return runs[0] if runs else None
    for run in runs:
        if key in (run.info.run_id, run.data.tags.get(names.TAG_WORKLOAD), label(run)):
            return run
    prefixed = {run.info.run_id: run for run in runs if run.info.run_id.startswith(key)}
    if len(prefixed) > 1:
        raise SystemExit(f"error: --baseline {key!r}: {len(prefixed)} compared runs have an id starting so; "
                         "give more of it")  # fmt: skip
    if prefixed:
        return next(iter(prefixed.values()))
    raise SystemExit(f"error: --baseline {key!r} matches no compared run (give a run id or a workload name)")


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which store, experiment and runs (shared with runner.gate)."""
    parser.add_argument("--sweep", help="sweep parent run id or name (default: the latest sweep)")
    parser.add_argument("--runs", nargs="+", metavar="ID", help="compare these runs instead of a sweep")
    add_store_arguments(parser)


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which store and experiment (shared with runner.history)."""
    uri_help = f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else {DEFAULT_URI})"
    parser.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI), help=uri_help)
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="MLflow experiment (default: runner)")


def open_experiment(args: argparse.Namespace) -> tuple[MlflowClient, str]:
    """The store's client and the experiment's id; a one-line exit when either is missing."""
    path = sqlite_path(args.uri)
    if path is not None and not path.exists():
        raise SystemExit(f"error: --uri {redact(args.uri)}: no MLflow store there (run a job first, or pass --uri)")
    try:
        check_usable(args.uri)  # a missing driver or an unreachable server, in one line
    except ConfigError as err:
        raise SystemExit(f"error: {str(err).replace('tracking.uri=', '--uri ', 1)}") from None
    client = mlflow_client(args.uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"error: --experiment {args.experiment!r} does not exist in this tracking store")
    return client, experiment.experiment_id


def selected_runs(client: MlflowClient, experiment_id: str, args: argparse.Namespace) -> tuple[list[Run], Run | None]:
    """The runs --runs names, or the jobs of --sweep (default: the latest), with the sweep's parent."""
    if args.runs:
        return [find_run(client, experiment_id, key) for key in args.runs], None
    parent = find_sweep(client, experiment_id, args.sweep) if args.sweep else latest_sweep(client, experiment_id)
    return sweep_children(client, experiment_id, parent), parent
