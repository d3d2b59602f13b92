"""Compare runs side by side, from MLflow alone: `python -m runner.compare`.

By default the latest sweep of the default experiment: one row per run (failed runs as failed),
and for two finished runs the per-op diff. `--replay`, `--diff` and `--memory` refuse a run that did
not finish. The table, the choice of runs and the sweep's report are `runner.report`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.utils.mlflow_tags import MLFLOW_USER

from runner import names
from runner.report.reader import label, logged_table, trace_files
from runner.report.selection import (
    add_selection_arguments,
    find_run,
    missing_op_table,
    not_compared,
    open_experiment,
    pick_baseline,
    require_finished,
    require_op_table,
    selected_runs,
)
from runner.report.sweep_report import ui_links
from runner.report.table import FORMATS, comparison_rows, op_diff, render, unresolved_note, without_empty_columns
from runner.signals import skip_final_collections

_USAGE_EXIT = 2  # bad input: argparse's status, and runner.gate's and runner.history's for what they cannot find


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m runner.compare",
        description=__doc__.splitlines()[0],
        epilog=f"exit status: 0 compared; {_USAGE_EXIT} bad options, or no such store, experiment, sweep or run",
    )
    add_selection_arguments(parser)
    add = parser.add_argument
    add("--baseline", help="run id (or its prefix) or workload name for speedups (default: the first run)")
    add("--format", choices=FORMATS, default="table", help="output format (default: table)")
    add("--plots", metavar="DIR", help="also write the PNG plots into DIR")
    add("--replay", metavar="RUN", help="print commands that run this run's top ATen ops alone")
    add("--top", type=int, default=3, help="how many ops --replay covers (default: 3)")
    add("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="align two runs' traces and show what changed, where")
    add("--memory", nargs=2, metavar=("BEFORE", "AFTER"), help="which allocation sites account for the change in "
        "memory peak (runs with measure.memory_snapshot=true)")  # fmt: skip
    add("--depth", type=int, default=3, help="levels below the step --diff prints (default: 3)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be >= 1, got {args.top}")
    if args.depth < 0:
        parser.error(f"--depth must be >= 0, got {args.depth}")
    return args


def _print_replays(client: MlflowClient, run: Run, top: int, output_format: str) -> int:
    """`--replay`: the commands that run the run's top ops alone."""
    from runner.report.replay import render_replays, top_replays

    require_finished(run, "--replay", "not replayed")
    require_op_table(client, run)
    replays, clock = top_replays(client, run, top)
    if not replays:
        raise SystemExit(f"error: --replay {run.info.run_id}: the run has no ATen ops in its op table")
    as_json = output_format == "json"
    print(json.dumps([asdict(r) for r in replays], indent=2) if as_json else render_replays(run, replays, clock))
    return 0


def _print_trace_diff(client: MlflowClient, experiment_id: str, keys: list[str], depth: int, output_format: str) -> int:
    """`--diff`: the aligned tree on stdout; diff.md, diff.json and perfetto.json logged to the newer run."""
    from runner.measure.traces import load_profile
    from runner.report import trace_diff

    runs = [find_run(client, experiment_id, key, "--diff") for key in keys]
    for run in runs:
        require_finished(run, "--diff", "not compared")
    with tempfile.TemporaryDirectory() as scratch:
        profiles = []
        for number, run in enumerate(runs):
            paths = trace_files(client, run, Path(scratch) / str(number))
            if not paths:
                raise SystemExit(
                    f"error: --diff {run.info.run_id}: the run has no profiler trace among its artifacts "
                    "(profiler.enabled=false, or the trace stayed local: see its artifacts_kept_local.json)"
                )
            try:
                profiles.append(load_profile(paths))
            except ValueError as err:
                raise SystemExit(f"error: --diff {run.info.run_id}: {err}") from None
    before, after = profiles
    root = trace_diff.diff_profiles(before, after)
    run_names = (f"before: {label(runs[0])}", f"after: {label(runs[1])}")
    tree = trace_diff.render_tree(root, depth)
    legend = trace_diff.legend(label(runs[0]), label(runs[1]), before, after)
    newer = max(runs, key=lambda run: run.info.start_time).info.run_id
    folder = f"{names.TRACE_DIFF_FOLDER}/{runs[0].info.run_id[:8]}_to_{runs[1].info.run_id[:8]}"
    whole_tree = trace_diff.render_tree(root, depth=len(root.walk()))
    documents = {
        names.DIFF_TEXT_FILE: f"# Trace diff\n\n```\n{legend}\n```\n\n```\n{whole_tree}\n```\n",
        names.DIFF_FILE: json.dumps(trace_diff.to_json(root), indent=2),
        names.DIFF_PERFETTO_FILE: json.dumps(trace_diff.perfetto_trace(root, before, after, run_names)),
    }
    with tempfile.TemporaryDirectory() as scratch:  # written whole first, then logged in one call
        for name, text in documents.items():
            (Path(scratch) / name).write_text(text)
        client.log_artifacts(newer, scratch, folder)
    print(documents[names.DIFF_FILE] if output_format == "json" else f"{legend}\n\n{tree}")
    print(
        f"\nlogged to run {newer}: {folder}/diff.md, diff.json and perfetto.json "
        "(open perfetto.json at https://ui.perfetto.dev)",
        file=sys.stderr,
    )
    return 0


def _print_memory_diff(client: MlflowClient, experiment_id: str, keys: list[str], output_format: str) -> int:
    """`--memory`: the sites live at each run's peak, the largest change first, and the change in peak."""
    from runner.report.memory_diff import change_rows, readable_bytes, signed_bytes, site_changes, sites_of

    runs = [find_run(client, experiment_id, key, "--memory") for key in keys]
    peaks = []
    for run in runs:
        require_finished(run, "--memory", "not compared")
        table = logged_table(client, run, names.MEMORY_SITES_FILE)
        if table is None:
            raise SystemExit(
                f"error: --memory {run.info.run_id}: the run has no {names.MEMORY_SITES_FILE} "
                "(run it with measure.memory_snapshot=true)"
            )
        peaks.append(sites_of(table))
    changes = site_changes(*peaks)
    before, after = (sum(sites.values()) for sites in peaks)
    sources = [str(run.data.tags.get(names.TAG_MEMORY_SOURCE)) for run in runs]
    if output_format == "json":
        document = {
            "before": {"run": runs[0].info.run_id, "peak_bytes": before, "source": sources[0]},
            "after": {"run": runs[1].info.run_id, "peak_bytes": after, "source": sources[1]},
            "change_bytes": after - before,
            "sites": [{**asdict(c), "change": c.change} for c in changes],
        }
        print(json.dumps(document, indent=2))
        return 0
    by_site = render(change_rows(changes), output_format)
    if output_format == "csv":  # the rows alone, for other programs
        print(by_site)
        return 0
    print(f"memory peak by allocation site: {label(runs[0])} -> {label(runs[1])}\n")
    print(by_site)
    print(f"\ntotal: peak {readable_bytes(before)} -> {readable_bytes(after)} ({signed_bytes(after - before)})")
    if sources[0] != sources[1]:
        print(f"note: the peaks come from different sources ({sources[0]}; {sources[1]}): their sites differ in kind")
    return 0


def _describe_sweep(parent: Run) -> str:
    """Which sweep the table is: on a shared store the latest sweep may be another user's, from another host."""
    user = parent.data.tags.get(MLFLOW_USER) or parent.info.user_id  # older parents: the store's "unknown"
    started = datetime.fromtimestamp(parent.info.start_time / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        f"{parent.info.run_name} (parent run {parent.info.run_id}) by {user} on "
        f"{parent.data.tags.get(names.TAG_HOST, 'an unknown host')}, started {started}"
    )


def main(argv: list[str] | None = None) -> int:
    """Print the comparison (and, for two runs, the per-op diff)."""
    args = parse_args(argv)
    client, experiment_id = open_experiment(args)
    if args.replay:
        return _print_replays(client, find_run(client, experiment_id, args.replay, "--replay"), args.top, args.format)
    if args.diff:
        return _print_trace_diff(client, experiment_id, args.diff, args.depth, args.format)
    if args.memory:
        return _print_memory_diff(client, experiment_id, args.memory, args.format)
    runs, parent = selected_runs(client, experiment_id, args)
    baseline = pick_baseline(runs, args.baseline)
    rows = comparison_rows(client, runs, baseline, parent)
    two = len(runs) == 2
    not_diffed = not_compared(runs) if two else None
    if two and not_diffed is None:  # a run whose op table is gone leaves the table whole and the diff out
        not_diffed = next((f"not compared: {why}" for run in runs if (why := missing_op_table(client, run))), None)
    diff = op_diff(client, runs[0], runs[1]) if two and not_diffed is None else None
    if args.format == "json":  # one document: the runs, and the per-op diff of two (or why there is none)
        document = {"runs": rows, "op_diff": diff, **({"op_diff_note": not_diffed} if not_diffed else {})}
        print(json.dumps(document if two else rows, indent=2))
    else:  # a CSV keeps every column for other programs
        if parent is not None and args.format == "table":
            print(_describe_sweep(parent) + "\n")
        print(render(rows if args.format == "csv" else without_empty_columns(rows), args.format))
        if args.format == "table" and (note := unresolved_note(rows)):
            print(note)
        if diff is not None:
            print(f"\nper-op diff: {label(runs[0])} -> {label(runs[1])}\n")
            print(render(diff, args.format))
        elif not_diffed is not None:
            print(f"\nper-op diff: {not_diffed}")
    if args.format == "table":  # the other formats are data for other programs
        print(f"\n{ui_links(client, runs, parent, rows)}")
    if args.plots:
        from runner.report.plots import write_plots

        for path in write_plots(client, runs, args.plots):
            print(f"wrote {path}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """`main`, its one-line refusals exiting 2, as argparse's do and runner.gate's and runner.history's."""
    try:
        return main(argv)
    except SystemExit as refused:
        if not isinstance(refused.code, str):  # argparse's own exits, --help
            raise
        print(refused.code, file=sys.stderr)
        return _USAGE_EXIT


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(cli())
